package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/internal/inputs"
)

// commandInputs lists what the command tree takes from outside: every flag
// of every runnable command ("ferry package create --sign-key") and the
// arguments of those that take some ("ferry package create ARGS").
func commandInputs(t *testing.T) []string {
	t.Helper()
	var names []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		if !c.Runnable() || c.HasSubCommands() || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Args == nil || c.Args(c, []string{"x"}) == nil || c.Args(c, []string{"x", "y"}) == nil {
			names = append(names, c.CommandPath()+" ARGS")
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "help" {
				names = append(names, c.CommandPath()+" --"+f.Name)
			}
		})
	}
	walk(newRootCmd())
	slices.Sort(names)
	return slices.Compact(names)
}

// registered is the register's Where of one family.
func registered(family string) map[string]inputs.Entry {
	m := map[string]inputs.Entry{}
	for _, e := range inputs.Register {
		if e.Family() == family {
			m[e.Where] = e
		}
	}
	return m
}

// checkCovered fails for every input of have that the register lacks, and
// for every entry of the family that names nothing there (a flag removed).
func checkCovered(t *testing.T, family string, have []string) {
	t.Helper()
	reg := registered(family)
	for _, h := range have {
		if _, ok := reg[h]; !ok {
			t.Errorf("%s reads input but is not in the register of inputs (internal/inputs): declare its kind and bounds there", h)
		}
		delete(reg, h)
	}
	for w := range reg {
		t.Errorf("the register of inputs names %s, which does not exist", w)
	}
}

// TestInputRegisterCoversCommands: every command's arguments and every
// flag are in the register of inputs, with a kind; a new flag fails here
// until it is declared (and, if it reads something, fed the corpus).
func TestInputRegisterCoversCommands(t *testing.T) {
	checkCovered(t, "ferry", commandInputs(t))
	for _, e := range inputs.Register {
		if e.Kind == "" {
			t.Errorf("%s: no kind", e.Where)
		}
		if e.Kind.Fed() && e.Try == "" && e.Test == "" && e.Bound == "" {
			t.Errorf("%s reads %s input but says neither its bound nor how it is tried", e.Where, e.Kind)
		}
	}
}

// TestInputRegisterCoversDefinition: every field of ferry.yaml is in the
// register.
func TestInputRegisterCoversDefinition(t *testing.T) {
	fields, err := definition.Fields()
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		fields[i] = "ferry.yaml " + f
	}
	checkCovered(t, "ferry.yaml", fields)
}

// zarfPathField is a Zarf field whose name says it names a file, a
// folder or a URL.
var zarfPathField = regexp.MustCompile(`(?i)(source|path|files?|kustomizations|url)$`)

// TestInputRegisterCoversZarf: every Zarf field the register names is in
// Zarf's schema, and every field of the schema whose name says it names a
// file, a folder or a URL is in the register.
func TestInputRegisterCoversZarf(t *testing.T) {
	schema := zarf.SchemaFields()
	var paths []string
	for _, f := range schema {
		if _, name, _ := strings.Cut(f, "."); zarfPathField.MatchString(name) {
			paths = append(paths, "zarf.yaml "+f)
		}
	}
	reg := registered("zarf.yaml")
	for _, p := range paths {
		if _, ok := reg[p]; !ok {
			t.Errorf("%s names a file, a folder or a URL but is not in the register of inputs", p)
		}
	}
	for w := range reg {
		if !slices.Contains(schema, strings.TrimPrefix(w, "zarf.yaml ")) {
			t.Errorf("the register of inputs names %s, which Zarf's schema does not have", w)
		}
	}
}

// TestInputRegisterCoversEnvironment: every environment variable the
// production code reads (os.Getenv, os.LookupEnv with a constant) is in
// the register.
func TestInputRegisterCoversEnvironment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	type call struct {
		pos  string
		expr ast.Expr
	}
	var calls []call
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			// Tests, their support and the tools that build the project
			// are not ferry.
			switch {
			case strings.HasPrefix(d.Name(), ".") && rel != ".",
				slices.Contains([]string{"e2e", "tools", "hack", "testdata", "out", "bin", "sbomgen"}, rel),
				strings.HasSuffix(d.Name(), "test"),
				rel == "internal/testsupport":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv") && len(n.Args) == 1 {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" {
						calls = append(calls, call{pos: fset.Position(n.Pos()).String(), expr: n.Args[0]})
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range calls {
		var name string
		switch e := c.expr.(type) {
		case *ast.BasicLit:
			name, _ = strconv.Unquote(e.Value)
		case *ast.Ident:
			name = consts[e.Name]
		case *ast.SelectorExpr:
			name = consts[e.Sel.Name]
		}
		if name == "" {
			t.Errorf("%s: reads an environment variable whose name is not a constant: the register of inputs cannot check it", c.pos)
			continue
		}
		names = append(names, "env "+name)
	}
	if len(names) < 5 {
		t.Fatalf("found only %d reads of the environment: the scan is broken", len(names))
	}
	reg := registered("env")
	for _, n := range names {
		if _, ok := reg[n]; !ok {
			t.Errorf("%s is read but not in the register of inputs", n)
		}
	}
}

// Markers around the register's table in docs/limits.md.
const (
	registerBegin = "<!-- register: begin (generated from internal/inputs; FERRY_UPDATE_DOCS=1 go test ./cmd/ferry -run TestLimitsDocListsRegister) -->\n"
	registerEnd   = "<!-- register: end -->\n"
)

// TestLimitsDocListsRegister: docs/limits.md's register table is the
// register's, row for row. FERRY_UPDATE_DOCS=1 rewrites it.
func TestLimitsDocListsRegister(t *testing.T) {
	const path = "../../docs/limits.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), registerBegin)
	_, after, ok2 := strings.Cut(rest, registerEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/limits.md has no register table between %q and %q", registerBegin, registerEnd)
	}
	want := before + registerBegin + inputs.Markdown() + registerEnd + after
	if want == string(doc) {
		return
	}
	if os.Getenv("FERRY_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/limits.md's register table is not the register's (internal/inputs): FERRY_UPDATE_DOCS=1 go test ./cmd/ferry -run TestLimitsDocListsRegister rewrites it")
}
