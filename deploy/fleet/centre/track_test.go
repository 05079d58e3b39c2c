package centre_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestPromotePackageName: the track's repository is apps/shop-v2, the
// package in it is named shop. Promote records the package's own name on
// the channel, and a member is given a Package named shop — the name its
// bundle carries, which a member checks it against — not shop-v2. A track
// whose spec.package names another package, or whose other channel
// carries another, is refused the version in one line, and left as it
// was.
func TestPromotePackageName(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	v1 := w.push(pkgBuild(t, "shop", "1.0.0", map[string][]byte{}), "apps/shop-v2:1.0.0")
	w.push(pkgBuild(t, "cart", "9.0.0", map[string][]byte{}), "apps/shop-v2:9.0.0")
	w.place("shop-v2", "apps/shop-v2", "stable", map[string]string{"site": "x"}, "", v1alpha1.Strategy{})
	tr, err := w.c.Promote(ctx, "shop-v2", "stable", "1.0.0", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if ch := tr.Spec.Channels; len(ch) != 1 || ch[0].Package != "shop" || ch[0].Version != "1.0.0" || tr.PackageName() != "shop" {
		t.Fatalf("the track's channels: %+v", ch)
	}
	x := w.join("x", w.token(centre.TokenOptions{}), map[string]string{"site": "x"})
	w.reconcile()
	if err := x.sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(x.last.Packages) != 1 || x.last.Packages[0].Name != "shop" || x.last.Packages[0].Repository != "apps/shop-v2" {
		t.Fatalf("x's desired state: %+v", x.last.Packages)
	}
	// The bundle is package shop, as the member is told.
	var buf bytes.Buffer
	empty := &artifact.Receipt{MediaType: artifact.MediaTypeReceipt, Source: "none"}
	if _, err := x.cl.Bundle(ctx, wire.BundleRequest{Repository: "apps/shop-v2", Digest: v1.Root().Digest.String(), Receipt: receiptJSON(t, empty)}, &buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bundle.tar.zst")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Config().Name; got != x.last.Packages[0].Name {
		t.Errorf("the bundle is package %s, the member is told %s", got, x.last.Packages[0].Name)
	}

	named := &v1alpha1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"},
		Spec: v1alpha1.ReleaseTrackSpec{Repository: "apps/shop-v2", Package: "shop-v2"}}
	if err := w.kc.Create(ctx, named); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, track, channel, ref, says string
	}{
		{"spec.package another", "named", "stable", "1.0.0", "promote version 1.0.0 (" + v1.Root().Digest.String() + ") to channel stable of track named: it is package shop, not shop-v2 as the track's spec.package says"},
		{"another package", "shop-v2", "beta", "9.0.0", "it is package cart, not shop as the track's channel stable carries: a track is one package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.track(tc.track)
			_, err := w.c.Promote(ctx, tc.track, tc.channel, tc.ref, "alice")
			if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("promote: %v, want one line saying %q", err, tc.says)
			}
			t.Logf("refused: %v", err)
			if after := w.track(tc.track); after.ResourceVersion != before.ResourceVersion {
				t.Error("a refused promotion changed the track")
			}
		})
	}
	// spec.package naming the package itself is no refusal.
	named.Spec.Package = "shop"
	if err := w.kc.Update(ctx, named); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Promote(ctx, "named", "stable", "1.0.0", "alice"); err != nil {
		t.Errorf("promote to a track whose spec.package is the package's name: %v", err)
	}
}

func (w *world) track(name string) *v1alpha1.ReleaseTrack {
	w.t.Helper()
	var t v1alpha1.ReleaseTrack
	if err := w.kc.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &t); err != nil {
		w.t.Fatal(err)
	}
	return &t
}
