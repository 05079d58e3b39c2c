package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

const zarfDef = `kind: ZarfPackageConfig
metadata:
  name: cv
  version: 0.1.0
components:
  - name: web
    required: true
    manifests:
      - name: m
        files: [m.yaml]
    files:
      - source: f.txt
        target: /etc/f.txt
    actions:
      onDeploy:
        after:
          - cmd: echo done
`

// Two zarf.yaml converted at once, each ferry.yaml next to its zarf.yaml;
// the gaps one a line; the result created as a package.
func TestCLIConvert(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		writeFile(t, filepath.Join(dir, d, "zarf.yaml"), zarfDef)
		writeFile(t, filepath.Join(dir, d, "m.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n")
		writeFile(t, filepath.Join(dir, d, "f.txt"), "x\n")
	}
	out, stderr, code := runFerry(t, dir, "package", "convert", "a/zarf.yaml", "b")
	if code != 0 {
		t.Fatalf("convert: %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"a/zarf.yaml:13: components[0].files[0].target: zarf package deploy writes it to /etc/f.txt",
		"a/zarf.yaml:17: components[0].actions.onDeploy.after[0]: onDeploy after: command \"echo done\" — none: ferry deploy runs no commands",
		"b/zarf.yaml: wrote b/ferry.yaml (2 gaps)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, code := runFerry(t, dir, "package", "create", "a", "-f", "a.tar.zst", "--sbom=false"); code != 0 {
		t.Fatalf("create of the converted definition: %s", stderr)
	}

	// An existing ferry.yaml is kept; --force and --strict; -o json.
	_, stderr, code = runFerry(t, dir, "package", "convert", "a")
	wantFail(t, "", stderr, code, "a/ferry.yaml exists: --force overwrites it")
	out, stderr, code = runFerry(t, dir, "package", "convert", "a", "--force", "--strict")
	if code != 1 || stderr != "ferry: --strict: 2 gaps (see above)\n" || !strings.Contains(out, "wrote a/ferry.yaml (2 gaps)") {
		t.Errorf("--strict: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code = runFerry(t, dir, "package", "convert", "a", "--force", "-o", "json")
	if code != 0 {
		t.Fatalf("convert -o json: %s", stderr)
	}
	var reps []convertJSON
	if err := json.Unmarshal([]byte(out), &reps); err != nil || len(reps) != 1 || len(reps[0].Gaps) != 2 || reps[0].Gaps[1].Line != 17 {
		t.Errorf("-o json = %s (%v)", out, err)
	}

	// One bad definition among good ones: the others are converted, exit 1.
	writeFile(t, filepath.Join(dir, "c", "zarf.yaml"), "kind: ZarfInitConfig\nmetadata: {name: init}\n")
	os.Remove(filepath.Join(dir, "b", "ferry.yaml"))
	out, stderr, code = runFerry(t, dir, "package", "convert", "c", "b")
	if code != 1 || !strings.Contains(out, "wrote b/ferry.yaml") || !strings.Contains(stderr, "ferry: c/zarf.yaml: not converted: c/zarf.yaml:1: kind: a Zarf init package") || !strings.Contains(stderr, "1 of 2 definitions not converted") {
		t.Errorf("batch with an error:\n%s%s", out, stderr)
	}
}

// The Zarf config file is read as zarf package create reads it: beside
// the zarf.yaml, else in the current folder, or the one ZARF_CONFIG
// names; --set wins over it. A folder with no zarf.yaml of its own is
// searched below.
func TestCLIConvertZarfConfig(t *testing.T) {
	dir := t.TempDir()
	tmpl := "kind: ZarfPackageConfig\nmetadata:\n  name: tp\n  version: \"###ZARF_PKG_TMPL_VERSION###\"\n  description: \"###ZARF_PKG_TMPL_WHAT###\"\ncomponents:\n  - name: c\n    required: true\n"
	writeFile(t, filepath.Join(dir, "pkgs", "one", "zarf.yaml"), tmpl)
	writeFile(t, filepath.Join(dir, "pkgs", "two", "zarf.yaml"), tmpl)
	writeFile(t, filepath.Join(dir, "pkgs", "two", "zarf-config.yaml"), "package:\n  create:\n    set:\n      version: 2.0.0\n      what: beside\n")
	writeFile(t, filepath.Join(dir, "zarf-config.toml"), "[package.create.set]\nversion = '1.0.0'\nwhat = 'root'\n")

	out, stderr, code := runFerry(t, dir, "package", "convert", "pkgs", "--set", "WHAT=flag")
	if code != 0 {
		t.Fatalf("convert: %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"pkgs/one/zarf.yaml: wrote pkgs/one/ferry.yaml (0 gaps; values from zarf-config.toml)",
		"pkgs/two/zarf.yaml: wrote pkgs/two/ferry.yaml (0 gaps; values from pkgs/two/zarf-config.yaml)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for d, want := range map[string]string{"one": "version: 1.0.0\n  description: flag\n", "two": "version: 2.0.0\n  description: flag\n"} {
		got, _ := os.ReadFile(filepath.Join(dir, "pkgs", d, "ferry.yaml"))
		if !strings.Contains(string(got), want) {
			t.Errorf("%s/ferry.yaml:\n%s\nwant %q", d, got, want)
		}
	}

	// ZARF_CONFIG names the file; a bad one is refused in one line.
	writeFile(t, filepath.Join(dir, "bad.toml"), "[package.create.set]\nversion = ['x']\n")
	_, stderr, code = runFerryEnv(t, dir, []string{"ZARF_CONFIG=bad.toml"}, "package", "convert", "pkgs/one", "--force")
	wantFail(t, "", stderr, code, "Zarf config file bad.toml: package.create.set.version: a list, not a string, a number or a boolean")
	// Without a value: the advice names both ways of giving one.
	_, stderr, code = runFerryEnv(t, dir, []string{"ZARF_CONFIG=pkgs/two/zarf-config.yaml"}, "package", "convert", filepath.Join(dir, "pkgs", "one"), "--force", "--set", "version=")
	if code != 0 {
		t.Errorf("an empty value set: %s", stderr)
	}
	writeFile(t, filepath.Join(dir, "empty", "zarf.yaml"), tmpl)
	_, stderr, code = runFerry(t, filepath.Join(dir, "empty"), "package", "convert", ".")
	wantFail(t, "", stderr, code, "zarf.yaml: package templates without a value: ###ZARF_PKG_TMPL_VERSION### (line 4) and 1 more (give each with --set KEY=VALUE, or under [package.create.set] in a zarf-config.toml")
	_, stderr, code = runFerry(t, filepath.Join(dir, "empty"), "package", "convert", t.TempDir())
	wantFail(t, "", stderr, code, "holds no zarf.yaml, nor does any folder below it")
}

// convert -o json prints each report as it is made (1,000 definitions of
// 49,000 gaps each would be 49 million gaps held), the same bytes as the
// whole slice written at once.
func TestConvertJSONArrayStreams(t *testing.T) {
	reps := []convertJSON{{Source: "a/zarf.yaml", Gaps: []zarf.Gap{{File: "a/zarf.yaml", Line: 3, What: "<x> & y"}}}, {Source: "b/zarf.yaml", Gaps: []zarf.Gap{}, Error: "e"}}
	for n := range len(reps) + 1 {
		var want, got bytes.Buffer
		if err := cli.WriteJSON(&want, append([]convertJSON{}, reps[:n]...)); err != nil {
			t.Fatal(err)
		}
		a := jsonArray{w: &got}
		for _, r := range reps[:n] {
			if err := a.add(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%d reports:\n%s\nwant\n%s", n, got.String(), want.String())
		}
	}
}
