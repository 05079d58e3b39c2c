package registry

import "testing"

// TestFerryStoragePaths pins where ferry keeps its own files in a
// registry's storage, beside distribution's layout (deploy/install's
// TestFormatRegistryLayout pins that and the catalog's content): a
// registry of another ferry serves the same storage, so a move needs a
// migration (deploy/install's formatMigrations) and a new
// cluster.FormatGeneration.
func TestFerryStoragePaths(t *testing.T) {
	for got, want := range map[string]string{
		sideDir:        "/ferry/repositories",
		catalogDir:     "/ferry/catalog/repositories",
		catalogStamp:   "/ferry/catalog/indexed",
		readOnlyFlag:   "/ferry/maintenance/read-only",
		httpSecretPath: "/ferry/http-secret",
	} {
		if got != want {
			t.Errorf("storage path %s, 53a21d7 kept it at %s", got, want)
		}
	}
}
