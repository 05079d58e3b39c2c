package zarf_test

import (
	"errors"
	"os"
	"path/filepath"
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
