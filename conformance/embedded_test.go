package conformance_test

import (
	"context"
	"os"
	"testing"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestEmbeddedRegistry runs every workflow against ferry's registry, in memory
// and on the filesystem: every check must pass.
func TestEmbeddedRegistry(t *testing.T) {
	for name, cfg := range map[string]registry.Config{
		"inmemory":   {},
		"filesystem": {RootDir: t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			ts := registrytest.NewServer(t, cfg)
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
