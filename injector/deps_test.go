package injector

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly keeps stage 1 free of anything outside the
// standard library (docs/design/injector.md), and free of net/http and encoding/json,
// which would break its size budget.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/ferrypkg/ferry/injector", "github.com/ferrypkg/ferry/injector/cmd/ferry-injector").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/ferrypkg/ferry/injector" && p != "github.com/ferrypkg/ferry/injector/cmd/ferry-injector" {
			t.Errorf("injector depends on %s, which is not in the standard library", p)
		}
	}
	out, err = exec.Command("go", "list", "-deps", "github.com/ferrypkg/ferry/injector/cmd/ferry-injector").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net/http" || p == "encoding/json" {
			t.Errorf("injector depends on %s, which breaks the 3 MiB size budget", p)
		}
	}
}
