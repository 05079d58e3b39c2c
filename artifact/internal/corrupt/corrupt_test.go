package corrupt

import (
	"fmt"
	"strings"
	"testing"
)

// TestSomeOf: a list of 100,000 things is said in one short line.
func TestSomeOf(t *testing.T) {
	if got := SomeOf([]string{"a", "b"}); got != "a, b" {
		t.Errorf("SomeOf(a, b) = %q", got)
	}
	many := make([]string, 100_000)
	for i := range many {
		many[i] = fmt.Sprintf("SBOM sha256:%064d of x (linux/amd64)", i)
	}
	got := SomeOf(many)
	if len(got) > 600 || !strings.HasSuffix(got, " and 99995 more") {
		t.Errorf("SomeOf(100,000) = %d bytes: %.80q…", len(got), got)
	}
}
