package artifact_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// extractLayout unpacks a .tar package into a layout folder (test helper).
func extractLayout(t testing.TB, archive string) string {
	t.Helper()
	dir := t.TempDir()
	for _, e := range readTar(t, archive) {
		p := filepath.Join(dir, filepath.FromSlash(e.Header.Name))
		if e.Header.Typeflag == '5' {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, e.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHelmPullFromPackage: once the package sits in a registry, the real
// helm CLI fetches each chart from it by digest.
func TestHelmPullFromPackage(t *testing.T) {
	helm := peertool.Require(t, "helm")
	w := newWorld(t)
	archive := filepath.Join(t.TempDir(), "demo.tar")
	res := create(t, w, archive)
	ctx := context.Background()
	store, err := oci.NewFromFS(ctx, os.DirFS(extractLayout(t, archive)))
	if err != nil {
		t.Fatal(err)
	}
	repoRef := w.Host + "/pkgs/demo"
	if _, err := oras.Copy(ctx, store, res.Root.Digest.String(), remoteRepo(t, repoRef+":1.0.0"), "1.0.0", oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	for _, ch := range res.Config.Components[0].Charts {
		t.Run(ch.Name, func(t *testing.T) {
			out := t.TempDir()
			home := t.TempDir()
			cmd := exec.Command(helm, "pull", "oci://"+repoRef+"@"+ch.Digest.String(), "--plain-http", "-d", out)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("helm pull: %v\n%s", err, b)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != 1 {
				t.Fatalf("helm pull wrote %d files", len(ents))
			}
			t.Logf("helm pull wrote %s", ents[0].Name())
			got, err := os.ReadFile(filepath.Join(out, ents[0].Name()))
			if err != nil {
				t.Fatal(err)
			}
			// The pulled chart is the layer the package stores.
			found := false
			for _, e := range readTar(t, archive) {
				if bytes.Equal(e.Data, got) {
					found = true
				}
			}
			if !found {
				t.Errorf("helm pulled %d bytes that the package does not hold", len(got))
			}
		})
	}
}
