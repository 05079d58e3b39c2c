package sbomcmd

import (
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
)

// hostile is what an SBOM, a registry or a database may put in a name:
// a terminal's escape sequences, a line break, a tab.
const hostile = "evil\x1b]0;owned\x07\x1b[2J\nnext line\tcell"

// TestPrintHostile: the text tables of query and audit show every string
// that came from outside inert (no control character reaches the
// terminal) and one row per answer.
func TestPrintHostile(t *testing.T) {
	loc := bomscan.Location{Package: hostile, Version: hostile, Image: hostile, Platform: hostile, Runs: []string{hostile}}
	comp := bom.Component{Name: hostile, Version: hostile, PURL: hostile}
	q, err := bom.ParseQuery("evil")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := printHits(&b, q, []bomscan.Hit{{Location: loc, Component: comp}}); err != nil {
		t.Fatal(err)
	}
	check(t, "query", b.String(), 2)

	f := bomscan.Finding{Location: loc, Component: comp}
	f.Match.ID, f.Match.Fixed = hostile, hostile
	b.Reset()
	db := &auditDB{Source: hostile, Date: time.Now()}
	if err := printFindings(&b, db, time.Hour, []bomscan.Finding{f}); err != nil {
		t.Fatal(err)
	}
	check(t, "audit", b.String(), 4)
}

func check(t *testing.T, what, out string, lines int) {
	t.Helper()
	if i := strings.IndexFunc(out, func(r rune) bool { return unicode.IsControl(r) && r != '\n' }); i >= 0 {
		t.Errorf("%s: a control character reaches the terminal at %d:\n%q", what, i, out)
	}
	if n := strings.Count(out, "\n"); n != lines {
		t.Errorf("%s: %d lines, want %d:\n%s", what, n, lines, out)
	}
}
