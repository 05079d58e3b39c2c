package inputs

import (
	"fmt"
	"strings"
)

// Markdown is the register as docs/limits.md shows it: one row per entry
// that reads something, grouped by family, with its kind and bound.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| input | kind | bound |\n|---|---|---|\n")
	for _, e := range Register {
		if e.Kind == None {
			continue
		}
		bound := e.Bound
		if e.Budget != nil {
			bound += fmt.Sprintf(" (hostile-test budget %d s, %d MiB)", e.Budget.Seconds, e.Budget.MiB)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", e.Where, e.Kind, strings.ReplaceAll(bound, "|", "\\|"))
	}
	return b.String()
}
