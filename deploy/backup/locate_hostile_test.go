package backup

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A receipt over artifact.MaxReceiptSize is refused from its size before
// it is read: before, ReadBase read 64 MiB of it (157 MiB allocated,
// 155 ms) to refuse it.
func TestReadBaseHugeReceipt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "receipt.json")
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 1<<30); err != nil { // sparse
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := ReadBase(context.Background(), p)
	runtime.ReadMemStats(&m1)
	if err == nil || !strings.Contains(err.Error(), "more than") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want one line naming the limit", err)
	}
	if a := m1.TotalAlloc - m0.TotalAlloc; a > 1<<20 {
		t.Fatalf("%d MiB allocated to refuse a receipt by its size", a>>20)
	}
}
