package zarf_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
)

// Zarf's config-file example, in TOML and in YAML, gives the same values;
// its package templates fill the zarf.yaml's, a value set wins over the
// file's, and its deploy values are named in the report (never printed).
func TestReadConfigZarfExample(t *testing.T) {
	dir := filepath.Join(zarfRepo(t), "examples", "config-file")
	var cfgs []*zarf.Config
	for _, name := range []string{"zarf-config.toml", "zarf-config.yaml"} {
		cfg, err := zarf.ReadConfig(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cfg)
	}
	for _, cfg := range cfgs {
		if cfg.CreateSet["ZEBRA"] != "stripes" || cfg.CreateSet["LEOPARD"] != "spots" || len(cfg.CreateSet) != 2 {
			t.Errorf("%s: package.create.set = %v", cfg.File, cfg.CreateSet)
		}
		if cfg.DeploySet["SCORPION"] != "iridescent" || !strings.HasPrefix(cfg.DeploySet["TLS_KEY"], "-----BEGIN PRIVATE KEY-----\nMIIEvQ") || len(cfg.DeploySet) != 3 {
			t.Errorf("%s: package.deploy.set = %d values", cfg.File, len(cfg.DeploySet))
		}
	}
	if cfgs[0].DeploySet["TLS_KEY"] != cfgs[1].DeploySet["TLS_KEY"] {
		t.Error("the TOML and YAML files give different keys")
	}
	if p, err := zarf.FindConfig(dir); err != nil || filepath.Base(p) != "zarf-config.toml" {
		t.Errorf("FindConfig = %q, %v; want zarf-config.toml (Zarf looks for .json, .toml, .yaml, .yml)", p, err)
	}

	file := filepath.Join(dir, "zarf.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Convert(file, data, zarf.ConvertOptions{Config: cfgs[0], Set: map[string]string{"leopard": "rosettes"}})
	if err != nil {
		t.Fatal(err)
	}
	def, err := definition.Parse(filepath.Join(dir, "ferry.yaml"), res.Definition)
	if err != nil {
		t.Fatal(err)
	}
	var descs []string
	for _, c := range def.Components[1:] {
		descs = append(descs, c.Description)
	}
	if want := []string{"This is a zebra and they have stripes", "This is a leopard and they have rosettes"}; !slices.Equal(descs, want) {
		t.Errorf("descriptions %q, want %q (the file's value, and the one set over it)", descs, want)
	}
	var named int
	for _, g := range res.Gaps {
		if strings.Contains(g.What+g.Nearest, "package.deploy.set gives it") {
			named++
		}
		if strings.Contains(g.String(), "iridescent") || strings.Contains(g.String(), "PRIVATE KEY") {
			t.Errorf("a deploy value printed: %s", g)
		}
	}
	if named != 6 {
		t.Errorf("%d lines name the config's deploy values, want 6 (3 variables, 3 uses)", named)
	}
	if _, err := zarf.Convert(file, data, zarf.ConvertOptions{}); !errors.Is(err, zarf.ErrNoTemplateValue) || !strings.Contains(err.Error(), "###ZARF_PKG_TMPL_ZEBRA### (line 23) and 1 more") {
		t.Errorf("without the config: %v", err)
	}
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		want       map[string]string
		err        string
	}{
		{"case.toml", "[Package.Create.SET]\nkey = 'v'\nn = 3\nb = true\nf = 1.5\n", map[string]string{"KEY": "v", "N": "3", "B": "true", "F": "1.5"}, ""},
		{"case.json", `{"PACKAGE": {"create": {"set": {"key": "v", "n": 3}}}}`, map[string]string{"KEY": "v", "N": "3"}, ""},
		{"empty.yaml", "", map[string]string{}, ""},
		{"list.toml", "[package.create.set]\nkey = ['a']\n", nil, "package.create.set.key: a list, not a string"},
		{"bad.toml", "[package\n", nil, "invalid TOML"},
		{"bad.ini", "[package.create.set]\n", nil, `".ini": a Zarf config file is .toml, .yaml, .yml or .json`},
		{"inline.toml", "a = " + strings.Repeat("{b=", 300) + "1" + strings.Repeat("}", 300), nil, "300 '{', more than 256"},
		{"dotted.toml", "[" + strings.Repeat("a.", 30000) + "a]\n", nil, "line 1: 30,000 '.', more than 256"},
		{"laughs.yaml", "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n", nil, "aliases make more than"},
		{"big.toml", "a = '" + strings.Repeat("x", 300<<10) + "'\n", nil, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cfg, err := zarf.ReadConfig(p)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s", d)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "\n") {
					t.Errorf("err = %v, want one line naming %s and saying %q", err, p, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.CreateSet) != len(tc.want) {
				t.Errorf("package.create.set = %v, want %v", cfg.CreateSet, tc.want)
			}
			for k, v := range tc.want {
				if cfg.CreateSet[k] != v {
					t.Errorf("package.create.set = %v, want %v", cfg.CreateSet, tc.want)
				}
			}
		})
	}
}

func TestReadConfigMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "zarf-config.toml")
	if _, err := zarf.ReadConfig(p); err == nil || err.Error() != "Zarf config file "+p+" does not exist" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

// A folder without a zarf.yaml is searched below, as `convert DIR` does.
func TestFindDefinitions(t *testing.T) {
	root := zarfRepo(t)
	found, err := zarf.FindDefinitions(filepath.Join(root, "packages"))
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, p := range found {
		r, _ := filepath.Rel(root, p)
		rel = append(rel, filepath.ToSlash(r))
	}
	if want := []string{"packages/distros/eks/zarf.yaml", "packages/distros/k3s/zarf.yaml", "packages/gitea/zarf.yaml", "packages/zarf-agent/zarf.yaml", "packages/zarf-registry/zarf.yaml"}; !slices.Equal(rel, want) {
		t.Errorf("found %q, want %q", rel, want)
	}
	if found, err := zarf.FindDefinitions(filepath.Join(root, "examples", "argocd")); err != nil || len(found) != 1 {
		t.Errorf("a folder's own zarf.yaml: %v, %v", found, err)
	}
	if _, err := zarf.FindDefinitions(t.TempDir()); err == nil || !strings.Contains(err.Error(), "holds no zarf.yaml, nor does any folder below it") {
		t.Errorf("an empty folder: %v", err)
	}
}

// A package template's value fills every template naming it, and
// metadata.architecture every ###ZARF_PKG_ARCH###: the text they make is
// bounded as a zarf.yaml is, before it is made, and a value with a
// control character (a line break rewriting the YAML) is refused naming
// where it came from.
func TestConvertTemplateFillBounded(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "zarf.yaml")
	head := "kind: ZarfPackageConfig\nmetadata:\n  name: demo\n"
	for _, tc := range []struct {
		name string
		data string
		set  map[string]string
		err  string
	}{
		{"config value", head + "  description: " + strings.Repeat("###ZARF_PKG_TMPL_X###", 180_000) + "\ncomponents:\n  - name: a\n",
			map[string]string{"X": strings.Repeat("a", 250<<10)}, "zarf.yaml:4: filled with its package templates' values, it would be more than 4,194,304 bytes"},
		{"architecture", head + "  architecture: " + strings.Repeat("b", 1<<20) + "\n  description: " + strings.Repeat("###ZARF_PKG_ARCH###", 150_000) + "\ncomponents:\n  - name: a\n",
			nil, "150,000 ###ZARF_PKG_ARCH### would make 157,287,448,"},
		{"line break", head + "  version: ###ZARF_PKG_TMPL_V###\ncomponents:\n  - name: a\n",
			map[string]string{"V": "1\ncomponents: []"}, "###ZARF_PKG_TMPL_V###: the value the value set gives V holds a control character (U+000A)"},
		{"escape", head + "  version: ###ZARF_PKG_TMPL_V###\ncomponents:\n  - name: a\n",
			map[string]string{"V": "1\x1b[31m"}, "(U+001B)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := zarf.Convert(file, []byte(tc.data), zarf.ConvertOptions{Set: tc.set, Dir: dir})
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s", d)
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 1024 {
				t.Errorf("err = %.300v, want one line saying %q", err, tc.err)
			}
		})
	}
}

// Nested TOML arrays are bounded before the parse, as inline tables are.
func TestReadConfigTOMLArrays(t *testing.T) {
	p := filepath.Join(t.TempDir(), "zarf-config.toml")
	if err := os.WriteFile(p, []byte("a = "+strings.Repeat("[", 200_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := zarf.ReadConfig(p); err == nil || !strings.Contains(err.Error(), "200,000 '[', more than 4,096") {
		t.Errorf("err = %v", err)
	}
}

// The search below a folder reads a folder in batches, so a folder of
// more entries than it looks through is refused before it is held whole;
// a link named zarf.yaml is not taken, as links are not followed.
func TestFindDefinitionsHostile(t *testing.T) {
	dir := t.TempDir()
	wide := filepath.Join(dir, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range zarf.MaxWalk + 1 {
		f, err := os.Create(filepath.Join(wide, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := zarf.FindDefinitions(wide)
	runtime.ReadMemStats(&after)
	if err == nil || err.Error() != wide+": more than 100,000 files and folders below it" {
		t.Errorf("err = %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("allocated %d MiB", grew>>20)
	}

	links := filepath.Join(dir, "links")
	for _, d := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(links, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(links, "a", "zarf.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(links, "b", "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(links, "b", "zarf.yaml"), []byte("kind: ZarfPackageConfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found, err := zarf.FindDefinitions(links)
	if err != nil || len(found) != 1 || found[0] != filepath.Join(links, "b", "zarf.yaml") {
		t.Errorf("found %q, %v; want b/zarf.yaml only", found, err)
	}
}

// A config file found beside a zarf.yaml is read inside its folder: a
// link out of it is refused, one inside followed.
func TestReadConfigInStaysInFolder(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret.toml")
	if err := os.WriteFile(outside, []byte("[package.create.set]\nx = \"1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "zarf-config.toml")); err != nil {
		t.Fatal(err)
	}
	if _, err := zarf.ReadConfigIn(dir, "zarf-config.toml"); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("a config linked out of its folder: %v, want one refusal", err)
	}
	in := t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "real.toml"), []byte("[package.create.set]\nx = \"1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.toml", filepath.Join(in, "zarf-config.toml")); err != nil {
		t.Fatal(err)
	}
	cfg, err := zarf.ReadConfigIn(in, "zarf-config.toml")
	if err != nil || len(cfg.CreateSet) != 1 {
		t.Errorf("a config linked inside its folder: %+v, %v", cfg, err)
	}
}
