package centre_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
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
	id := parsed.ID
	parsed.Secret = strings.Repeat("ab", 32)
	wrong := parsed.String()
	parsed.ID = "zzzzzz"
	unknown := parsed.String()
	says := map[string]bool{}
	for _, token := range []string{wrong, unknown} {
		for _, name := range []string{"taken", "free"} {
			_, err := w.tryJoin(name, token, nil)
			status, msg := refusal(t, err)
			if status != 401 || strings.Contains(msg, name) {
				t.Errorf("join %s with a wrong token: %d %q, want 401 naming no member", name, status, msg)
			}
			says[strings.ReplaceAll(strings.ReplaceAll(msg, id, "ID"), "zzzzzz", "ID")] = true
		}
	}
	if len(says) != 1 {
		t.Errorf("a wrong secret and an unknown id are told apart: %v", says)
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

// bundleWorld is a world whose members x1… (site x) are placed a package
// of n MiB of noise; it returns the package's root digest.
func bundleWorld(t *testing.T, n int, members ...string) (*world, map[string]*member, string) {
	t.Helper()
	w := newWorld(t)
	files := map[string][]byte{}
	for i := range n {
		files[fmt.Sprintf("f%02d.bin", i)] = noise(uint64(i+1), mib)
	}
	r := w.push(pkgBuild(t, "big", "1.0.0", files), "apps/big:1.0.0")
	root := r.Root().Digest.String()
	w.place("big", "apps/big", "stable", map[string]string{"site": "x"}, "", v1alpha1.Strategy{WaveFraction: 100})
	if _, err := w.c.Promote(t.Context(), "big", "stable", root, "alice"); err != nil {
		t.Fatal(err)
	}
	tok := w.token(centre.TokenOptions{Uses: len(members)})
	ms := map[string]*member{}
	for _, name := range members {
		ms[name] = w.join(name, tok, map[string]string{"site": "x"})
	}
	w.reconcile()
	for _, m := range ms {
		if err := m.sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	w.reconcile()
	return w, ms, root
}

// bundleBody is a bundle request of root against an empty receipt.
func bundleBody(root string) []byte {
	body, _ := json.Marshal(wire.BundleRequest{Repository: "apps/big", Digest: root,
		Receipt: json.RawMessage(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}`)})
	return body
}

// TestBundleSlowReaders: members that ask for bundles and then read them
// slowly, or not at all, do not hold the centre's bundle slots: another
// member's bundle is made and sent meanwhile, and a bundle that makes no
// progress for the centre's StallTimeout is cut off, its file removed.
// (Before, two such members kept every other member's bundle waiting for
// as long as they kept their connections.)
func TestBundleSlowReaders(t *testing.T) {
	w, ms, root := bundleWorld(t, 24, "x1", "x2", "x3")
	w.c.StallTimeout = time.Second
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: wire.PinnedTLS(w.pin, nil)}}
	var held []*http.Response
	for _, name := range []string{"x1", "x2"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, w.url+wire.PathBundle, bytes.NewReader(bundleBody(root)))
		req.Header.Set("Authorization", "Bearer "+ms[name].cl.Credential)
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s's bundle: %v", name, err)
		}
		held = append(held, resp) // its body not read
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	n, err := ms["x3"].cl.Bundle(ctx, wire.BundleRequest{Repository: "apps/big", Digest: root,
		Receipt: json.RawMessage(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}`)}, io.Discard)
	t.Logf("x3's bundle while x1 and x2 read theirs not at all: %d bytes in %v, %v", n, time.Since(start).Round(time.Millisecond), err)
	if err != nil || n < 24*mib {
		t.Fatalf("x3's bundle: %d bytes, %v", n, err)
	}
	// The stalled answers are cut off: short bodies, files removed.
	time.Sleep(2 * time.Second)
	for i, resp := range held {
		got, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && got >= resp.ContentLength {
			t.Errorf("x%d's stalled bundle was sent whole (%d bytes)", i+1, got)
		}
	}
	waitFor(t, func() bool { left, _ := filepath.Glob(filepath.Join(w.c.Spool, "bundle-*")); return len(left) == 0 }, "the stalled bundles' files removed")
}

// TestBundleInFlight: a member asks for one bundle at a time — a second
// while its first is in flight is 429 — and one whose first is still
// being sent can neither hold more of the centre's memory nor more of its
// bundle slots. A member revoked while its bundle waits for a slot or is
// made is refused before the bundle is sent.
func TestBundleInFlight(t *testing.T) {
	w, ms, root := bundleWorld(t, 2, "x1", "x2")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: wire.PinnedTLS(w.pin, nil)}}
	// x1's first request: its body trickles (held open).
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, w.url+wire.PathBundle, pr)
	req.Header.Set("Authorization", "Bearer "+ms["x1"].cl.Credential)
	first := make(chan *http.Response, 1)
	go func() {
		resp, err := hc.Do(req)
		if err != nil {
			first <- nil
			return
		}
		first <- resp
	}()
	body := bundleBody(root)
	if _, err := pw.Write(body[:10]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.hitsOf(wire.PathBundle) == 1 }, "x1's first request at the centre")
	_, err := ms["x1"].cl.Bundle(t.Context(), wire.BundleRequest{Repository: "apps/big", Digest: root,
		Receipt: json.RawMessage(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}`)}, io.Discard)
	if status, msg := refusal(t, err); status != 429 || !strings.Contains(msg, "member x1 has a bundle request in flight") {
		t.Errorf("x1's second bundle: %d %q", status, msg)
	}
	// Revoked meanwhile: the first is refused once its body is in.
	if err := w.c.Revoke(t.Context(), "x1"); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write(body[10:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	resp := <-first
	if resp == nil {
		t.Fatal("x1's first request failed")
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(data), "member x1 is revoked") {
		t.Errorf("the bundle of a member revoked meanwhile: %d %s", resp.StatusCode, data)
	}
	// Another member is served.
	if n, err := ms["x2"].cl.Bundle(t.Context(), wire.BundleRequest{Repository: "apps/big", Digest: root,
		Receipt: json.RawMessage(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{}}`)}, io.Discard); err != nil || n < 2*mib {
		t.Errorf("x2's bundle: %d, %v", n, err)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for range 200 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waited 10 s for %s", what)
}

// TestSyncInFlight: a member's second sync while its first is in flight
// is 429; a member revoked while its sync is in flight is refused (403)
// and its report not recorded.
func TestSyncInFlight(t *testing.T) {
	w := newWorld(t)
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: wire.PinnedTLS(w.pin, nil)}}
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, w.url+wire.PathSync, pr)
	req.Header.Set("Authorization", "Bearer "+m.cl.Credential)
	first := make(chan *http.Response, 1)
	go func() {
		resp, _ := hc.Do(req)
		first <- resp
	}()
	body, _ := json.Marshal(m.report())
	if _, err := pw.Write(body[:5]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.hitsOf(wire.PathSync) == 1 }, "m's first sync at the centre")
	if status, msg := refusal(t, m.sync(t.Context())); status != 429 || !strings.Contains(msg, "member m has a sync request in flight") {
		t.Errorf("a second sync: %d %q", status, msg)
	}
	rv := w.member("m").ResourceVersion
	if err := w.c.Revoke(t.Context(), "m"); err != nil {
		t.Fatal(err)
	}
	_, _ = pw.Write(body[5:])
	pw.Close()
	resp := <-first
	if resp == nil {
		t.Fatal("the first sync failed")
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(data), "member m is revoked") {
		t.Errorf("a sync in flight while the member was revoked: %d %s", resp.StatusCode, data)
	}
	if got := w.member("m"); got.Status.LastSeen != nil && got.ResourceVersion != rv && !got.Spec.Revoked {
		t.Errorf("the revoked member's report was recorded: %+v", got.Status)
	}
}

// TestBundleReceiptBomb: a bundle request's receipt of 883,000 blobs
// within its 64 MiB is parsed in bounded time and memory, once: a
// member's next request waits for it (429), and a delta against it costs
// what the package's blobs cost, not the receipt's.
func TestBundleReceiptBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("a 64 MiB receipt")
	}
	_, ms, root := bundleWorld(t, 2, "x1")
	var rb bytes.Buffer
	rb.WriteString(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{`)
	for i := 0; rb.Len() < wire.MaxBundleRequest-(256<<10); i++ {
		if i > 0 {
			rb.WriteByte(',')
		}
		fmt.Fprintf(&rb, `"sha256:%064x":1`, i)
	}
	rb.WriteString("}}")
	var n int64
	var err error
	bytes, took := allocated(func() {
		n, err = ms["x1"].cl.Bundle(t.Context(), wire.BundleRequest{Repository: "apps/big", Digest: root, Receipt: rb.Bytes()}, io.Discard)
	})
	t.Logf("a bundle against a receipt of %d MiB: %d bytes in %v, %d MiB allocated (client and centre)", rb.Len()>>20, n, took.Round(time.Millisecond), bytes>>20)
	if err != nil || n < 2*mib {
		t.Fatalf("%d, %v", n, err)
	}
	if took > 20*time.Second || bytes > 1<<30 {
		t.Errorf("a 64 MiB receipt cost %v and %d MiB", took, bytes>>20)
	}
}

// TestSlowAndHugeBodies: on every endpoint, a body that stops coming is
// cut off after the StallTimeout (408), and one past its bound is 413
// once the bound is read, whatever it declares; the centre is not held.
func TestSlowAndHugeBodies(t *testing.T) {
	w := newWorld(t)
	w.c.StallTimeout = time.Second
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: wire.PinnedTLS(w.pin, nil)}}
	do := func(path, cred string, body io.Reader) (int, string, time.Duration) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, w.url+path, body)
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error(), time.Since(start)
		}
		defer resp.Body.Close()
		var p wire.Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Error, time.Since(start)
	}
	for _, tc := range []struct {
		path, cred string
		limit      int64
	}{{wire.PathJoin, "", wire.MaxJoinRequest}, {wire.PathSync, m.cl.Credential, wire.MaxReport}, {wire.PathBundle, m.cl.Credential, wire.MaxBundleRequest}} {
		t.Run(tc.path, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() { _, _ = pw.Write([]byte(`{"a":`)) }() // and nothing more
			status, msg, took := do(tc.path, tc.cred, pr)
			pw.Close()
			t.Logf("stalled: %d %q after %v", status, msg, took.Round(time.Millisecond))
			if status != 408 || !strings.Contains(msg, "did not come in within 1s") || took > 5*time.Second {
				t.Errorf("a stalled body: %d %q after %v", status, msg, took)
			}
			status, msg, took = do(tc.path, tc.cred, io.LimitReader(zeros{}, tc.limit+1))
			t.Logf("huge: %d %q after %v", status, msg, took.Round(time.Millisecond))
			if status != 413 || !strings.Contains(msg, "larger than the centre takes") {
				t.Errorf("a body past its bound: %d %q", status, msg)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// hugeReceipt is a receipt of tiny blobs of about n bytes.
func hugeReceipt(n int) json.RawMessage {
	var rb bytes.Buffer
	rb.WriteString(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{`)
	for i := 0; rb.Len() < n; i++ {
		if i > 0 {
			rb.WriteByte(',')
		}
		fmt.Fprintf(&rb, `"sha256:%064x":1`, i)
	}
	rb.WriteString("}}")
	return rb.Bytes()
}

// TestImportForged: a report file of a known member signed by another
// key, or a first report whose token is not the centre's, carrying 60
// MiB of receipts, is refused before its receipts are parsed: in a
// fraction of the time and memory (before: every receipt parsed first),
// nothing written, no use of a token taken.
func TestImportForged(t *testing.T) {
	if testing.Short() {
		t.Skip("60 MiB reports")
	}
	w := newWorld(t)
	key, _ := wire.NewSiteKey()
	pub, _ := key.PublicPEM()
	tok := w.token(centre.TokenOptions{Uses: 2})
	if _, err := w.c.Import(t.Context(), signed(t, key, &wire.Report{Member: "ship", Created: w.now().Add(-time.Hour), Token: tok, PublicKey: string(pub)})); err != nil {
		t.Fatal(err)
	}
	rv := w.member("ship").ResourceVersion
	forger, _ := wire.NewSiteKey()
	forgerPub, _ := forger.PublicPEM()
	parsed, _ := wire.ParseToken(tok)
	parsed.Secret = strings.Repeat("ab", 32)
	receipt := hugeReceipt(60 << 20)
	for _, tc := range []struct {
		name string
		rep  *wire.Report
		says string
	}{
		{"another key", &wire.Report{Member: "ship", Created: w.now(), Receipt: receipt}, "the report's signature does not verify"},
		{"a wrong token", &wire.Report{Member: "ship2", Created: w.now(), Token: parsed.String(), PublicKey: string(forgerPub),
			Repositories: map[string]json.RawMessage{"apps/big": receipt}}, "is not one the centre made"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := signed(t, forger, tc.rep)
			var err error
			bytes, took := allocated(func() { _, err = w.c.Import(t.Context(), data) })
			t.Logf("%d MiB refused in %v, %d MiB allocated: %v", len(data)>>20, took.Round(time.Millisecond), bytes>>20, err)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("import: %v", err)
			}
			// The time is a guard against a blow-up (26.5 s before the fix),
			// not a budget: 3.4 s was seen on a busy CI machine.
			if bytes > 2*uint64(len(data)) || took > 15*time.Second {
				t.Errorf("refusing a forged %d MiB report cost %d MiB and %v", len(data)>>20, bytes>>20, took)
			}
		})
	}
	if w.member("ship").ResourceVersion != rv {
		t.Error("a forged report changed the member")
	}
	w.absent("ship2")
	if got := w.usesLeft(tok); got != "1" {
		t.Errorf("uses left: %s", got)
	}
}

// TestBundleFileWhole: `fleet bundle -f` writes the bundle and its values
// both or neither — values that cannot be written leave no bundle — and
// never over the spooled package it is made from.
func TestBundleFileWhole(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	r := w.push(bigPackage(t), "apps/big:1.0.0")
	w.place("big", "apps/big", "stable", map[string]string{"site": "ship"}, `{"replicas":3}`, v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "big", "stable", r.Root().Digest.String(), "alice"); err != nil {
		t.Fatal(err)
	}
	key, _ := wire.NewSiteKey()
	pub, _ := key.PublicPEM()
	tok := w.token(centre.TokenOptions{Labels: map[string]string{"site": "ship"}})
	if _, err := w.c.Import(ctx, signed(t, key, &wire.Report{Member: "ship", Created: w.now(), Token: tok, PublicKey: string(pub)})); err != nil {
		t.Fatal(err)
	}
	w.reconcile()

	dir := t.TempDir()
	out := filepath.Join(dir, "update.tar.zst")
	if err := os.Mkdir(out+".values.json", 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := w.c.Bundle(ctx, "ship", "", out)
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a bundle whose values cannot be written: %v", err)
	}
	t.Logf("refused: %v", err)
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("the folder holds %d entries: a bundle without its values was written", len(left))
	}

	if _, err := w.c.Bundle(ctx, "ship", "", filepath.Join(dir, "first.tar.zst")); err != nil {
		t.Fatal(err)
	}
	spooled, _ := filepath.Glob(filepath.Join(w.c.Spool, "packages", "*.tar"))
	if len(spooled) != 1 {
		t.Fatalf("spooled: %v", spooled)
	}
	before, _ := os.ReadFile(spooled[0])
	if _, err := w.c.Bundle(ctx, "ship", "", spooled[0]); err == nil || !strings.Contains(err.Error(), "the package the bundle is made from") {
		t.Errorf("a bundle over its own package: %v", err)
	}
	if now, _ := os.ReadFile(spooled[0]); !bytes.Equal(now, before) {
		t.Error("the spooled package was written over")
	}
}

// TestReceiptsReplaced: a member that sends a new receipt with every
// heartbeat — as a compromised one may, 4 MiB each, as fast as the centre
// answers — does not fill the centre's registry: a report's receipts
// replace the last one's there, and only what the new one still names is
// kept.
func TestReceiptsReplaced(t *testing.T) {
	w := newWorld(t)
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	repo, err := w.remote.Repository(w.host + "/" + centre.ReceiptRepository + "/m")
	if err != nil {
		t.Fatal(err)
	}
	shared := hugeReceipt(1 << 10) // the same whole receipt every time
	var kept []string
	var layers []string // each report's receipt of apps/app, as stored
	for i := range 5 {
		rep := m.report()
		rep.Receipt = shared
		rep.Repositories = map[string]json.RawMessage{"apps/app": hugeReceipt((i + 2) << 10)}
		rc, _ := artifact.ParseReceipt(rep.Repositories["apps/app"])
		canonical, _ := rc.Marshal()
		layers = append(layers, digest.FromBytes(canonical).String())
		if _, err := m.cl.Sync(t.Context(), rep); err != nil {
			t.Fatal(err)
		}
		st := w.member("m").Status
		kept = append(kept, st.Receipts)
		if _, err := repo.Resolve(t.Context(), st.Receipts); err != nil {
			t.Fatalf("the member's receipts %s: %v", st.Receipts, err)
		}
		if _, err := repo.Blobs().Resolve(t.Context(), st.Receipt); err != nil {
			t.Fatalf("the member's whole receipt %s: %v", st.Receipt, err)
		}
	}
	for i, old := range kept[:len(kept)-1] {
		if _, err := repo.Resolve(t.Context(), old); err == nil {
			t.Errorf("the replaced receipts %s are still in the registry", old)
		}
		if _, err := repo.Blobs().Resolve(t.Context(), layers[i]); err == nil {
			t.Errorf("report %d's receipt of apps/app is still in the registry", i)
		}
	}
	if _, err := repo.Blobs().Resolve(t.Context(), layers[len(layers)-1]); err != nil {
		t.Errorf("the last report's receipt of apps/app: %v", err)
	}
}

// TestJSONBombs: deep nesting and huge strings within each endpoint's
// bound are refused, or cut, in one line and bounded time; nothing
// changes.
func TestJSONBombs(t *testing.T) {
	w := newWorld(t)
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	rv := w.member("m").ResourceVersion
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, path, cred, body string
		status                 int
		says                   string
	}{
		{"join nested", wire.PathJoin, "", `{"labels":` + deep(wire.MaxJoinRequest/2-16) + `}`, 400, "exceeded max depth"},
		{"join huge key", wire.PathJoin, "", `{"name":"n","publicKey":"` + strings.Repeat("A", wire.MaxJoinRequest-64) + `"}`, 400, "more than 8192"},
		{"sync nested", wire.PathSync, m.cl.Credential, `{"member":"m","receipt":` + deep(wire.MaxReport/2-32) + `}`, 400, "exceeded max depth"},
		{"bundle nested", wire.PathBundle, m.cl.Credential, `{"receipt":` + deep(wire.MaxBundleRequest/2-32) + `}`, 400, "exceeded max depth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var status int
			var msg string
			bytes, took := allocated(func() { status, msg = w.post(tc.path, tc.cred, []byte(tc.body)) })
			t.Logf("%d %q in %v, %d MiB allocated", status, msg, took.Round(time.Millisecond), bytes>>20)
			if status != tc.status || !strings.Contains(msg, tc.says) || took > 5*time.Second || bytes > uint64(8*len(tc.body))+16<<20 {
				t.Errorf("%d %q in %v, %d MiB", status, msg, took, bytes>>20)
			}
		})
	}
	if w.member("m").ResourceVersion != rv {
		t.Error("a refused request changed the member")
	}
	// A huge agent string and messages: taken, cut to a line.
	rep := m.report()
	rep.Agent = strings.Repeat("x\n", 1<<19)
	rep.Packages = append(rep.Packages, v1alpha1.MemberPackage{Name: "p", Message: strings.Repeat("y", 1<<20)})
	if _, err := m.cl.Sync(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	if st := w.member("m").Status; len(st.Agent) > 132 || len(st.Packages[0].Message) > 1028 {
		t.Errorf("kept an agent of %d bytes, a message of %d", len(st.Agent), len(st.Packages[0].Message))
	}
}

// TestImportUsedToken: a first report with a token used up, or expired,
// registers nothing.
func TestImportUsedToken(t *testing.T) {
	w := newWorld(t)
	tok := w.token(centre.TokenOptions{})
	w.join("first", tok, nil)
	short := w.token(centre.TokenOptions{TTL: time.Minute})
	w.tick(2 * time.Minute)
	key, _ := wire.NewSiteKey()
	pub, _ := key.PublicPEM()
	for token, says := range map[string]string{tok: "is used up", short: "expired"} {
		_, err := w.c.Import(t.Context(), signed(t, key, &wire.Report{Member: "late", Created: w.now(), Token: token, PublicKey: string(pub)}))
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("a first report with a token that %s: %v", says, err)
		}
		w.absent("late")
	}
}
