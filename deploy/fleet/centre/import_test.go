package centre_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// signed is a report file of member signed by key.
func signed(t *testing.T, key *wire.SiteKey, rep *wire.Report) []byte {
	t.Helper()
	data, err := wire.SignReport(rep, key)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestImport: a carried member's first report, with a token and its
// public key, registers it; later reports must verify with that key, be
// its own and be newer; its bundle is the delta from the receipt it
// imported, with the placement's values beside it.
func TestImport(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	r := w.push(bigPackage(t), "apps/big:1.0.0")
	root := r.Root().Digest.String()
	w.place("big", "apps/big", "stable", map[string]string{"site": "ship"}, `{"replicas":3}`, v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "big", "stable", "1.0.0", "alice"); err != nil {
		t.Fatal(err)
	}
	whole, half, _, _ := receipts(t, r)
	key, err := wire.NewSiteKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicPEM()
	other, _ := wire.NewSiteKey()
	tok := w.token(centre.TokenOptions{Labels: map[string]string{"kind": "ship"}})
	connected := w.join("x", w.token(centre.TokenOptions{}), nil)

	created := w.now().Add(-time.Hour)
	first := &wire.Report{Member: "ship1", Created: created, Agent: "ferry test", Token: tok, PublicKey: string(pub),
		Labels: map[string]string{"site": "ship"}, Receipt: receiptJSON(t, half), Packages: []v1alpha1.MemberPackage{}}
	m, err := w.c.Import(ctx, signed(t, key, first))
	if err != nil {
		t.Fatal(err)
	}
	m = w.member("ship1")
	if m.Spec.Mode != v1alpha1.Carried || m.Spec.PublicKey != string(pub) || m.Labels["kind"] != "ship" || m.Labels["site"] != "ship" ||
		!m.Status.LastSeen.Time.Equal(created.Truncate(time.Second)) || m.Status.Receipt == "" || m.Status.ReceiptBlobs != len(half.Blobs) ||
		m.Status.ReceiptBytes != half.Size() || m.Status.Credential != "" {
		t.Fatalf("imported member: labels %v spec %+v status %+v", m.Labels, m.Spec, m.Status)
	}
	if got := w.usesLeft(tok); got != "0" {
		t.Errorf("token uses left: %s", got)
	}

	// No connected member is placed: the first rollout completes at once,
	// and the carried member's bundle carries it.
	w.reconcile()
	out := filepath.Join(t.TempDir(), "update.tar.zst")
	res, err := w.c.Bundle(ctx, "ship1", "", out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("carried bundle from the imported receipt (half the package): %d bytes, %d blobs carried, %d left out", res.Delta.Size, res.Delta.Carried, res.Delta.Omitted)
	if res.Digest != root || res.Version != "1.0.0" || res.Delta.Size < mib || res.Delta.Size > mib+64<<10 || res.Values != out+".values.json" {
		t.Errorf("bundle: %+v, delta %+v", res, res.Delta)
	}
	// The report carries no receipt per repository (an older ferry's):
	// the bundle is made against the whole one, and says so.
	if !res.WholeReceipt || res.Receipt != m.Status.Receipt {
		t.Errorf("a bundle from a report without receipts per repository: whole receipt %v, receipt %s (the member's %s)", res.WholeReceipt, res.Receipt, m.Status.Receipt)
	}
	if v, err := os.ReadFile(res.Values); err != nil || strings.TrimSpace(string(v)) != `{"replicas":3}` {
		t.Errorf("values beside the bundle: %q, %v", v, err)
	}
	if _, err := w.c.Bundle(ctx, "ship1", "other", out); err == nil || !strings.Contains(err.Error(), "package other is not in member ship1's desired state") {
		t.Errorf("bundle of another package: %v", err)
	}

	rv := w.member("ship1").ResourceVersion
	later := func(d time.Duration) *wire.Report {
		return &wire.Report{Member: "ship1", Created: created.Add(d), Receipt: receiptJSON(t, whole), Packages: []v1alpha1.MemberPackage{}}
	}
	tampered := signed(t, key, later(time.Minute))
	var sr wire.SignedReport
	if err := json.Unmarshal(tampered, &sr); err != nil {
		t.Fatal(err)
	}
	sr.Payload = []byte(strings.Replace(string(sr.Payload), `"ship1"`, `"ship1" `, 1))
	tampered, _ = json.Marshal(sr)

	for _, tc := range []struct {
		name string
		data []byte
		says string
		is   error
	}{
		{"wrong signature", signed(t, other, later(time.Minute)), "member ship1's report: the report's signature does not verify", wire.ErrReportSignature},
		{"tampered", tampered, "signature does not verify", wire.ErrReportSignature},
		{"another member's name", signed(t, key, &wire.Report{Member: "x", Created: w.now()}), "member x's report: the report's signature does not verify", nil},
		{"unknown member without a token", signed(t, key, &wire.Report{Member: "ship2", Created: w.now()}), "member ship2 is not in the fleet, and its report carries no join token", nil},
		{"replay", signed(t, key, first), "is not newer than the member's last", centre.ErrReplay},
		{"older", signed(t, key, later(-time.Minute)), "is not newer than the member's last", centre.ErrReplay},
		{"from the future", signed(t, key, later(3*time.Hour)), "later than the centre's clock allows", nil},
		{"garbage", []byte("\x00\x01 not json"), "not a signed fleet report", nil},
		{"bad receipt", signed(t, key, &wire.Report{Member: "ship1", Created: w.now(), Receipt: json.RawMessage(`{"mediaType":"` + artifact.MediaTypeReceipt + `","blobs":{"sha256:xyz":1}}`)}), "the report carries a receipt that is not one: invalid digest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.c.Import(ctx, tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("import: %v, want one line saying %q", err, tc.says)
			}
			t.Logf("refused: %v", err)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
			if got := w.member("ship1").ResourceVersion; got != rv {
				t.Error("a refused report changed the member")
			}
			w.absent("ship2")
		})
	}
	if connected.cl.Credential == "" {
		t.Fatal("x did not join")
	}

	// A newer report, holding the whole package: the bundle is small.
	if _, err := w.c.Import(ctx, signed(t, key, later(time.Minute))); err != nil {
		t.Fatal(err)
	}
	if m := w.member("ship1"); !m.Status.LastSeen.Time.Equal(created.Add(time.Minute).Truncate(time.Second)) || m.Status.ReceiptBlobs != len(whole.Blobs) {
		t.Errorf("after the second report: %+v", m.Status)
	}
	if res, err := w.c.Bundle(ctx, "ship1", "big", out); err != nil || res.Delta.Size > 64<<10 {
		t.Errorf("bundle for a member holding everything: %+v, %v", res, err)
	}

	// Receipts per repository: the bundle is made against the receipt of
	// the package's own repository (big), whatever the whole one holds;
	// with none of big's (the site runs no Package big), against none.
	for i, tc := range []struct {
		name         string
		repositories map[string]json.RawMessage
		noWhole      bool // the report carries no whole receipt
		min, max     int64
		whole        bool
	}{
		{"big's receipt", map[string]json.RawMessage{"big": receiptJSON(t, half), "other": receiptJSON(t, whole)}, false, mib, mib + 64<<10, false},
		{"none of big's", map[string]json.RawMessage{"other": receiptJSON(t, whole)}, false, 2 * mib, 2*mib + 64<<10, false},
		{"none at all", map[string]json.RawMessage{}, false, 2 * mib, 2*mib + 64<<10, false},
		{"big's instead of the whole", map[string]json.RawMessage{"big": receiptJSON(t, half)}, true, mib, mib + 64<<10, false},
		{"a report without them again", nil, false, 0, 64 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := later(time.Duration(2+i) * time.Minute)
			rep.Repositories = tc.repositories
			if tc.noWhole {
				rep.Receipt = nil
			}
			if _, err := w.c.Import(ctx, signed(t, key, rep)); err != nil {
				t.Fatal(err)
			}
			m := w.member("ship1")
			res, err := w.c.Bundle(ctx, "ship1", "big", out)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("bundle: %d bytes, receipt %q, whole receipt %v", res.Delta.Size, res.Receipt, res.WholeReceipt)
			if res.Delta.Size < tc.min || res.Delta.Size > tc.max || res.WholeReceipt != tc.whole ||
				(m.Status.Receipt == "") != tc.noWhole || m.Status.Receipts == "" || (res.Receipt == m.Status.Receipt) != tc.whole {
				t.Errorf("bundle %+v, delta %+v; the member's receipt %s, receipts %s", res, res.Delta, m.Status.Receipt, m.Status.Receipts)
			}
		})
	}

	if err := w.c.Revoke(ctx, "ship1"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Import(ctx, signed(t, key, later(10*time.Minute))); !errors.Is(err, centre.ErrRevoked) {
		t.Errorf("import for a revoked member: %v", err)
	}
}
