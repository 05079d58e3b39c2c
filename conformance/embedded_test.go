package conformance_test

import (
	"context"
	"os"
	"testing"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestEmbeddedRegistry runs every workflow against ferry's registry, in
// memory, on the filesystem and on S3 (MinIO on loopback): every check must
// pass.
func TestEmbeddedRegistry(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T) registry.Config{
		"inmemory":   func(*testing.T) registry.Config { return registry.Config{} },
		"filesystem": func(t *testing.T) registry.Config { return registry.Config{RootDir: t.TempDir()} },
		"s3":         func(t *testing.T) registry.Config { return registry.Config{S3: miniotest.Start(t).Bucket(t)} },
	} {
		t.Run(name, func(t *testing.T) {
			ts := registrytest.NewServer(t, cfg(t))
			rep, err := conformance.Run(context.Background(), conformance.Config{URL: ts.URL, LargeBlobSize: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if testing.Verbose() {
				_ = conformance.WriteResults(os.Stdout, rep)
			}
			for _, r := range rep.Results {
				if r.Status != conformance.Passed {
					t.Errorf("%s %s: %s", r.ID, r.Status, r.Detail)
				}
			}
		})
	}
}
