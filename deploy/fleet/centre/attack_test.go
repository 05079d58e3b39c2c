package centre_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// allocated is what f allocates in this process (the centre is served
// in it), in bytes, and how long it takes.
func allocated(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// TestSyncBomb: a member's report of 10⁶ empty packages within the 4 MiB
// body is refused (413) before they are decoded: a few MiB, not the 800
// MiB that decoding them took, and nothing changed.
func TestSyncBomb(t *testing.T) {
	w := newWorld(t)
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	rv := w.member("m").ResourceVersion
	n := (wire.MaxReport - 64) / 3
	body := []byte(`{"member":"m","packages":[` + strings.TrimSuffix(strings.Repeat("{},", n), ",") + `]}`)
	var status int
	var msg string
	bytes, took := allocated(func() { status, msg = w.post(wire.PathSync, m.cl.Credential, body) })
	t.Logf("%d: %s (%v, %d MiB allocated)", status, msg, took, bytes>>20)
	if status != 413 || !strings.Contains(msg, "packages, more than 256") {
		t.Fatalf("%d %q", status, msg)
	}
	if bytes > 64<<20 {
		t.Errorf("refusing a 4 MiB report allocated %d MiB", bytes>>20)
	}
	if w.member("m").ResourceVersion != rv {
		t.Error("the refused report changed the member")
	}
}

// TestJoinNameOracle: without a token the centre says nothing of which
// members exist: a join with a wrong or unknown token under a member's
// name is refused for its token (401), as under any other name. With a
// right token, a taken name is 409 and takes no use of it.
func TestJoinNameOracle(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 2})
	w.join("taken", tok, nil)
	parsed, _ := wire.ParseToken(tok)
	parsed.Secret = strings.Repeat("ab", 32)
	wrong := parsed.String()
	parsed.ID = "zzzzzz"
	unknown := parsed.String()
	for _, token := range []string{wrong, unknown} {
		for _, name := range []string{"taken", "free"} {
			_, err := w.tryJoin(name, token, nil)
			if status, msg := refusal(t, err); status != 401 || strings.Contains(msg, name) {
				t.Errorf("join %s with a wrong token: %d %q, want 401 naming no member", name, status, msg)
			}
		}
	}
	_, err := w.tryJoin("taken", tok, nil)
	if status, msg := refusal(t, err); status != 409 || !strings.Contains(msg, "member taken is already in the fleet") {
		t.Errorf("a taken name with a right token: %d %q", status, msg)
	}
	if got := w.usesLeft(tok); got != "1" {
		t.Errorf("uses left: %s, want 1 (a refused join takes none)", got)
	}
}

// TestJoinLabels: a joining member may not ask for the labels the fleet
// itself reads or Kubernetes reserves (fleet.ferry.dev/canary puts it in
// every rollout's first wave): refused in one line, no use of the token
// taken, nothing created. A token gives them; the token's labels win over
// the member's (TestJoin); a carried member's first report is held to the
// same.
func TestJoinLabels(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 3})
	for _, key := range []string{v1alpha1.LabelCanary, "fleet.ferry.dev/placement", "ferry.dev/anything", "node-role.kubernetes.io/control-plane", "k8s.io/x"} {
		_, err := w.tryJoin("greedy", tok, map[string]string{key: "true"})
		if status, msg := refusal(t, err); status != 400 || !strings.Contains(msg, key) || !strings.Contains(msg, "the centre's to give") {
			t.Errorf("asking for %s: %d %q", key, status, msg)
		}
		w.absent("greedy")
	}
	if got := w.usesLeft(tok); got != "3" {
		t.Errorf("uses left: %s, want 3", got)
	}
	w.join("fine", tok, map[string]string{"example.com/tier": "edge", "kubernetes.io.example.com/x": "y"})

	canaries := w.token(centre.TokenOptions{Labels: map[string]string{v1alpha1.LabelCanary: "true"}})
	w.join("canary", canaries, map[string]string{v1alpha1.LabelCanary: "false"})
	if got := w.member("canary").Labels[v1alpha1.LabelCanary]; got != "true" {
		t.Errorf("the token's canary label: %q", got)
	}

	key, _ := wire.NewSiteKey()
	pub, _ := key.PublicPEM()
	rep := &wire.Report{Member: "ship", Created: w.now(), PublicKey: string(pub), Token: tok, Labels: map[string]string{v1alpha1.LabelCanary: "true"}}
	data, err := wire.SignReport(rep, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Import(t.Context(), data); err == nil || !strings.Contains(err.Error(), "the centre's to give") {
		t.Errorf("a carried member's first report asking to be a canary: %v", err)
	}
	w.absent("ship")
	if got := w.usesLeft(tok); got != "2" {
		t.Errorf("uses left: %s, want 2", got)
	}
}

// TestJoinNames: a member named as the centre's Secrets are (a token's,
// the CA's) or as Kubernetes' own namespaces and objects joins as any
// other: its name names a Member and its receipts' repository, nothing
// else, so the token and the CA are untouched.
func TestJoinNames(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 5})
	parsed, _ := wire.ParseToken(tok)
	for _, name := range []string{centre.TokenSecretPrefix + parsed.ID, centre.CASecretName, "default", "kube-system", "kubernetes"} {
		m := w.join(name, tok, nil)
		if err := m.sync(t.Context()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got := w.usesLeft(tok); got != "0" {
		t.Errorf("uses left: %s", got)
	}
	if _, err := w.tryJoin("late", tok, nil); err == nil {
		t.Error("a used-up token still joins")
	}
	if _, _, err := w.c.EnsureCA(t.Context(), []string{"127.0.0.1"}); err != nil {
		t.Errorf("the CA after members named like it: %v", err)
	}
}

// TestGuessing: a client whose tokens or credentials are refused again
// and again is answered 429 with Retry-After before its next attempt is
// looked at (internal/authlimit): joins by its address, syncs and bundles
// by its address and the member its credential names, so that a guesser
// behind a site's NAT does not lock out the site's other members. Its
// successes, and the wait, let it in again.
func TestGuessing(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{Uses: 3})
	m := w.join("m", tok, nil)
	other := w.join("other", tok, nil)
	h := w.c.Handler()
	key, _ := wire.NewSiteKey()
	pub, _ := key.PublicPEM()
	parsed, _ := wire.ParseToken(tok)
	parsed.Secret = strings.Repeat("ab", 32)
	joinBody, _ := json.Marshal(wire.JoinRequest{Token: parsed.String(), Name: "n", PublicKey: string(pub)})
	guess := "m." + strings.Repeat("0", 64)
	send := func(from, path, cred string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.RemoteAddr = from + ":4000"
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	report := func(mb *member) []byte { b, _ := json.Marshal(mb.report()); return b }

	limited := func(what, from, path, cred string, body []byte, refused int) {
		t.Helper()
		for i := range 20 {
			rec := send(from, path, cred, body)
			switch rec.Code {
			case refused:
				continue
			case http.StatusTooManyRequests:
				if rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "too many refused") {
					t.Errorf("%s: 429 %q without Retry-After", what, rec.Body)
				}
				if i < 5 {
					t.Errorf("%s: slowed down after %d refusals", what, i)
				}
				return
			default:
				t.Fatalf("%s attempt %d: %d %s", what, i, rec.Code, rec.Body)
			}
		}
		t.Errorf("%s: 20 refused attempts, never slowed down", what)
	}
	limited("joins with a wrong token", "192.0.2.1", wire.PathJoin, "", joinBody, 401)
	limited("syncs with a guessed credential", "192.0.2.2", wire.PathSync, guess, report(m), 401)

	// Others are not slowed down: another address's joins, and member m
	// from another address, or another member from the guesser's.
	if rec := send("192.0.2.9", wire.PathJoin, "", joinBody); rec.Code != 401 {
		t.Errorf("a join from another address: %d", rec.Code)
	}
	if rec := send("192.0.2.9", wire.PathSync, m.cl.Credential, report(m)); rec.Code != 200 {
		t.Errorf("member m from another address: %d %s", rec.Code, rec.Body)
	}
	if rec := send("192.0.2.2", wire.PathSync, other.cl.Credential, report(other)); rec.Code != 200 {
		t.Errorf("another member from the guesser's address: %d %s", rec.Code, rec.Body)
	}
	// The wait over, it is heard again.
	w.tick(10 * time.Minute)
	if rec := send("192.0.2.2", wire.PathSync, m.cl.Credential, report(m)); rec.Code != 200 {
		t.Errorf("member m after the wait: %d %s", rec.Code, rec.Body)
	}
}
