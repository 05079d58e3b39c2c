package install

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// registryLayout pushes one image (a config, a layer, a manifest tagged
// 1.0) to a registry on a fresh folder and lists what it stored: every
// file's path with its size, and the content of the link files and of
// ferry's own files beside distribution's (its catalog).
func registryLayout(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	ts := registrytest.NewServer(t, registry.Config{RootDir: root})
	repo, err := remote.NewRepository(registrytest.Host(ts) + "/library/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	cfg, err := oras.PushBytes(ctx, repo, ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := oras.PushBytes(ctx, repo, ocispec.MediaTypeImageLayer, []byte("a layer of the format test"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{
		ConfigDescriptor: &cfg, Layers: []ocispec.Descriptor{layer},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2026-11-01T00:00:00Z"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(ctx, m, "1.0"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %d", filepath.ToSlash(rel), info.Size())
		if d.Name() == "link" || strings.HasPrefix(filepath.ToSlash(rel), "ferry/") {
			body, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", body)
		}
		b.WriteString(line + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("DUMP"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "registry-layout.txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
