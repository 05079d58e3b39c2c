package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/install"
	"github.com/ferrypkg/ferry/deploy/upload"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAdviceFollowsLibraryErrors: each library error that wants a command
// typed gets its advice from the command line, once, wrapped as it comes.
func TestAdviceFollowsLibraryErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		says string
	}{
		{deploy.ErrUnsigned, "pass --key"},
		{deploy.ErrNoPackageAPI, "run `ferry init` of this version"},
		{deploy.ErrNoTrustedKey, "`ferry init --key cosign.pub`"},
		{deploy.ErrBeingDeleted, "wait for `ferry remove`"},
		{deploy.ErrNoKeyToMigrate, "pass --key"},
		{cluster.NotSetUp(notFound()), "run `ferry init`"},
		{reach.ErrNoRegistry, "run `ferry init`"},
		{reach.ErrNoReadyPod, "to repair it"},
		{reach.ErrForbidden, "--registry-via nodeport"},
		{upload.ErrNoToken, "without --via-agent"},
		{inject.ErrStrands, "pass --migrate"},
		{&cluster.DowngradeError{Recorded: cluster.Ferry{Version: "v2.0.0", Generation: 2}, Running: cluster.Ferry{Version: "v1.0.0", Generation: 1}}, "use ferry v2.0.0 or newer, or pass --allow-downgrade"},
		{&cluster.DowngradeError{Recorded: cluster.Ferry{Generation: 2}, Running: cluster.Ferry{Generation: 1}}, "use a ferry of formats generation 2 or newer"},
		{&install.BinaryError{Arch: "arm64", Path: "bin/ferry-linux-arm64", Err: errors.New("not there")}, "GOARCH=arm64 go build -trimpath -ldflags='-s -w' -o bin/ferry-linux-arm64 ./cmd/ferry"},
	} {
		err := cli.Advise(fmt.Errorf("deploy app: %w", tc.err), advice)
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: no advice %q", err, tc.says)
		}
		if strings.Contains(tc.err.Error(), tc.says) {
			t.Errorf("the library's own error %q gives the advice %q", tc.err, tc.says)
		}
	}
	if err := cli.Advise(errors.New("plain"), advice); err.Error() != "plain" {
		t.Errorf("advice on an error nobody advises on: %v", err)
	}
}

func notFound() error {
	return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, "ferry-state")
}

// cliAdvice matches what only the command line may say: a flag, or a ferry
// command to type.
var cliAdvice = regexp.MustCompile("(^|[\\s(,;:])--[a-z]|`ferry [a-z]")

// TestLibraryErrorsGiveNoCommandLineAdvice: the libraries' errors say what
// is wrong, never what to type (docs/design/layering.md) — that is
// advice's job, here. Every errors.New and fmt.Errorf format string of the
// library folders is read.
func TestLibraryErrorsGiveNoCommandLineAdvice(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	read := 0
	for _, dir := range []string{"artifact", "registry", "inject", "injector", "deploy", "internal", "conformance"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "testsupport" || d.Name() == "inputs" || strings.HasSuffix(d.Name(), "test")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || !(id.Name == "errors" && sel.Sel.Name == "New" || id.Name == "fmt" && sel.Sel.Name == "Errorf") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				read++
				if s, _ := strconv.Unquote(lit.Value); cliAdvice.MatchString(s) {
					t.Errorf("%s: a library error gives command-line advice: %s", fset.Position(lit.Pos()), s)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if read < 1000 {
		t.Fatalf("read %d error formats; the walk missed the libraries", read)
	}
}
