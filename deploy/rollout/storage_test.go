package rollout

import (
	"encoding/json"
	"testing"

	"github.com/ferrypkg/ferry/registry"
)

// TestStorageReadsTheRegistrysReport: what `ferry-registry gc` prints
// (registry.GCResult) decodes into Storage whole.
func TestStorageReadsTheRegistrysReport(t *testing.T) {
	out, err := json.Marshal(registry.GCResult{Before: 1234, After: 56})
	if err != nil {
		t.Fatal(err)
	}
	var s Storage
	if err := json.Unmarshal(out, &s); err != nil || s != (Storage{Before: 1234, After: 56}) {
		t.Fatalf("%s → %+v, %v", out, s, err)
	}
}
