// Command layers holds the tree to its shape (docs/design/layering.md), as
// `make lint` runs it from the module's root:
//
//   - imports point down: each top-level folder imports only the folders
//     its layer may (artifact → internal; registry → artifact; inject →
//     artifact, injector; deploy → inject, registry, artifact; cmd → all;
//     internal → internal; nothing imports cmd);
//   - test support (internal/testsupport and packages named …test) is
//     imported only by tests, other test support, e2e, hack and examples;
//   - no package holds more than MaxPackageLines production lines, but
//     those in over, each held to its own bound;
//   - docs/architecture.md's code map names every package.
//
// It prints one line per breach and exits 1 if there is any.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MaxPackageLines bounds a package's production Go lines (issue 50: a
// package larger than this is several packages waiting to be named).
const MaxPackageLines = 5000

const module = "github.com/ferrypkg/ferry"

// over lists the packages allowed more than MaxPackageLines: each is held
// to its bound, so that it does not grow, and says why it is over.
var over = map[string]struct {
	lines int
	why   string
}{
	// Measured at issue 50 with a cross-reference of each further cut
	// (identifiers that would cross it, unexported today): the Reader, its
	// walk, parts and deltas read as one package, and the streaming push
	// are one engine. Carrying (split, delta, receipt) would export 50,
	// with parts and deltas read 66; transfer (push, pull, copy, mirror,
	// uploads) 43; the verifying side 49. Definition, build, the zstd
	// frames, the graph helpers, the corrupt-package errors and the upload
	// and stall transport moved out. Issue 53 added ferry.json's record of
	// vulnerability databases and its check against the layers (22 lines;
	// reading them is artifact/advisory's). Issue 54 added a full file
	// system's one-line error in split's writer and a listed repository
	// with no tags left (404 NAME_UNKNOWN) read as none (25 lines).
	"artifact": {7950, "one engine: see hack/layers"},
}

// may lists, per top-level folder, the top-level folders its production
// code may import (its own included).
var may = map[string][]string{
	"internal":    {"internal"},
	"injector":    {"injector"},
	"artifact":    {"artifact", "internal"},
	"registry":    {"registry", "artifact", "internal"},
	"inject":      {"inject", "injector", "artifact", "internal"},
	"conformance": {"conformance", "internal"},
	"deploy":      {"deploy", "inject", "registry", "artifact", "internal"},
	"cmd":         {"cmd", "deploy", "inject", "injector", "registry", "artifact", "conformance", "internal"},
	// Tests, tools and examples, outside the product.
	"e2e":      nil,
	"hack":     nil,
	"examples": nil,
}

type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	Imports    []string
}

func main() {
	breaches, err := check()
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	for _, b := range breaches {
		fmt.Println("layers:", b)
	}
	if len(breaches) > 0 {
		os.Exit(1)
	}
}

func check() ([]string, error) {
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	named, err := codeMap("docs/architecture.md")
	if err != nil {
		return nil, err
	}
	return breachesOf(pkgs, named, lines)
}

// breachesOf checks pkgs against the layers, their sizes (counted by
// count) and the packages the code map names.
func breachesOf(pkgs []pkg, named map[string]bool, count func(pkg) (int, error)) ([]string, error) {
	var breaches []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		top := strings.SplitN(rel, "/", 2)[0]
		allowed, known := may[top]
		if !known {
			breaches = append(breaches, fmt.Sprintf("%s: a top-level folder docs/design/layering.md does not place", rel))
			continue
		}
		outside := allowed == nil
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/")
			itop := strings.SplitN(irel, "/", 2)[0]
			switch {
			case testSupport(irel) && !outside && !testSupport(rel):
				breaches = append(breaches, fmt.Sprintf("%s imports %s: test support, for tests only", rel, irel))
			case outside || testSupport(rel) && itop != "cmd":
			case !contains(allowed, itop):
				breaches = append(breaches, fmt.Sprintf("%s imports %s: %s may import only %s", rel, irel, top, strings.Join(allowed, ", ")))
			}
		}
		n, err := count(p)
		if err != nil {
			return nil, err
		}
		if o, ok := over[rel]; ok && n > o.lines {
			breaches = append(breaches, fmt.Sprintf("%s: %d production lines, more than the %d it is held to (%s)", rel, n, o.lines, o.why))
		} else if !ok && n > MaxPackageLines {
			breaches = append(breaches, fmt.Sprintf("%s: %d production lines, more than %d", rel, n, MaxPackageLines))
		}
		if !named[rel] {
			breaches = append(breaches, fmt.Sprintf("%s: not in docs/architecture.md's code map", rel))
		}
	}
	sort.Strings(breaches)
	return breaches, nil
}

// testSupport says whether the package at rel is test support.
func testSupport(rel string) bool {
	return strings.HasPrefix(rel, "internal/testsupport/") || strings.HasSuffix(rel, "test")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lines counts the lines of p's production Go files.
func lines(p pkg) (int, error) {
	n := 0
	for _, f := range p.GoFiles {
		data, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil {
			return 0, err
		}
		n += bytes.Count(data, []byte("\n"))
	}
	return n, nil
}

var backticked = regexp.MustCompile("`([a-z0-9][a-z0-9_./-]*)`")

// codeMap returns the package paths that the "Code map" section of the
// architecture document names in backticks.
func codeMap(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	named := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Code map"
			continue
		}
		if !in {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			named[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	if len(named) == 0 {
		return nil, fmt.Errorf("%s has no \"## Code map\" section naming packages", path)
	}
	return named, sc.Err()
}
