package zarf_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// zarfModule is Zarf's module, whose examples/ and packages/ hold its own
// package definitions.
const zarfModule, zarfVersion = "github.com/zarf-dev/zarf", "v0.60.0"

// zarfRepo is Zarf v0.60.0's source tree in the module cache (read-only).
func zarfRepo(t *testing.T) string {
	t.Helper()
	dir, err := thirdparty.ModuleDir(zarfModule, zarfVersion)
	if err != nil {
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v (FERRY_REQUIRE_TOOLS=1 turns this skip into a failure)", err)
	}
	return dir
}

// upstreamWant is what converting one of Zarf's definitions gives: the
// counts of the ferry.yaml's sections and of the report's lines, or the
// error.
var upstreamWant = map[string]string{
	"examples/argocd":              "components 2, images 3, charts 2, manifests 0, files 0, repos 1, gaps 9",
	"examples/component-actions":   "components 12, images 0, charts 0, manifests 2, files 1, repos 0, gaps 44",
	"examples/composable-packages": "components 2, images 0, charts 0, manifests 1, files 0, repos 0, gaps 5",
	"examples/config-file":         "components 3, images 0, charts 0, manifests 1, files 0, repos 0, gaps 9",
	"examples/dos-games":           "components 1, images 1, charts 0, manifests 1, files 0, repos 0, gaps 0",
	"examples/git-data":            "components 4, images 0, charts 0, manifests 0, files 0, repos 9, gaps 6",
	"examples/helm-charts":         "components 1, images 1, charts 4, manifests 0, files 0, repos 0, gaps 8",
	"examples/kiwix":               "components 1, images 2, charts 0, manifests 1, files 0, repos 0, gaps 4",
	"examples/longhorn":            "components 2, images 13, charts 1, manifests 1, files 2, repos 0, gaps 8",
	"examples/manifests":           "components 3, images 3, charts 0, manifests 3, files 0, repos 0, gaps 2",
	"examples/package-flavors":     "components 1, images 0, charts 0, manifests 1, files 0, repos 0, gaps 5",
	"examples/podinfo-flux":        "components 5, images 13, charts 0, manifests 5, files 0, repos 1, gaps 3",
	"examples/variables":           "error: package templates without a value",
	"examples/wordpress":           "components 1, images 3, charts 1, manifests 1, files 0, repos 0, gaps 13",
	"examples/yolo":                "error: outside the ferry definition's folder",
	"packages/distros/eks":         "components 3, images 0, charts 0, manifests 0, files 4, repos 0, gaps 26",
	"packages/distros/k3s":         "error: a Zarf init package",
	"packages/gitea":               "components 1, images 1, charts 1, manifests 1, files 0, repos 0, gaps 32",
	"packages/zarf-agent":          "components 1, images 1, charts 1, manifests 0, files 0, repos 0, gaps 9",
	"packages/zarf-registry":       "components 3, images 2, charts 2, manifests 2, files 1, repos 0, gaps 64",
}

// TestConvertZarfOwn converts each of Zarf v0.60.0's own example and
// package definitions, with the Zarf config file zarf package create
// reads when run from the repository's root (the one beside the
// zarf.yaml, else the root's), and checks every line of the report
// against the ferry.yaml it writes: what a line says is carried is there,
// what it says is left out is not.
func TestConvertZarfOwn(t *testing.T) {
	root := zarfRepo(t)
	var dirs []string
	for _, pattern := range []string{"examples/*/zarf.yaml", "packages/*/zarf.yaml", "packages/*/*/zarf.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
	}
	slices.Sort(dirs)
	var want []string
	for d := range upstreamWant {
		want = append(want, d)
	}
	slices.Sort(want)
	if !slices.Equal(dirs, want) {
		t.Fatalf("Zarf's definitions: %v, want %v", dirs, want)
	}
	for _, d := range dirs {
		t.Run(d, func(t *testing.T) {
			dir := filepath.Join(root, filepath.FromSlash(d))
			cfgFile, err := zarf.FindConfig(dir)
			if err == nil && cfgFile == "" {
				cfgFile, err = zarf.FindConfig(root)
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := zarf.ReadConfig(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, zarf.ZarfYAML)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := zarf.Convert(file, data, zarf.ConvertOptions{Architecture: "amd64", Config: cfg})
			if err != nil {
				if w := upstreamWant[d]; !strings.HasPrefix(w, "error: ") || !strings.Contains(err.Error(), strings.TrimPrefix(w, "error: ")) {
					t.Fatalf("%v, want %s", err, w)
				}
				return
			}
			def, err := definition.Parse(filepath.Join(dir, definition.FileName), res.Definition)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(def, res); got != upstreamWant[d] {
				t.Errorf("converted to %s, want %s", got, upstreamWant[d])
			}
			kept := map[string]int{}
			var src struct {
				Components []struct{ Name string } `yaml:"components"`
			}
			if err := yaml.Unmarshal(data, &src); err != nil {
				t.Fatal(err)
			}
			for _, c := range src.Components {
				kept[c.Name]++
			}
			for _, g := range res.Gaps {
				if err := checkClaim(g, def, res); err != nil {
					t.Errorf("%s\n  the report is not true: %v", g, err)
				}
				if m := leftOut.FindStringSubmatch(g.What + " — " + g.Nearest); m != nil {
					kept[m[1]]--
				}
			}
			for _, c := range def.Components {
				kept[c.Name]--
			}
			for name, n := range kept {
				if n != 0 {
					t.Errorf("component %s: %d more in zarf.yaml than ferry.yaml holds and the report leaves out", name, n)
				}
			}
		})
	}
}

func summary(def *definition.Definition, res *zarf.Result) string {
	var images, charts, manifests, files, repos int
	for _, c := range def.Components {
		images += len(c.Images)
		charts += len(c.Charts)
		manifests += len(c.Manifests)
		files += len(c.Files)
		repos += len(c.Repositories)
	}
	return fmt.Sprintf("components %d, images %d, charts %d, manifests %d, files %d, repos %d, gaps %d", len(def.Components), images, charts, manifests, files, repos, len(res.Gaps))
}

// leftOut is a line saying a component is left out as Zarf leaves it out.
var leftOut = regexp.MustCompile(`^component (\S+) is for .* — left out, as zarf package create leaves it out`)

// claim is one kind of report line: the pattern that recognises it (on
// "what — nearest") and what the ferry.yaml must then hold.
type claim struct {
	re    *regexp.Regexp
	check func(m []string, def *definition.Definition, res *zarf.Result) error
}

// claims are every kind of line the report of Zarf's own definitions
// holds; a line of no kind here fails the test, so that a new kind of
// line comes with the check of what it says.
var claims = []claim{
	// Files: carried with their target; a download or an extraction is
	// a path create refuses the definition without.
	{regexp.MustCompile(`writes it to (\S+) on the machine that deploys — ferry carries it with its target and mode`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return has(def, "a file with target "+m[1], func(c definition.Component) bool {
			return slices.ContainsFunc(c.Files, func(f definition.File) bool { return f.Target == m[1] && f.Mode != 0 })
		})
	}},
	{regexp.MustCompile(`— source (\S+): (download|extract) it there first`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return has(def, "a file with source "+m[1], func(c definition.Component) bool {
			return slices.ContainsFunc(c.Files, func(f definition.File) bool { return f.Source == m[1] })
		})
	}},
	{regexp.MustCompile(`— files (\S+): (download|render) it`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return hasManifestFile(def, m[1])
	}},
	{regexp.MustCompile(`rendered now .* into (\S+), named in files`), func(m []string, def *definition.Definition, res *zarf.Result) error {
		if res.Files[m[1]] == nil {
			return fmt.Errorf("%s not made", m[1])
		}
		return hasManifestFile(def, m[1])
	}},
	{regexp.MustCompile(`— path (\S+): make it with`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return has(def, "a chart at "+m[1], func(c definition.Component) bool {
			return slices.ContainsFunc(c.Charts, func(ch definition.Chart) bool { return ch.Path == m[1] })
		})
	}},
	// Components left out as Zarf leaves them out, and optional ones.
	// (TestConvertZarfOwn counts them against zarf.yaml's components.)
	{leftOut, nil},
	{regexp.MustCompile(`^component (\S+) is (optional|selected by default)`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return has(def, "optional component "+m[1], func(c definition.Component) bool { return c.Name == m[1] && !c.Required })
	}},
	// Cosign's tags: not images; ferry's create finds a signature and an
	// attestation by that very tag (artifact.CosignTagSuffixes).
	{regexp.MustCompile(`^cosign's (signature|attestation|attached SBOM) of (\S+)@sha256:([0-9a-f]{64}) \(its tag (\S+)\).* — left out of images: (.*)`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		if err := has(def, "image "+m[2]+":"+m[4], func(c definition.Component) bool {
			return slices.ContainsFunc(c.Images, func(i definition.Image) bool { return strings.HasSuffix(i.Ref, ":"+m[4]) })
		}); err == nil {
			return errors.New("it is among the images")
		}
		carried := slices.ContainsFunc(artifact.CosignTagSuffixes, func(s struct{ Suffix, Kind string }) bool {
			return "sha256-"+m[3]+s.Suffix == m[4]
		})
		if says := strings.Contains(m[5], "carries the cosign signatures and attestations"); says != carried {
			return fmt.Errorf("the line says ferry carries it: %v; ferry's create looks for tag %s: %v", says, m[4], carried)
		}
		return nil
	}},
	// Repositories and the version.
	{regexp.MustCompile(`^no ref: Zarf mirrors every branch and tag of (\S+) — ferry carries one ref per entry \(the remote's HEAD when none\)`), func(m []string, def *definition.Definition, _ *zarf.Result) error {
		return has(def, "repository "+m[1]+" at its HEAD", func(c definition.Component) bool {
			return slices.ContainsFunc(c.Repositories, func(r definition.Repository) bool { return r.URL == m[1] && r.Ref == "" })
		})
	}},
	{regexp.MustCompile(`^no version .* wrote 0\.0\.0`), func(_ []string, def *definition.Definition, _ *zarf.Result) error {
		if def.Metadata.Version != "0.0.0" {
			return fmt.Errorf("version %q", def.Metadata.Version)
		}
		return nil
	}},
	// Lines that say ferry has no equivalent, and write nothing of it.
	{regexp.MustCompile(`— (none|none in ferry\.yaml|ferry templates nothing|ferry replaces nothing|ferry deploys it as it is|ferry rewrites workload images|ferry points Flux|ferry deploys optional components|ferry deploy waits until|flatten first|` + "`ferry deploy --set|`ferry package create --format tar`" + `)`), nil},
}

func has(def *definition.Definition, what string, ok func(definition.Component) bool) error {
	if slices.ContainsFunc(def.Components, ok) {
		return nil
	}
	return fmt.Errorf("no %s in ferry.yaml", what)
}

func hasManifestFile(def *definition.Definition, p string) error {
	return has(def, "manifest file "+p, func(c definition.Component) bool {
		return slices.ContainsFunc(c.Manifests, func(m definition.Manifest) bool { return slices.Contains(m.Files, p) })
	})
}

// checkClaim checks the ferry.yaml against what the gap says of it.
func checkClaim(g zarf.Gap, def *definition.Definition, res *zarf.Result) error {
	line := g.What + " — " + g.Nearest
	for _, c := range claims {
		if m := c.re.FindStringSubmatch(line); m != nil {
			if c.check == nil {
				return nil
			}
			return c.check(m, def, res)
		}
	}
	return errors.New("a kind of line the test does not know: say in claims what it claims")
}
