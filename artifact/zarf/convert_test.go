package zarf_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
)

// convertDir converts dir/zarf.yaml into dir/ferry.yaml (and the files it
// makes) and returns the parsed definition.
func convertDir(t *testing.T, dir string, opts zarf.ConvertOptions) (*zarf.Result, *definition.Definition) {
	t.Helper()
	file := filepath.Join(dir, "zarf.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	res, err := zarf.Convert(file, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := opts.Dir
	if out == "" {
		out = dir
	}
	for p, b := range res.Files {
		if err := os.MkdirAll(filepath.Join(out, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Parse(filepath.Join(out, "ferry.yaml"), res.Definition)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Definition)
	}
	return res, def
}

// copyFixture copies testdata/NAME into a fresh folder.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", name))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// gapFields is field → gap, of the zarf.yaml's gaps.
func gapFields(res *zarf.Result) map[string]zarf.Gap {
	m := map[string]zarf.Gap{}
	for _, g := range res.Gaps {
		if g.Field != "" {
			m[g.Field] = g
		}
	}
	return m
}

func TestConvertFull(t *testing.T) {
	dir := copyFixture(t, "full")
	res, def := convertDir(t, dir, zarf.ConvertOptions{Set: map[string]string{"version": "1.2.3"}, Architecture: "amd64"})

	if def.Metadata != (definition.Metadata{Name: "shop", Version: "1.2.3", Description: "the shop"}) {
		t.Errorf("metadata = %+v", def.Metadata)
	}
	if len(def.Platforms) != 1 || def.Platforms[0].String() != "linux/amd64" {
		t.Errorf("platforms = %v", def.Platforms)
	}
	var names []string
	for _, c := range def.Components {
		names = append(names, c.Name)
	}
	if want := []string{"web", "extras", "debug"}; !slices.Equal(names, want) {
		t.Fatalf("components = %v, want %v (arm-only and big-flavor left out)", names, want)
	}
	web, extras, debug := def.Components[0], def.Components[1], def.Components[2]
	if !web.Required || extras.Required || debug.Required {
		t.Errorf("required = %v %v %v, want true false false (Zarf's default is false)", web.Required, extras.Required, debug.Required)
	}
	if web.Description != "shared" {
		t.Errorf("description from the merge key = %q", web.Description)
	}
	if len(web.Images) != 2 || web.Images[0].Ref != "docker.io/library/nginx:1.27" {
		t.Errorf("images = %+v", web.Images)
	}
	wantCharts := []definition.Chart{
		{Path: "chart", Namespace: "shop", ReleaseName: "shop"},
		{URL: "oci://ghcr.io/stefanprodan/charts/podinfo", Version: "6.7.0", Namespace: "podinfo", ReleaseName: "info"},
		{Path: "zarf-charts/redis-ha-4.2.0.tgz", ReleaseName: "redis"},
		{Path: "zarf-charts/big-v1.2.3.tgz", ReleaseName: "big"},
	}
	for i, ch := range web.Charts {
		ch.Line = 0
		if i >= len(wantCharts) || ch != wantCharts[i] {
			t.Errorf("charts[%d] = %+v", i, ch)
		}
	}
	if len(web.Manifests) != 1 || !slices.Equal(web.Manifests[0].Files, []string{"manifests/cm.yaml", "zarf-manifests/deploy.yaml", "zarf-kustomize/config-0.yaml"}) || web.Manifests[0].Namespace != "shop" {
		t.Errorf("manifests = %+v", web.Manifests)
	}
	rendered := string(res.Files["zarf-kustomize/config-0.yaml"])
	if !strings.Contains(rendered, "name: k-web") {
		t.Errorf("the kustomization rendered as\n%s", rendered)
	}
	wantFiles := []definition.File{
		{Source: "files/tool.sh", Target: "/usr/local/bin/tool", Mode: 0o700},
		{Source: "files/conf.d/a.conf", Target: "/etc/shop/a.conf", Mode: 0o644},
		{Source: "files/conf.d/b.conf", Target: "/etc/shop/b.conf", Mode: 0o644},
	}
	for i, f := range extras.Files {
		f.Line = 0
		if i >= len(wantFiles) || f != wantFiles[i] {
			t.Errorf("files[%d] = %+v", i, f)
		}
	}
	if len(extras.Repositories) != 2 || extras.Repositories[0].URL != "https://github.com/example/fleet.git" || extras.Repositories[0].Ref != "v1.0.0" || extras.Repositories[1].Ref != "" {
		t.Errorf("repositories = %+v", extras.Repositories)
	}

	// Every gap of the fixture, by field and line: nothing dropped silently.
	gaps := gapFields(res)
	for field, line := range map[string]int{
		"metadata.url":                                 6,
		"components[0].charts[0].version":              20,
		"components[0].charts[0].valuesFiles[0]":       23,
		"components[0].charts[2].url":                  30,
		"components[0].charts[3].url":                  34,
		"components[0].charts[3].noWait":               36,
		"components[0].manifests[0].files[1]":          42,
		"components[0].manifests[0].kustomizations[0]": 44,
		"components[0].actions.onDeploy.after[0]":      48,
		"components[0].actions.onDeploy.after[1]":      49,
		"components[1].default":                        56,
		"components[1].files[0].target":                59,
		"components[1].files[1].source":                61,
		"components[1].repos[1]":                       65,
		"components[2]":                                66,
		"components[2].healthChecks[0]":                68,
		"components[2].dataInjections[0]":              73,
		"components[2].colour":                         79,
		"components[3].only.cluster.architecture":      83,
		"components[4].only.flavor":                    86,
		"variables[0]":                                 88,
	} {
		g, ok := gaps[field]
		if !ok {
			t.Errorf("no gap for %s", field)
			continue
		}
		if g.Line != line || g.What == "" || g.Nearest == "" {
			t.Errorf("gap %s = %+v, want line %d", field, g, line)
		}
	}
	var tokens []string
	for _, g := range res.Gaps {
		if g.Field == "" {
			rel, _ := filepath.Rel(dir, g.File)
			tokens = append(tokens, fmt.Sprintf("%s:%d: %s", rel, g.Line, strings.Fields(g.What)[0]))
		}
	}
	wantTokens := []string{
		"values-prod.yaml:1: ###ZARF_VAR_DOMAIN###",
		"manifests/cm.yaml:6: ###ZARF_REGISTRY###",
		"manifests/cm.yaml:7: ###ZARF_VAR_DOMAIN###",
		"files/conf.d/b.conf:1: ###ZARF_CONST_B###",
	}
	if !slices.Equal(tokens, wantTokens) {
		t.Errorf("template gaps = %q, want %q", tokens, wantTokens)
	}
	for i := 1; i < len(res.Gaps); i++ {
		if a, b := res.Gaps[i-1], res.Gaps[i]; a.File == b.File && a.Field != "" && b.Field != "" && a.Line > b.Line {
			t.Errorf("gaps out of line order: %v before %v", a, b)
		}
	}
	if !strings.HasPrefix(string(res.Definition), "# Converted from zarf.yaml") || !strings.Contains(string(res.Definition), "# zarf metadata.url: https://shop.example.com") {
		t.Errorf("header:\n%s", res.Definition)
	}
}

// The other flavor and architecture give the components Zarf would keep.
func TestConvertFlavorArchitecture(t *testing.T) {
	dir := copyFixture(t, "full")
	res, def := convertDir(t, dir, zarf.ConvertOptions{Set: map[string]string{"VERSION": "2"}, Architecture: "arm64", Flavor: "big"})
	var names []string
	for _, c := range def.Components {
		names = append(names, c.Name)
	}
	if want := []string{"web", "extras", "debug", "arm-only", "big-flavor"}; !slices.Equal(names, want) {
		t.Errorf("components = %v, want %v", names, want)
	}
	if def.Platforms[0].String() != "linux/arm64" {
		t.Errorf("platforms = %v", def.Platforms)
	}
	if _, ok := gapFields(res)["components[4].only.flavor"]; ok {
		t.Error("a kept flavor reported as left out")
	}
}

// Converting into another folder rebases every path; a path the folder
// does not hold is an error.
func TestConvertDir(t *testing.T) {
	dir := copyFixture(t, "full")
	_, def := convertDir(t, filepath.Join(dir), zarf.ConvertOptions{Set: map[string]string{"VERSION": "1"}, Dir: dir})
	if def.Components[0].Charts[0].Path != "chart" {
		t.Errorf("path = %q", def.Components[0].Charts[0].Path)
	}
	sub := filepath.Join(dir, "out")
	data, _ := os.ReadFile(filepath.Join(dir, "zarf.yaml"))
	_, err := zarf.Convert(filepath.Join(dir, "zarf.yaml"), data, zarf.ConvertOptions{Set: map[string]string{"VERSION": "1"}, Dir: sub})
	var de *definition.Error
	if !errors.As(err, &de) || de.Line != 19 || !strings.Contains(de.Msg, "outside the ferry definition's folder") {
		t.Errorf("err = %v", err)
	}
}

func TestConvertErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		msg        string
	}{
		{"init package", "kind: ZarfInitConfig\nmetadata: {name: init}\ncomponents: []\n", 1, "ferry init"},
		{"template without value", "kind: ZarfPackageConfig\nmetadata:\n  name: a\n  version: ###ZARF_PKG_TMPL_V###\n", 0, "###ZARF_PKG_TMPL_V### (line 4)"},
		{"wrong apiVersion", "apiVersion: zarf.dev/v1beta1\nkind: ZarfPackageConfig\n", 1, "zarf.dev/v1alpha1"},
		{"duplicate field", "kind: ZarfPackageConfig\nmetadata: {name: a}\nmetadata: {name: b}\n", 3, "duplicate field"},
		{"invalid name", "kind: ZarfPackageConfig\nmetadata: {name: a-}\ncomponents: []\n", 2, "not a valid ferry package name"},
		{"escaping path", "kind: ZarfPackageConfig\nmetadata: {name: a, version: '1'}\ncomponents:\n  - name: c\n    manifests:\n      - name: m\n        files: [../x.yaml]\n", 7, "outside"},
		{"bad shasum", "kind: ZarfPackageConfig\nmetadata: {name: a, version: '1'}\ncomponents:\n  - name: c\n    files:\n      - source: f.txt\n        target: /f\n        shasum: 0000000000000000000000000000000000000000000000000000000000000000\n", 8, "zarf package create aborts too"},
		{"oci chart without version", "kind: ZarfPackageConfig\nmetadata: {name: a, version: '1'}\ncomponents:\n  - name: c\n    charts:\n      - name: x\n        url: oci://r.example.com/x\n", 6, "version: missing"},
		{"bad image", "kind: ZarfPackageConfig\nmetadata: {name: a, version: '1'}\ncomponents:\n  - name: c\n    images: ['UPPER:1']\n", 5, "invalid image reference"},
		{"duplicate component", "kind: ZarfPackageConfig\nmetadata: {name: a, version: '1'}\ncomponents:\n  - name: c\n  - name: c\n", 5, "--flavor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := zarf.Convert(filepath.Join(dir, "zarf.yaml"), []byte(tc.yaml), zarf.ConvertOptions{})
			var de *definition.Error
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a DefinitionError", err)
			}
			if de.Line != tc.line || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v (line %d), want line %d and %q", err, de.Line, tc.line, tc.msg)
			}
		})
	}
}

// The fields convert reads are exactly those of Zarf v0.60.0's schema
// (testdata: its zarf.schema.json), so that none is ignored unseen.
func TestKnownFieldsMatchSchema(t *testing.T) {
	data, err := os.ReadFile("testdata/zarf-v0.60.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	var schema struct {
		object
		Defs map[string]object `json:"$defs"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	schema.Defs["ZarfPackage"] = schema.object
	// Types convert reports whole, through the field that holds them.
	reportedWhole := map[string]string{
		"ZarfBuildData":                  "build",
		"DeprecatedZarfComponentScripts": "scripts",
		"ZarfContainerTarget":            "dataInjections[].target",
		"Shell":                          "actions[].shell",
		"Variable":                       "actions[].setVariables",
	}
	for typ, def := range schema.Defs {
		var want []string
		for k := range def.Properties {
			want = append(want, k)
		}
		slices.Sort(want)
		got := slices.Clone(zarf.KnownFields[typ])
		slices.Sort(got)
		if _, whole := reportedWhole[typ]; whole && got == nil {
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: convert reads %v, the schema has %v", typ, got, want)
		}
	}
	for typ := range zarf.KnownFields {
		if _, ok := schema.Defs[typ]; !ok {
			t.Errorf("%s: not in the schema", typ)
		}
	}
}
