package member

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestWriteReport: a carried member's report file. In a cluster without
// the member's Secret, it makes one (mode Carried) and the site key; the
// report lists the Packages and the registry's receipt, is signed with
// the site key (verified with the Secret's public key), and, being a
// first report, carries that key, the token and the labels. The key is
// made once. A payload changed after signing no longer verifies.
func TestWriteReport(t *testing.T) {
	ctx := context.Background()
	ours := newSigner(t)
	m := newMember(t, ours.pub)
	app, appd := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	r, err := artifact.Open(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	d := &deploy.Deploy{Client: m.cs, Packages: m.pc, Namespace: ns, Registry: m.host, Keys: []*artifact.PublicKey{mustKey(t, ours.pub)}, NoWait: true}
	if _, err := d.Run(ctx, r); err != nil {
		t.Fatal(err)
	}
	reg, err := artifact.RemoteOptions{}.Registry(m.host)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := wire.NewToken(strings.Repeat("c", 64))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "site.json")
	opts := ReportFileOptions{Token: tok.String(), Name: "ship-1", Labels: map[string]string{"region": "north"}, Agent: "test"}
	if _, err := WriteReport(ctx, m.cs, m.pc, ns, reg, out, ReportFileOptions{Token: tok.String()}); err == nil || !strings.Contains(err.Error(), "no name") {
		t.Fatalf("a report of a member without a name: %v", err)
	}
	if _, err := WriteReport(ctx, m.cs, m.pc, ns, reg, out, opts); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(ctx, m.cs, ns)
	if err != nil || st.Mode != v1alpha1.Carried || st.Member != "ship-1" || st.PublicKey == "" || st.Joined {
		t.Fatalf("the member after its first report: %+v, %v", st, err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	sr, rep, err := wire.OpenReport(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyReport(sr, st.PublicKey); err != nil {
		t.Fatalf("the report does not verify with the member's key: %v", err)
	}
	switch {
	case rep.Member != "ship-1" || rep.PublicKey != st.PublicKey || rep.Token != tok.String() || rep.Labels["region"] != "north" || rep.Agent != "test":
		t.Fatalf("first report: member %q, token %v, labels %v, key %v", rep.Member, rep.Token != "", rep.Labels, rep.PublicKey != "")
	case len(rep.Packages) != 1 || rep.Packages[0].Name != "app" || rep.Packages[0].Placement != "":
		t.Fatalf("reported packages %+v", rep.Packages)
	}
	rc, err := artifact.ParseReceipt(rep.Receipt)
	if err != nil || rc.Blobs[digest.Digest(appd)] == 0 {
		t.Fatalf("the report's receipt does not hold app: %v", err)
	}
	// A receipt of the repository the Package names: what a bundle of app
	// is made against.
	if len(rep.Repositories) != 1 || rep.Repositories["app"] == nil {
		t.Fatalf("the report's receipts of repositories: %d", len(rep.Repositories))
	}
	if rc, err := artifact.ParseReceipt(rep.Repositories["app"]); err != nil || rc.Blobs[digest.Digest(appd)] == 0 {
		t.Fatalf("the report's receipt of repository app does not hold app: %v", err)
	}

	// The payload changed after signing.
	var raw wire.SignedReport
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	raw.Payload = []byte(strings.Replace(string(raw.Payload), `"ship-1"`, `"ship-2"`, 1))
	tampered, _ := json.Marshal(raw)
	sr2, rep2, err := wire.OpenReport(tampered)
	if err != nil || rep2.Member != "ship-2" {
		t.Fatalf("tampered report: %v", err)
	}
	if err := wire.VerifyReport(sr2, st.PublicKey); !errors.Is(err, wire.ErrReportSignature) {
		t.Fatalf("a tampered report verifies: %v", err)
	}

	// Once imported, a report carries neither key nor token; the key is
	// the same.
	if _, err := mutate(ctx, m.cs, ns, false, func(s *state) error { s.JoinedAt = metav1.Now().Time; return nil }); err != nil {
		t.Fatal(err)
	}
	rep3, err := WriteReport(ctx, m.cs, m.pc, ns, nil, out, ReportFileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep3.PublicKey != "" || rep3.Token != "" || rep3.Receipt != nil || rep3.Repositories != nil {
		t.Fatalf("a later report: key %v, token %v, receipt %v", rep3.PublicKey != "", rep3.Token != "", rep3.Receipt != nil)
	}
	if after, _ := ReadStatus(ctx, m.cs, ns); after.PublicKey != st.PublicKey {
		t.Fatal("the site key was made again")
	}
	if _, err := WriteReport(ctx, m.cs, m.pc, ns, nil, out, ReportFileOptions{Name: "ship-2"}); err == nil {
		t.Fatal("a report renamed the member")
	}
}

// TestReportPackages: each Package as a report tells it — Ready only at
// the digest its spec asks for, the controller's refusal with its reason.
func TestReportPackages(t *testing.T) {
	const d1, d2 = "sha256:1111111111111111111111111111111111111111111111111111111111111111", "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	ready := metav1.Condition{Type: pkgapi.Ready, Status: metav1.ConditionTrue, Reason: pkgapi.ReasonInstalled}
	for _, tc := range []struct {
		name string
		pkg  pkgapi.Package
		want v1alpha1.MemberPackage
	}{
		{"ready", pkgapi.Package{Spec: pkgapi.PackageSpec{Digest: d1}, Status: pkgapi.PackageStatus{Digest: d1, Version: "1", Conditions: []metav1.Condition{ready}}},
			v1alpha1.MemberPackage{Version: "1", Digest: d1, Ready: true}},
		{"ready at the old digest", pkgapi.Package{Spec: pkgapi.PackageSpec{Digest: d2}, Status: pkgapi.PackageStatus{Digest: d1, Version: "1", Conditions: []metav1.Condition{ready}}},
			v1alpha1.MemberPackage{Version: "1", Digest: d1}},
		{"refused by the controller", pkgapi.Package{Spec: pkgapi.PackageSpec{Digest: d2}, Status: pkgapi.PackageStatus{Digest: d2, Conditions: []metav1.Condition{
			{Type: pkgapi.Verified, Status: metav1.ConditionFalse, Reason: pkgapi.ReasonVerifyFailed, Message: "signed by\nanother key"},
			{Type: pkgapi.Ready, Status: metav1.ConditionFalse, Reason: pkgapi.ReasonVerifyFailed, Message: "m"}}}},
			v1alpha1.MemberPackage{Digest: d2, Target: d2, Refused: true, Reason: pkgapi.ReasonVerifyFailed, Message: "signed by another key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pkg.Name, tc.pkg.Labels = "app", map[string]string{LabelPlacement: "web"}
			tc.want.Name, tc.want.Placement = "app", "web"
			if got := memberPackage(&tc.pkg); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func mustKey(t *testing.T, pem []byte) *artifact.PublicKey {
	t.Helper()
	k, err := artifact.ParsePublicKey("ours", pem)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRepositoryReceipts: a receipt per repository the Packages name, of
// that repository alone (not app/tools under app), each once; those that
// do not fit in the report are left out, not the report.
func TestRepositoryReceipts(t *testing.T) {
	ctx := context.Background()
	ours := newSigner(t)
	m := newMember(t, ours.pub)
	reg, err := artifact.RemoteOptions{}.Registry(m.host)
	if err != nil {
		t.Fatal(err)
	}
	app, appd := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	tools, toolsd := buildPackage(t, "tools", "1.0.0", "t = 1\n", ours)
	for ref, path := range map[string]string{"app:1.0.0": app, "app/tools:1.0.0": tools} {
		r, err := artifact.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Push(ctx, r, m.host+"/"+ref, artifact.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pkg := func(name, repo string) pkgapi.Package {
		return pkgapi.Package{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: pkgapi.PackageSpec{Repository: repo}}
	}
	pkgs := []pkgapi.Package{pkg("app", "app"), pkg("again", "app"), pkg("gone", "gone")}
	got, err := repositoryReceipts(ctx, reg, "reg", pkgs, maxReportPayload)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["app"] == nil || got["gone"] == nil {
		t.Fatalf("receipts of %d repositories", len(got))
	}
	rc, err := artifact.ParseReceipt(got["app"])
	if err != nil || rc.Blobs[digest.Digest(appd)] == 0 || rc.Blobs[digest.Digest(toolsd)] != 0 {
		t.Fatalf("the receipt of app: %d blobs, app's root %v, app/tools' root %v, %v", len(rc.Blobs), rc.Blobs[digest.Digest(appd)] != 0, rc.Blobs[digest.Digest(toolsd)] != 0, err)
	}
	if rc, err := artifact.ParseReceipt(got["gone"]); err != nil || len(rc.Blobs) != 0 {
		t.Fatalf("the receipt of a repository the registry does not hold: %v", err)
	}
	// Room for gone's (empty) receipt only: app's is left out.
	small, err := repositoryReceipts(ctx, reg, "reg", pkgs, len(got["gone"])+len("gone")+4)
	if err != nil || len(small) != 1 || small["gone"] == nil {
		t.Fatalf("receipts within a small budget: %d, %v", len(small), err)
	}
}
