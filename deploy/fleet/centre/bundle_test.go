package centre_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

const mib = 1 << 20

// bigPackage is a package holding two MiB of noise, in two files.
func bigPackage(t *testing.T) string {
	return pkgBuild(t, "big", "1.0.0", map[string][]byte{"a.bin": noise(1, mib), "b.bin": noise(2, mib)})
}

// receipts of a package: whole, half (without its largest blob), none.
func receipts(t *testing.T, r *artifact.Reader) (whole, half, none *artifact.Receipt, left digest.Digest) {
	t.Helper()
	whole, err := artifact.Have(t.Context(), r, "")
	if err != nil {
		t.Fatal(err)
	}
	half = &artifact.Receipt{MediaType: whole.MediaType, Source: "half", Blobs: map[digest.Digest]int64{}}
	var largest []digest.Digest
	for d, size := range whole.Blobs {
		half.Blobs[d] = size
		if size >= mib {
			largest = append(largest, d)
		}
	}
	if len(largest) != 2 {
		t.Fatalf("the package's blobs of a MiB or more: %v", largest)
	}
	slices.Sort(largest)
	delete(half.Blobs, largest[0])
	none = &artifact.Receipt{MediaType: whole.MediaType, Source: "none", Blobs: map[digest.Digest]int64{}}
	return whole, half, none, largest[0]
}

func receiptJSON(t *testing.T, rc *artifact.Receipt) json.RawMessage {
	t.Helper()
	data, err := rc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBundle: a member's bundle is the delta from its receipt: for a
// receipt holding half the package it carries about the missing MiB;
// concurrent requests (of three members) pull the package from the
// registry once; what is
// not in the member's own desired state is refused.
func TestBundle(t *testing.T) {
	w := newWorld(t)
	ctx := t.Context()
	r := w.push(bigPackage(t), "apps/big:1.0.0")
	root := r.Root().Digest.String()
	w.place("big", "apps/big", "stable", map[string]string{"site": "x"}, `{"replicas":3}`, v1alpha1.Strategy{})
	if _, err := w.c.Promote(ctx, "big", "stable", root, "alice"); err != nil {
		t.Fatal(err)
	}
	tok := w.token(centre.TokenOptions{Uses: 4})
	x := w.join("x", tok, map[string]string{"site": "x"})
	y := w.join("y", tok, map[string]string{"site": "y"})
	// A member asks for one bundle at a time: three at once are three
	// members'.
	xs := map[string]*member{"whole": x, "half": w.join("x2", tok, map[string]string{"site": "x"}), "none": w.join("x3", tok, map[string]string{"site": "x"})}
	w.reconcile()
	whole, half, none, missing := receipts(t, r)

	ask := func(m *member, rc *artifact.Receipt, repo, d string) ([]byte, error) {
		var buf bytes.Buffer
		_, err := m.cl.Bundle(ctx, wire.BundleRequest{Repository: repo, Digest: d, Receipt: receiptJSON(t, rc)}, &buf)
		return buf.Bytes(), err
	}

	t.Run("sizes", func(t *testing.T) {
		start := time.Now()
		var wg sync.WaitGroup
		sizes := map[string]int{}
		var mu sync.Mutex
		for name, rc := range map[string]*artifact.Receipt{"whole": whole, "half": half, "none": none} {
			wg.Go(func() {
				data, err := ask(xs[name], rc, "apps/big", root)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sizes[name] = len(data)
				mu.Unlock()
				if name == "half" {
					checkDelta(t, data, root)
				}
			})
		}
		wg.Wait()
		t.Logf("bundles for receipts holding the whole package, half of it, nothing: %d, %d, %d bytes (in %s, three at once)",
			sizes["whole"], sizes["half"], sizes["none"], time.Since(start).Round(time.Millisecond))
		if s := sizes["half"]; s < mib || s > mib+64<<10 {
			t.Errorf("the delta for half the package is %d bytes, want the missing MiB and at most 64 KiB more", s)
		}
		if s := sizes["whole"]; s > 64<<10 {
			t.Errorf("the delta for a receipt holding everything is %d bytes", s)
		}
		if s := sizes["none"]; s < 2*mib || s > 2*mib+64<<10 {
			t.Errorf("the delta for an empty receipt is %d bytes", s)
		}
		if n := counter(&w.blobGets, "/v2/apps/big/blobs/"+missing.String()).Load(); n != 1 {
			t.Errorf("the registry was asked %d times for the missing blob: three bundles must pull it once", n)
		}
		if left, _ := filepath.Glob(filepath.Join(w.c.Spool, "bundle-*")); len(left) != 0 {
			t.Errorf("bundles left in the spool: %v", left)
		}
	})

	t.Run("damaged in the spool", func(t *testing.T) {
		spooled, _ := filepath.Glob(filepath.Join(w.c.Spool, "packages", "*.tar"))
		if len(spooled) != 1 {
			t.Fatalf("spooled: %v", spooled)
		}
		data, err := os.ReadFile(spooled[0])
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(spooled[0], data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = ask(x, none, "apps/big", root)
		if status, msg := refusal(t, err); status != 500 || !strings.Contains(msg, "the delta of apps/big@"+root) {
			t.Errorf("a bundle from a damaged spool: %d %q", status, msg)
		}
		if data, err := ask(x, none, "apps/big", root); err != nil || len(data) < 2*mib {
			t.Errorf("the next bundle, pulled again: %d bytes, %v", len(data), err)
		}
	})

	for _, tc := range []struct {
		name, repo, digest string
		m                  *member
		status             int
		says               string
	}{
		{"another repository", "apps/other", root, x, 403, "apps/other@" + root + " is not in member x's desired state"},
		{"another digest", "apps/big", "sha256:" + strings.Repeat("0", 64), x, 403, "is not in member x's desired state"},
		{"not its desired state", "apps/big", root, y, 403, "is not in member y's desired state"},
		{"not a digest", "apps/big", "latest", x, 400, `"latest" is not a digest`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ask(tc.m, half, tc.repo, tc.digest)
			status, msg := refusal(t, err)
			if status != tc.status || !strings.Contains(msg, tc.says) {
				t.Errorf("%d %q, want %d saying %q", status, msg, tc.status, tc.says)
			}
		})
	}
}

// checkDelta opens a bundle as a delta of root.
func checkDelta(t *testing.T, data []byte, root string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bundle.tar.zst")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(t.Context(), p)
	if err != nil {
		t.Fatalf("the bundle does not open: %v", err)
	}
	if got := r.Root().Digest.String(); got != root {
		t.Errorf("the bundle's root is %s, want %s", got, root)
	}
}
