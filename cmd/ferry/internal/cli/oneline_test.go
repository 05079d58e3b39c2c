package cli

import (
	"errors"
	"strings"
	"testing"
)

// An error quoting what came from outside prints as one short line with
// no terminal escapes: white space folded, control characters shown, the
// line cut at MaxErrorLine saying how long it was.
func TestOneLine(t *testing.T) {
	got := OneLine(errors.New("denied:\n  line2\x1b[31mRED\x1b]0;PWN\x07 " + strings.Repeat("0", 60_000)))
	if strings.ContainsAny(got, "\n\x1b\x07") {
		t.Errorf("control characters printed: %q", got[:80])
	}
	if !strings.HasPrefix(got, `denied: line2\x1b[31mRED\x1b]0;PWN\x07 000`) {
		t.Errorf("folded as %q", got[:60])
	}
	if len(got) > MaxErrorLine+64 || !strings.HasSuffix(got, "(60039 bytes in all)") {
		t.Errorf("%d bytes, ending %q", len(got), got[len(got)-30:])
	}
	if got := OneLine(errors.New("plain ünïcode")); got != "plain ünïcode" {
		t.Errorf("%q", got)
	}
}
