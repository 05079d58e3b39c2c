package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
)

// inspect's text shows a package's control characters instead of sending
// them: a description or a target from someone else's package neither
// acts on the terminal nor adds a line.
func TestPrintReportInert(t *testing.T) {
	rep := &artifact.Report{Name: "p", Version: "1", Description: "a\x1b]0;PWN\x07\nfake line",
		Components: []artifact.Component{{Name: "c", Description: "d\x1b[31m"}}}
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	printReport(cmd, rep, -1)
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07") || strings.Contains(got, "\nfake line") {
		t.Fatalf("control characters printed:\n%q", got)
	}
	if !strings.Contains(got, `a\x1b]0;PWN\x07\x0afake line`) {
		t.Errorf("description shown as %q", got)
	}
}
