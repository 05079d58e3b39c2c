package centre

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// MaxClockSkew is how far past the centre's clock an imported report's
// creation time may be.
const MaxClockSkew = 10 * time.Minute

// Import records a carried member's signed report file (wire.SignReport):
// for a member the fleet knows, the report must verify with its public
// key, the member must not be revoked, and the report must be newer than
// its last (to the second: an old file imported again is a replay); for
// an unknown one, the report must carry a join token (checked, and one use
// taken, as a join) and the site's public key, and verify with that key:
// the member is created Carried. Then its packages, receipt (stored in the
// registry) and lastSeen (the report's creation) are recorded as a sync
// records them. Its receipts are read only once its signature (and a
// first report's token) checks out. Nothing is written when anything is
// refused.
func (c *Centre) Import(ctx context.Context, data []byte) (*v1alpha1.Member, error) {
	sr, rep, err := wire.OpenReport(data)
	if err != nil {
		return nil, err
	}
	now := c.now()
	switch {
	case rep.Created.IsZero():
		return nil, fmt.Errorf("member %s's report has no creation time", rep.Member)
	case rep.Created.After(now.Add(MaxClockSkew)):
		return nil, fmt.Errorf("member %s's report was made at %s, later than the centre's clock allows (%s)", rep.Member, rep.Created.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	var u *report
	m, err := c.member(ctx, rep.Member)
	switch {
	case err == nil:
		if err := checkKnown(m, sr, rep); err != nil {
			return nil, err
		}
		if u, err = readReport(rep); err != nil {
			return nil, err
		}
	case errors.Is(err, ErrNotFound):
		if m, u, err = c.register(ctx, sr, rep, now); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	u.seen, u.always = rep.Created, true
	if err := c.record(ctx, m, u); err != nil {
		return nil, err
	}
	return m, nil
}

// checkKnown checks a report of a member the fleet knows.
func checkKnown(m *v1alpha1.Member, sr *wire.SignedReport, rep *wire.Report) error {
	if m.Spec.Revoked {
		return fmt.Errorf("member %s: %w: its reports are not imported", m.Name, ErrRevoked)
	}
	if m.Spec.PublicKey == "" {
		return fmt.Errorf("member %s has no public key to check its report with", m.Name)
	}
	if err := wire.VerifyReport(sr, m.Spec.PublicKey); err != nil {
		return fmt.Errorf("member %s's report: %w", m.Name, err)
	}
	if last := m.Status.LastSeen; last != nil && !rep.Created.Truncate(time.Second).After(last.Time) {
		return fmt.Errorf("member %s's report was made at %s: %w (made at %s)", m.Name,
			rep.Created.UTC().Format(time.RFC3339), ErrReplay, last.UTC().Format(time.RFC3339))
	}
	return nil
}

// register creates a carried member from its first report: its token
// and public key, the signature checked with that key before the token
// is looked at, and the report read (its receipts parsed) once the token
// checks out, before a use of it is taken.
func (c *Centre) register(ctx context.Context, sr *wire.SignedReport, rep *wire.Report, now time.Time) (*v1alpha1.Member, *report, error) {
	if rep.Token == "" {
		return nil, nil, fmt.Errorf("member %s is not in the fleet, and its report carries no join token", rep.Member)
	}
	if err := checkPublicKey(rep.PublicKey); err != nil {
		return nil, nil, fmt.Errorf("member %s's report: %w", rep.Member, err)
	}
	if err := wire.VerifyReport(sr, rep.PublicKey); err != nil {
		return nil, nil, fmt.Errorf("member %s's report: %w", rep.Member, err)
	}
	if err := checkLabels(rep.Labels); err != nil {
		return nil, nil, fmt.Errorf("member %s's report: %w", rep.Member, err)
	}
	var (
		labels map[string]string
		u      *report
	)
	_, tokenName, err := c.useToken(ctx, rep.Token, func(tokenLabels map[string]string) (err error) {
		if labels, err = memberLabels(rep.Labels, tokenLabels); err != nil {
			return fmt.Errorf("member %s's report: %w", rep.Member, err)
		}
		if u == nil { // once, whatever conflicts the token's use meets
			u, err = readReport(rep)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	joined := metav1.NewTime(now)
	m := &v1alpha1.Member{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns(), Name: rep.Member, Labels: labels},
		Spec:       v1alpha1.MemberSpec{Mode: v1alpha1.Carried, PublicKey: rep.PublicKey},
		Status:     v1alpha1.MemberStatus{JoinedAt: &joined, JoinedWith: tokenName},
	}
	if err := c.newMember(ctx, m); err != nil {
		return nil, nil, err
	}
	return m, u, nil
}
