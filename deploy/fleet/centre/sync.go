package centre

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// serveSync is a member's heartbeat: its report recorded, its desired
// state answered. The report must be the credential's member's.
func (c *Centre) serveSync(w http.ResponseWriter, r *http.Request) (string, error) {
	ctx := r.Context()
	m, err := c.authenticate(r)
	if err != nil {
		return "", err
	}
	done, err := c.only(r.URL.Path, m.Name)
	if err != nil {
		return m.Name, err
	}
	defer done()
	var rep wire.Report
	if err := c.readJSON(w, r, wire.MaxReport, "report", &rep); err != nil {
		return m.Name, err
	}
	if rep.Member != m.Name {
		return m.Name, refuse(http.StatusForbidden, nil, "the report is member %q's, not member %s's whose credential it bears", truncate(rep.Member), m.Name)
	}
	u, err := readReport(&rep)
	if err != nil {
		return m.Name, err
	}
	u.seen, u.interval = c.now(), c.interval()
	if err := c.record(ctx, m, u); err != nil {
		return m.Name, err
	}
	d, err := c.desired(ctx, m)
	if err != nil {
		return m.Name, err
	}
	writeJSON(w, http.StatusOK, d)
	return m.Name, nil
}

// report is what a member's report (a heartbeat or an imported file)
// changes in its status.
type report struct {
	packages []v1alpha1.MemberPackage
	agent    string
	// receipt is the receipt as the centre stores it (canonical JSON), if
	// the report carries one.
	receipt     []byte
	receiptInfo *artifact.Receipt
	// repositories are the receipts of single repositories, as stored,
	// if the report carries them (non-nil, even empty).
	repositories map[string][]byte
	// seen is when it was made: now for a heartbeat, the report's creation
	// for a file.
	seen time.Time
	// interval is the heartbeat (connected members).
	interval time.Duration
	// always writes lastSeen (an import) even when nothing else changed.
	always bool
}

var reDigest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// readReport checks a report's packages and receipt: a field of the wrong
// shape is refused (400); free text is cut to a line of bounded length.
func readReport(rep *wire.Report) (*report, error) {
	if len(rep.Packages) > wire.MaxPackages {
		return nil, refuse(http.StatusRequestEntityTooLarge, nil, "the report lists %d packages, more than %d", len(rep.Packages), wire.MaxPackages)
	}
	u := &report{agent: clip(rep.Agent, 128), packages: make([]v1alpha1.MemberPackage, 0, len(rep.Packages))}
	for i, p := range rep.Packages {
		if errs := validation.IsDNS1123Subdomain(p.Name); len(errs) > 0 {
			return nil, refuse(http.StatusBadRequest, nil, "the report's package %d: name %q: %s", i, truncate(p.Name), errs[0])
		}
		if p.Placement != "" {
			if errs := validation.IsDNS1123Subdomain(p.Placement); len(errs) > 0 {
				return nil, refuse(http.StatusBadRequest, nil, "the report's package %s: placement %q: %s", p.Name, truncate(p.Placement), errs[0])
			}
		}
		for _, d := range []string{p.Digest, p.Target} {
			if d != "" && !reDigest.MatchString(d) {
				return nil, refuse(http.StatusBadRequest, nil, "the report's package %s: %q is not a digest (sha256:<64 hex digits>)", p.Name, truncate(d))
			}
		}
		p.Version, p.Reason, p.Message = clip(p.Version, 128), clip(p.Reason, 128), clip(p.Message, 1024)
		u.packages = append(u.packages, p)
	}
	if len(rep.Receipt) > 0 && !bytes.Equal(bytes.TrimSpace(rep.Receipt), []byte("null")) {
		rc, err := artifact.ParseReceipt(rep.Receipt)
		if err != nil {
			return nil, badReceipt("the report", err)
		}
		if u.receipt, err = rc.Marshal(); err != nil {
			return nil, err
		}
		u.receiptInfo = rc
	}
	if rep.Repositories != nil {
		if n := len(rep.Repositories); n > wire.MaxPackages {
			return nil, refuse(http.StatusRequestEntityTooLarge, nil, "the report carries receipts of %d repositories, more than %d", n, wire.MaxPackages)
		}
		u.repositories = make(map[string][]byte, len(rep.Repositories))
		for repo, raw := range rep.Repositories {
			if len(repo) > 255 || !reRepository.MatchString(repo) {
				return nil, refuse(http.StatusBadRequest, nil, "the report carries a receipt of %q, which is not a repository name", truncate(repo))
			}
			rc, err := artifact.ParseReceipt(raw)
			if err != nil {
				return nil, badReceipt("the report's repository "+repo, err)
			}
			if u.repositories[repo], err = rc.Marshal(); err != nil {
				return nil, err
			}
		}
	}
	return u, nil
}

// reRepository is the form of a repository name (the distribution
// specification's).
var reRepository = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// badReceipt refuses a receipt that does not parse.
func badReceipt(where string, err error) error {
	return refuse(http.StatusBadRequest, nil, "%s carries a receipt that is not one: %s", where, strings.TrimPrefix(err.Error(), "receipt: "))
}

// record writes what a report tells into the member's status: its
// packages, agent, receipts (stored in the registry first; those of a
// report that carries any replace all those before) and lastSeen. A
// heartbeat that changes nothing else writes lastSeen at most once per
// interval. A conflicting write is tried again on the Member read anew.
func (c *Centre) record(ctx context.Context, m *v1alpha1.Member, u *report) error {
	var stored *storedReceipts
	if u.receipt != nil || u.repositories != nil {
		var err error
		if stored, err = c.storeReceipts(ctx, m.Name, u.receipt, u.repositories); err != nil {
			return err
		}
	}
	first, changed := true, false
	var before v1alpha1.MemberStatus
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := c.fresh().Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
			if m.Spec.Revoked {
				return refuse(http.StatusForbidden, ErrRevoked, "member %s is revoked", m.Name)
			}
		}
		first = false
		before = m.Status
		st := m.Status.DeepCopy()
		st.Packages, st.Agent = u.packages, u.agent
		if u.interval > 0 {
			st.Interval = &metav1.Duration{Duration: u.interval}
		}
		switch {
		case stored != nil && u.receiptInfo != nil:
			st.Receipt, st.ReceiptBlobs, st.ReceiptBytes = stored.whole, len(u.receiptInfo.Blobs), u.receiptInfo.Size()
		case stored != nil:
			st.Receipt, st.ReceiptBlobs, st.ReceiptBytes = "", 0, 0
		}
		if stored != nil {
			st.Receipts = stored.manifest
		}
		changed = !apiequality.Semantic.DeepEqual(st, &m.Status)
		last := m.Status.LastSeen
		if !changed && !u.always && last != nil && u.seen.Sub(last.Time) < c.interval() {
			return nil
		}
		seen := metav1.NewTime(u.seen)
		st.LastSeen = &seen
		m.Status = *st
		return c.Client.Status().Update(ctx, m)
	})
	if apierrors.IsNotFound(err) {
		return refuse(http.StatusForbidden, ErrNotFound, "member %s is not in the fleet (deleted)", m.Name)
	}
	if err != nil {
		return fmt.Errorf("write member %s's status: %w", m.Name, err)
	}
	if stored != nil {
		c.dropReceipts(ctx, m.Name, before, stored)
	}
	if changed {
		c.kick()
	}
	return nil
}

// clip cuts free text to one line of at most n bytes (whole characters).
func clip(s string, n int) string {
	s = oneLine(s)
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// marshalGeneration is the hash of a desired state's answer.
func marshalGeneration(v any) string {
	data, _ := json.Marshal(v)
	return wire.Hash(string(data))[len("sha256:"):][:16]
}
