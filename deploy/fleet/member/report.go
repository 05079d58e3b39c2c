package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// maxHeartbeatReceipt bounds the receipt a heartbeat carries, leaving room
// in wire.MaxReport for the packages; a larger one reaches the centre only
// in bundle requests (and report files).
const maxHeartbeatReceipt = wire.MaxReport - 512<<10

// packagesOf lists the Packages of ns as a report tells them, those a
// placement put there first, at most wire.MaxPackages. A cluster without
// the Package API has none.
func packagesOf(ctx context.Context, pc client.Client, ns string) ([]v1alpha1.MemberPackage, error) {
	pkgs, err := listPackages(ctx, pc, ns)
	if err != nil {
		return nil, err
	}
	return memberPackages(pkgs), nil
}

// listPackages lists the Packages of ns in a report's order, at most
// wire.MaxPackages.
func listPackages(ctx context.Context, pc client.Client, ns string) ([]pkgapi.Package, error) {
	var list pkgapi.PackageList
	if err := pc.List(ctx, &list, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the Packages of %s: %w", ns, err)
	}
	pkgs := list.Items
	slices.SortFunc(pkgs, func(x, y pkgapi.Package) int {
		return reportOrder(x.Labels[LabelPlacement], x.Name, y.Labels[LabelPlacement], y.Name)
	})
	return pkgs[:min(len(pkgs), wire.MaxPackages)], nil
}

func memberPackages(pkgs []pkgapi.Package) []v1alpha1.MemberPackage {
	out := make([]v1alpha1.MemberPackage, 0, len(pkgs))
	for i := range pkgs {
		out = append(out, memberPackage(&pkgs[i]))
	}
	return out
}

// boundPackages sorts packages by name, those a placement put there
// first, and keeps at most wire.MaxPackages.
func boundPackages(pkgs []v1alpha1.MemberPackage) []v1alpha1.MemberPackage {
	slices.SortFunc(pkgs, func(x, y v1alpha1.MemberPackage) int { return reportOrder(x.Placement, x.Name, y.Placement, y.Name) })
	return pkgs[:min(len(pkgs), wire.MaxPackages)]
}

// reportOrder orders packages by name, those a placement put there first.
func reportOrder(xPlacement, xName, yPlacement, yName string) int {
	if (xPlacement == "") != (yPlacement == "") {
		if xPlacement != "" {
			return -1
		}
		return 1
	}
	return strings.Compare(xName, yName)
}

// maxReportPayload is the most of a report's JSON a report file holds: the
// file (wire.MaxReportFile) carries it in base64, with its signature and,
// added by WriteReport, the site's public key, token and labels.
const maxReportPayload = (wire.MaxReportFile - 256<<10) / 4 * 3

// repositoryReceipts makes the receipt of the repository each of pkgs
// names (artifact.HaveRepository; each repository once), in pkgs' order,
// as long as they fit in budget bytes of the report's JSON. One left out
// costs the bundle of its package the bytes the site holds already, never
// the bundle: the centre makes it against no receipt.
func repositoryReceipts(ctx context.Context, reg registry.Registry, name string, pkgs []pkgapi.Package, budget int) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for i := range pkgs {
		repo := pkgs[i].Spec.Repository
		if _, done := out[repo]; done || repo == "" {
			continue
		}
		rc, err := artifact.HaveRepository(ctx, reg, name+"/"+repo, repo)
		if err != nil {
			return nil, fmt.Errorf("list what repository %s holds: %w", repo, err)
		}
		data, err := json.Marshal(rc)
		if err != nil {
			return nil, err
		}
		// "repo":{…}, as the report's JSON writes it.
		if need := len(data) + len(repo) + 4; need <= budget {
			budget -= need
			out[repo] = data
		}
	}
	return out, nil
}

// report is the agent's heartbeat: its Packages with what it knows of the
// desired ones, and its receipt when the centre has not taken that one
// yet. It returns the receipt's hash.
func (a *Agent) report(ctx context.Context, s *state) (*wire.Report, string, error) {
	pkgs, err := packagesOf(ctx, a.Packages, a.ns())
	if err != nil {
		return nil, "", err
	}
	rep := &wire.Report{Member: s.Name, Created: a.now().UTC(), Agent: a.Version, Packages: boundPackages(a.overlay(pkgs))}
	host, reg, err := a.registry(ctx)
	var data []byte
	if err == nil {
		data, err = a.receipt(ctx, host, reg, "")
	}
	if err != nil {
		a.log().Warn("fleet: the report goes without a receipt", "error", oneLine(err.Error()))
		return rep, "", nil
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	if hash != a.st.receiptSent && len(data) <= maxHeartbeatReceipt {
		rep.Receipt = data
	}
	return rep, hash, nil
}

// Report is what the member of namespace ns reports now: its name (its
// Secret's, if it has one), every Package of ns (with the placement that
// put it there, its version, digest, Ready, and the controller's refusal),
// and, when reg is set (reaching the in-cluster registry, as the agent or
// a tunnel does), the receipt of what that registry holds and one of the
// repository each Package names (wire.Report.Repositories).
func Report(ctx context.Context, cs kubernetes.Interface, pc client.Client, ns string, reg registry.Registry) (*wire.Report, error) {
	rep := &wire.Report{}
	s, err := readState(ctx, cs, ns)
	switch {
	case err == nil:
		rep.Member = s.Name
	case !errors.Is(err, ErrNotMember):
		return nil, err
	}
	pkgs, err := listPackages(ctx, pc, ns)
	if err != nil {
		return nil, err
	}
	rep.Packages = memberPackages(pkgs)
	if reg == nil {
		return rep, nil
	}
	name := cluster.RegistryName + "." + ns
	rc, err := artifact.HaveRegistry(ctx, reg, name, "")
	if err != nil {
		return nil, fmt.Errorf("list what the registry holds: %w", err)
	}
	if rep.Receipt, err = rc.Marshal(); err != nil {
		return nil, err
	}
	sofar, err := json.Marshal(rep)
	if err != nil {
		return nil, err
	}
	if rep.Repositories, err = repositoryReceipts(ctx, reg, name, pkgs, maxReportPayload-len(sofar)); err != nil {
		return nil, err
	}
	return rep, nil
}

// ReportFileOptions are what a report file carries beyond the cluster's
// state.
type ReportFileOptions struct {
	// Token is a join token, carried by the reports written until the
	// member is imported (and kept in the Secret until then).
	Token string
	// Name names the member when its Secret names none; it may not rename
	// one.
	Name string
	// Labels replace the member's labels, carried by its first reports.
	Labels map[string]string
	// Agent is ferry's version.
	Agent string
}

// WriteReport writes the report of the member of namespace ns to path,
// signed with its site key, atomically (internal/atomicfile): what a
// carried member's person takes to the centre. A cluster without the
// Secret SecretName gets one, of mode Carried, and its site key. Until
// the member is imported (no joinedAt), the report carries the site's
// public key, its token and its labels: the centre registers it with
// them. It returns the report written.
func WriteReport(ctx context.Context, cs kubernetes.Interface, pc client.Client, ns string, reg registry.Registry, path string, opts ReportFileOptions) (*wire.Report, error) {
	if opts.Token != "" {
		if _, err := wire.ParseToken(opts.Token); err != nil {
			return nil, err
		}
	}
	if opts.Name != "" && !wire.ValidMemberName(opts.Name) {
		return nil, fmt.Errorf("the member name %q is not a DNS label (lowercase letters, digits and '-', at most 63)", truncate(opts.Name))
	}
	if err := checkAsked(opts.Labels); err != nil {
		return nil, err
	}
	s, err := mutate(ctx, cs, ns, true, func(s *state) error {
		before := *s
		if s.Mode == "" {
			s.Mode = v1alpha1.Carried
		}
		if err := s.ensureKey(); err != nil {
			return err
		}
		if opts.Name != "" && s.Name != "" && s.Name != opts.Name {
			return fmt.Errorf("the member is named %s already (Secret %s/%s)", s.Name, ns, SecretName)
		}
		if opts.Name != "" {
			s.Name = opts.Name
		}
		if s.Name == "" {
			return fmt.Errorf("the member has no name: name it (Secret %s/%s names none)", ns, SecretName)
		}
		if opts.Token != "" && !s.joined() {
			s.Token = strings.TrimSpace(opts.Token)
		}
		if opts.Labels != nil {
			s.Labels = opts.Labels
		}
		if s.Mode == before.Mode && s.SiteKey == before.SiteKey && s.PublicKey == before.PublicKey && s.Name == before.Name &&
			s.Token == before.Token && (opts.Labels == nil || sameLabels(opts.Labels, before.Labels)) {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	key, err := wire.ParseSiteKey([]byte(s.SiteKey))
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", ns, SecretName, err)
	}
	rep, err := Report(ctx, cs, pc, ns, reg)
	if err != nil {
		return nil, err
	}
	rep.Member, rep.Agent = s.Name, opts.Agent
	rep.Created = time.Now().UTC()
	if s.JoinedAt.IsZero() {
		rep.PublicKey, rep.Token, rep.Labels = s.PublicKey, s.Token, s.Labels
	}
	data, err := wire.SignReport(rep, key)
	if err != nil {
		return nil, err
	}
	if len(data) > wire.MaxReportFile {
		return nil, fmt.Errorf("the report is %d bytes, more than the centre takes (%d)", len(data), wire.MaxReportFile)
	}
	// The report may carry a join token: for its owner's eyes.
	if _, err := atomicfile.Write(path, 0o600, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		return nil, err
	}
	return rep, nil
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// ensureKey makes the site key if the state has none, and its public
// half if that is missing. A site key that does not parse is an error:
// it is the site's identity, never replaced behind its back.
func (s *state) ensureKey() error {
	var k *wire.SiteKey
	var err error
	if s.SiteKey == "" {
		if k, err = wire.NewSiteKey(); err != nil {
			return err
		}
		priv, err := k.PrivatePEM()
		if err != nil {
			return err
		}
		s.SiteKey = string(priv)
	} else if k, err = wire.ParseSiteKey([]byte(s.SiteKey)); err != nil {
		return fmt.Errorf("Secret %s: %w", SecretName, err)
	}
	pub, err := k.PublicPEM()
	if err != nil {
		return err
	}
	s.PublicKey = string(pub)
	return nil
}

// ensureSiteKey makes the member's site key if its Secret has none, and
// returns the Secret's state.
func ensureSiteKey(ctx context.Context, cs kubernetes.Interface, ns string) (*state, error) {
	return mutate(ctx, cs, ns, false, func(s *state) error {
		before := s.PublicKey + s.SiteKey
		if err := s.ensureKey(); err != nil {
			return err
		}
		if s.PublicKey+s.SiteKey == before {
			return errUnchanged
		}
		return nil
	})
}
