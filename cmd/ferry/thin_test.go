package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxCommandLines bounds the functions that build the thin commands: flags
// to options, one library call, the result rendered (crane's copy is the
// model). What does more belongs in the library, or in small named
// functions beside the command.
const maxCommandLines = 60

// TestCommandsStayThin: newDeployCmd and newRemoveCmd, help texts and flags
// included, are at most maxCommandLines lines each.
func TestCommandsStayThin(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"newDeployCmd": false, "newRemoveCmd": false}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			if _, ok := want[fn.Name.Name]; !ok {
				continue
			}
			want[fn.Name.Name] = true
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > maxCommandLines {
				t.Errorf("%s is %d lines, over %d: move what is not flags, one library call and rendering out of it", fn.Name.Name, n, maxCommandLines)
			}
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("%s not found: the check is broken", name)
		}
	}
}
