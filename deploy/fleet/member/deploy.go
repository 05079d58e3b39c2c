package member

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// deploy fetches the bundle of p from the centre — the delta from what the
// package's repository holds — and deploys it as the agent's upload endpoint deploys
// an upload: verified with the cluster's own trusted keys before anything
// is pushed, its Package naming the key Secrets that verified it, with
// p's values, components and timeout, labelled with p's placement, not
// waited for. A refusal (a *refusal) leaves the registry and the
// Packages as they were.
func (a *Agent) deploy(ctx context.Context, c *wire.Client, p wire.DesiredPackage) error {
	host, reg, err := a.registry(ctx)
	if err != nil {
		return err
	}
	have, err := a.receipt(ctx, host, reg, p.Name)
	if err != nil {
		return err
	}
	f, err := scratch.CreateTemp(a.Spool, "ferry-fleet-bundle-*")
	if err != nil {
		return fmt.Errorf("spool the bundle of %s: %w", p.Name, err)
	}
	path := f.Name()
	defer os.Remove(path)
	var w io.Writer = f
	if a.MaxBundle > 0 {
		w = &boundedWriter{w: f, left: a.MaxBundle}
	}
	bctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sw := &stallWriter{w: w, stall: a.stallTimeout(), cancel: cancel}
	defer sw.stop()
	start := a.now()
	size, err := c.Bundle(bctx, wire.BundleRequest{Repository: p.Repository, Digest: p.Digest, Receipt: have}, sw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var tooBig *bundleTooBig
	switch {
	case errors.As(err, &tooBig):
		return refuse(ReasonInvalidBundle, "the centre's bundle of %s is larger than the agent takes (%d bytes)", p.Name, a.MaxBundle)
	case err != nil && errors.Is(context.Cause(bctx), errStalled):
		return fmt.Errorf("fetch the bundle of %s: the centre sent no byte of the bundle for %s (%d bytes in)", p.Name, a.stallTimeout(), size)
	case err != nil:
		return fmt.Errorf("fetch the bundle of %s: %w", p.Name, err)
	}
	name := fmt.Sprintf("the centre's bundle of %s", p.Name)
	r, err := artifact.OpenAs(ctx, path, name)
	if err != nil {
		return refuse(ReasonInvalidBundle, "%w", err)
	}
	if got := r.Root().Digest.String(); got != p.Digest {
		return refuse(ReasonBundleMismatch, "%s holds %s, not %s as asked", name, got, p.Digest)
	}
	if got := r.Config().Name; got != p.Name {
		return refuse(ReasonBundleMismatch, "%s is package %s, not %s", name, got, p.Name)
	}
	if _, err := rollout.SelectComponents(r.Config(), p.Components); err != nil {
		return refuse(ReasonInvalidDesired, "%s: %w", name, err)
	}
	values, err := decodeValues(p.Values)
	if err != nil {
		return refuse(ReasonInvalidDesired, "%s: %w", name, err)
	}
	keys, err := deploy.TrustedKeys(ctx, a.Client, a.ns())
	switch {
	case errors.Is(err, deploy.ErrNoTrustedKey):
		return refuse(ReasonNoTrustedKey, "%s: %w", name, err)
	case err != nil:
		return err
	}
	vr, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: keys})
	if err != nil {
		return refuse(ReasonVerificationFailed, "%w", err)
	}
	d := &deploy.Deploy{
		Client: a.Client, Packages: a.Packages, Namespace: a.ns(), Registry: host,
		Verified: true, Components: p.Components, Values: values, NoWait: true,
		Labels: map[string]string{LabelPlacement: p.Placement},
	}
	if p.TimeoutSeconds > 0 {
		d.Timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	seen := map[string]bool{}
	for _, sig := range vr.Signatures {
		if !seen[sig.Key] {
			seen[sig.Key] = true
			d.KeySecrets = append(d.KeySecrets, pkgapi.KeyReference{Kind: "Secret", Name: sig.Key, Key: deploy.KeyFile})
		}
	}
	res, err := d.Run(ctx, r)
	if res != nil && res.Pushed != nil {
		a.st.stale = true
	}
	if err != nil {
		if errors.Is(err, artifact.ErrMissingBlobs) {
			a.st.stale = true
		}
		return err
	}
	a.log().Info("fleet: deployed", "package", p.Name, "version", r.Config().Version, "digest", p.Digest, "placement", p.Placement,
		"bundle", size, "pushed", res.Pushed.BytesPushed, "took", a.now().Sub(start).Round(time.Millisecond).String())
	return nil
}

// registry is where the agent reaches the in-cluster registry, and a
// client for it with the registry's account (as deploy.Deploy's push).
func (a *Agent) registry(ctx context.Context) (string, registry.Registry, error) {
	host := a.Registry
	if host == "" {
		var err error
		if host, err = kube.ServiceHost(ctx, a.Client, a.ns(), cluster.RegistryName); err != nil {
			return "", nil, fmt.Errorf("the registry: %w", err)
		}
	}
	_, cred, err := rollout.RegistryAccess(ctx, a.Client, a.ns())
	if err != nil {
		return "", nil, fmt.Errorf("the registry's account: %w", err)
	}
	reg, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}.Registry(host)
	if err != nil {
		return "", nil, err
	}
	return host, reg, nil
}

// receipt is the receipt (its JSON) of what the registry holds in
// repository: the package's own for a bundle (a delta is completed in the
// repository the package is pushed to, and nowhere else — not even one
// under it), all of it ("") for a report. Receipts are kept until a
// deploy or a deletion makes them stale, or for ReceiptMaxAge.
func (a *Agent) receipt(ctx context.Context, host string, reg registry.Registry, repository string) ([]byte, error) {
	if a.st.stale {
		a.st.receipts, a.st.stale = nil, false
	}
	if r, ok := a.st.receipts[repository]; ok && a.now().Sub(r.at) < ReceiptMaxAge {
		return r.data, nil
	}
	var rc *artifact.Receipt
	var err error
	if repository == "" {
		rc, err = artifact.HaveRegistry(ctx, reg, host, "")
	} else {
		rc, err = artifact.HaveRepository(ctx, reg, host+"/"+repository, repository)
	}
	if err != nil {
		return nil, fmt.Errorf("list what the registry holds: %w", err)
	}
	data, err := rc.Marshal()
	if err != nil {
		return nil, err
	}
	if a.st.receipts == nil {
		a.st.receipts = map[string]receipt{}
	}
	a.st.receipts[repository] = receipt{data: data, at: a.now()}
	return data, nil
}

// boundedWriter fails a write past its bound.
type boundedWriter struct {
	w    io.Writer
	left int64
}

type bundleTooBig struct{}

func (bundleTooBig) Error() string { return "the bundle is larger than the agent takes" }

func (b *boundedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, &bundleTooBig{}
	}
	b.left -= int64(len(p))
	return b.w.Write(p)
}

// errStalled is why a bundle was cut off: nothing came for a while.
var errStalled = errors.New("the bundle stalled")

// stallWriter passes a bundle's bytes on and cancels its fetch once none
// has come for stall since the last (the first arms it: the centre makes
// the delta before it answers).
type stallWriter struct {
	w      io.Writer
	stall  time.Duration
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func (s *stallWriter) Write(p []byte) (int, error) {
	if s.timer == nil {
		s.timer = time.AfterFunc(s.stall, func() { s.cancel(errStalled) })
	} else {
		s.timer.Reset(s.stall)
	}
	return s.w.Write(p)
}

func (s *stallWriter) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
}
