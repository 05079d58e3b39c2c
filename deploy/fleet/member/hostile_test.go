package member

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestHostileCentre: what a centre answers is checked before anything is
// done with it. A desired state past the wire's bound fails the sync in
// one line; a desired package whose repository, digest, values, timeout
// or components do not check is refused in one line without a bundle
// asked for; a bundle that is not a package, or is another package or
// version than asked, is refused. In every case nothing is pushed or
// applied, and the refusal is reported.
func TestHostileCentre(t *testing.T) {
	ours := newSigner(t)
	app, appd := buildPackage(t, "app", "1.0.0", "a = 1\n", ours)
	other, _ := buildPackage(t, "web", "1.0.0", "w\n", ours)
	app2, _ := buildPackage(t, "app", "2.0.0", "a = 2\n", ours)
	good := wire.DesiredPackage{Name: "app", Placement: "p", Repository: "apps/app", Digest: appd}
	serve := func(path string) func(c *centre) {
		return func(c *centre) {
			c.bundleFn = func(w http.ResponseWriter, req wire.BundleRequest) { c.serveDelta(w, path, req.Receipt) }
		}
	}
	for _, tc := range []struct {
		name string
		set  func(c *centre)
		// want is in the sync's error, or else in the refusal reported
		// (with reason).
		want, reason string
		bundles      int
		maxBundle    int64
	}{
		{name: "desired state too large", set: func(c *centre) {
			c.syncRaw = []byte(`{"packages":[{"name":"` + strings.Repeat("a", wire.MaxDesired) + `"}]}`)
		}, want: "more than 4194304 bytes"},
		{name: "10⁶ packages within the bound", set: func(c *centre) {
			c.syncRaw = []byte(`{"packages":[` + strings.TrimSuffix(strings.Repeat("{},", (wire.MaxDesired-32)/3), ",") + `]}`)
		}, want: "the centre's answer: the desired state lists 1398090 packages, more than 256"},
		{name: "repository out of the tree", set: func(c *centre) {
			p := good
			p.Repository = "../x"
			c.desired.Packages = []wire.DesiredPackage{p}
		}, want: `repository "../x" is not a repository name`, reason: ReasonInvalidDesired},
		{name: "digest not sha256", set: func(c *centre) {
			p := good
			p.Digest = "sha256:abc"
			c.desired.Packages = []wire.DesiredPackage{p}
		}, want: `digest "sha256:abc" is not sha256:<64 hex digits>`, reason: ReasonInvalidDesired},
		{name: "values not an object", set: func(c *centre) {
			p := good
			p.Values = json.RawMessage(`[1,2]`)
			c.desired.Packages = []wire.DesiredPackage{p}
		}, want: "values are not a JSON object", reason: ReasonInvalidDesired},
		{name: "negative timeout", set: func(c *centre) {
			p := good
			p.TimeoutSeconds = -1
			c.desired.Packages = []wire.DesiredPackage{p}
		}, want: "timeout -1s", reason: ReasonInvalidDesired},
		{name: "a placement with a newline", set: func(c *centre) {
			p := good
			p.Placement = "p\nx"
			c.desired.Packages = []wire.DesiredPackage{p}
		}, want: `placement "p?x"`, reason: ReasonInvalidDesired},
		{name: "listed twice", set: func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{good, good}
		}, want: "lists package app 2 times", reason: ReasonInvalidDesired},
		{name: "garbage bundle", set: func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{good}
			c.bundleFn = func(w http.ResponseWriter, _ wire.BundleRequest) {
				_, _ = io.WriteString(w, strings.Repeat("garbage\n", 1000))
			}
		}, want: "the centre's bundle of app: ", reason: ReasonInvalidBundle, bundles: 1},
		{name: "bundle of another package", set: func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{good}
			serve(other)(c)
		}, want: "not " + appd + " as asked", reason: ReasonBundleMismatch, bundles: 1},
		{name: "bundle of another version", set: func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{good}
			serve(app2)(c)
		}, want: "not " + appd + " as asked", reason: ReasonBundleMismatch, bundles: 1},
		{name: "bundle larger than the agent takes", set: func(c *centre) {
			c.desired.Packages = []wire.DesiredPackage{good}
			serve(app)(c)
		}, want: "larger than the agent takes (65536 bytes)", reason: ReasonInvalidBundle, bundles: 1, maxBundle: 64 << 10},
		{name: "unknown component", set: func(c *centre) {
			p := good
			p.Components = []string{"nope"}
			c.desired.Packages = []wire.DesiredPackage{p}
			serve(app)(c)
		}, want: "nope", reason: ReasonInvalidDesired, bundles: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCentre(t)
			m := newMember(t, ours.pub)
			a := joined(t, c, m)
			a.MaxBundle = tc.maxBundle
			c.set(tc.set)
			_, err := a.SyncOnce(context.Background())
			if tc.reason == "" {
				st, _ := ReadStatus(context.Background(), m.cs, ns)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !oneLineMessage(st.Error) || !strings.Contains(st.Error, tc.want) {
					t.Fatalf("sync: %v; the Secret says %q", err, st.Error)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				c.set(func(c *centre) { c.syncRaw = nil })
				syncOnce(t, a) // the next report tells the refusal
				got := reported(t, c.lastReport(), "app")
				if !got.Refused || got.Reason != tc.reason || !oneLineMessage(got.Message) || !strings.Contains(got.Message, tc.want) {
					t.Fatalf("reported %+v, want %s: %q", got, tc.reason, tc.want)
				}
			}
			if _, _, _, bundles := c.count(); bundles != tc.bundles {
				t.Fatalf("%d bundles asked for, want %d", bundles, tc.bundles)
			}
			if m.pkg(t, "app") != nil || m.pkg(t, "web") != nil || len(m.repositories(t)) != 0 {
				t.Fatalf("something was deployed: repositories %v", m.repositories(t))
			}
			if left, _ := os.ReadDir(a.Spool); len(left) != 0 {
				t.Fatalf("the spool holds %d files", len(left))
			}
		})
	}
}
