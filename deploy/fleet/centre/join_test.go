package centre_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// refusal is the status and sentence of a centre's refusal.
func refusal(t *testing.T, err error) (int, string) {
	t.Helper()
	var re *wire.RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("want a refusal, got %v", err)
	}
	if strings.Contains(re.Message, "\n") || re.Message == "" {
		t.Errorf("the refusal is not one line: %q", re.Message)
	}
	return re.Status, re.Message
}

func (w *world) absent(name string) {
	w.t.Helper()
	var m v1alpha1.Member
	if err := w.kc.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &m); !apierrors.IsNotFound(err) {
		w.t.Errorf("member %s: want none, got %v", name, err)
	}
}

func (w *world) usesLeft(token string) string {
	w.t.Helper()
	tok, err := wire.ParseToken(token)
	if err != nil {
		w.t.Fatal(err)
	}
	var s corev1.Secret
	if err := w.kc.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: centre.TokenSecretPrefix + tok.ID}, &s); err != nil {
		w.t.Fatal(err)
	}
	if s.Type != centre.TokenSecretType || strings.Contains(string(s.Data[centre.TokenHash]), tok.Secret) {
		w.t.Errorf("token Secret: type %s; it must hold the secret's hash only", s.Type)
	}
	return string(s.Data[centre.TokenUses])
}

// TestJoin: a token is traded for a credential once per use; a used-up,
// expired, wrong or unknown token and a taken name are refused with
// nothing created; of two joins racing for a last use one wins; a client
// pinning another CA stops before sending the token.
func TestJoin(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 2, Labels: map[string]string{"region": "east"}, Description: "east sites"})
	a := w.join("a", tok, map[string]string{"region": "west", "tier": "edge"})
	m := w.member("a")
	_, secret, err := wire.ParseCredential(a.cl.Credential)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := a.key.PublicPEM()
	if m.Labels["region"] != "east" || m.Labels["tier"] != "edge" || m.Spec.Mode != v1alpha1.Connected ||
		m.Spec.PublicKey != string(pub) || m.Status.Credential != wire.Hash(secret) || m.Status.JoinedAt == nil ||
		!strings.HasPrefix(m.Status.JoinedWith, centre.TokenSecretPrefix) {
		t.Errorf("member a: labels %v, spec %+v, status %+v", m.Labels, m.Spec, m.Status)
	}
	if got := w.usesLeft(tok); got != "1" {
		t.Errorf("uses left after a join: %s, want 1", got)
	}

	usedUp := w.token(centre.TokenOptions{})
	w.join("b1", usedUp, nil)
	expired := w.token(centre.TokenOptions{TTL: time.Hour})
	parsed, _ := wire.ParseToken(tok)
	parsed.Secret = strings.Repeat("ab", 32)
	wrong := parsed.String()
	parsed.ID = "zzzzzz"
	unknown := parsed.String()

	for _, tc := range []struct {
		name, member, token string
		before              func()
		status              int
		says                string
	}{
		{"used up", "b2", usedUp, nil, 403, "is used up"},
		{"wrong secret", "c", wrong, nil, 401, "is not one the centre made"},
		{"unknown", "c", unknown, nil, 401, "not one the centre made"},
		{"not a token", "c", "ff1.nope", nil, 401, "shape"},
		{"taken name", "a", tok, nil, 409, "member a is already in the fleet"},
		{"bad name", "A_b", tok, nil, 400, "not a DNS label"},
		{"bad label", "c", tok, nil, 400, "label"},
		{"expired", "c", expired, func() { w.tick(2 * time.Hour) }, 403, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			labels := map[string]string(nil)
			if tc.name == "bad label" {
				labels = map[string]string{"bad key!": "x"}
			}
			_, err := w.tryJoin(tc.member, tc.token, labels)
			status, msg := refusal(t, err)
			if status != tc.status || !strings.Contains(msg, tc.says) {
				t.Errorf("%d %q, want %d saying %q", status, msg, tc.status, tc.says)
			}
			if tc.member != "a" {
				w.absent(tc.member)
			}
		})
	}
	if got := w.usesLeft(tok); got != "1" {
		t.Errorf("uses left after refused joins: %s, want 1 (nothing taken)", got)
	}

	t.Run("race for the last use", func(t *testing.T) {
		last := w.token(centre.TokenOptions{TTL: 24 * time.Hour})
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = w.tryJoin("racer-"+string(rune('a'+i)), last, nil)
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if status, msg := refusal(t, err); status != 403 || !strings.Contains(msg, "used up") {
				t.Errorf("a losing join: %d %s", status, msg)
			}
		}
		if ok != 1 {
			t.Errorf("%d joins used the last use, want 1", ok)
		}
	})

	t.Run("pin", func(t *testing.T) {
		before := w.hitsOf(wire.PathJoin)
		fresh := w.token(centre.TokenOptions{TTL: 24 * time.Hour})
		cl := &wire.Client{URL: w.url, Pin: strings.Repeat("0", 64)}
		_, err := cl.Join(t.Context(), wire.JoinRequest{Token: fresh, Name: "impostor-victim", PublicKey: "x"})
		if err == nil || !strings.Contains(err.Error(), "not from the CA the token pins") {
			t.Fatalf("join through another CA: %v", err)
		}
		if w.hitsOf(wire.PathJoin) != before {
			t.Error("the request reached the centre: the token left the member")
		}
		if got := w.usesLeft(fresh); got != "1" {
			t.Errorf("uses left: %s", got)
		}
	})
}
