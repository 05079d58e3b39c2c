package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsAreSentences walks the command line's error paths — each
// command with a missing file, a folder for a file, a damaged package, a
// bad reference, a registry where nothing answers, a bad flag value, a
// definition with each kind of mistake — and holds each refusal to what
// TestHostileInputs holds them to (refusalFault): one line "ferry: …",
// exit 1, no name of Go's, no prefix said twice.
func TestErrorsAreSentences(t *testing.T) {
	dir := t.TempDir()
	env := []string{"COSIGN_PASSWORD=pw", "DOCKER_CONFIG=" + filepath.Join(dir, "docker")}
	def := filepath.Join(dir, "def")
	writeFile(t, filepath.Join(def, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(def, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(def, "f.txt"), "hello\n")
	pkg := filepath.Join(dir, "good.tar.zst")
	if _, stderr, code := runFerryEnv(t, dir, env, "key", "generate", dir); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := runFerryEnv(t, dir, env, "package", "create", def, "-f", pkg, "--sign-key", filepath.Join(dir, "cosign.key")); code != 0 {
		t.Fatal(stderr)
	}
	good, err := os.ReadFile(pkg)
	mustDo(t, err)
	damaged := bytes.Clone(good)
	damaged[len(damaged)/2] ^= 0xff
	writeFile(t, filepath.Join(dir, "damaged.tar.zst"), string(damaged))
	mustDo(t, os.Mkdir(filepath.Join(dir, "folder"), 0o755))
	writeFile(t, filepath.Join(dir, "kubeconfig"), "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")

	// Definitions with one mistake each, by kind.
	mistakes := map[string]string{
		"yaml":        "apiVersion: [\n",
		"unknown":     strings.Replace(goodDef, "  name: cli\n", "  name: cli\n  colour: red\n", 1),
		"name":        strings.Replace(goodDef, "name: cli", "name: Cli", 1),
		"missing":     strings.Replace(goodDef, "source: f.txt", "source: gone.txt", 1),
		"folder":      strings.Replace(goodDef, "source: f.txt", "source: sub", 1),
		"escape":      strings.Replace(goodDef, "source: f.txt", "source: ../../etc/passwd", 1),
		"manifest":    strings.Replace(goodDef, "files: [m.yaml]", "files: [gone.yaml]", 1),
		"image":       strings.Replace(goodDef, "    manifests:\n", "    images: [\"Not A Ref\"]\n    manifests:\n", 1),
		"layout":      strings.Replace(goodDef, "    manifests:\n", "    images: [{ref: app:1.0, layout: nolayout}]\n    manifests:\n", 1),
		"chart":       strings.Replace(goodDef, "    manifests:\n", "    charts: [{path: nochart}]\n    manifests:\n", 1),
		"policy":      strings.Replace(goodDef, "components:\n", "imagePolicies:\n  - name: p\n    authorities: [{key: gone.pub}]\ncomponents:\n", 1) + "    verify: p\n    images: [127.0.0.1:1/x:1]\n",
		"duplicate":   goodDef + "  - name: c\n",
		"remote":      strings.Replace(goodDef, "    manifests:\n", "    images: [127.0.0.1:1/app:1.0]\n    manifests:\n", 1),
		"git":         strings.Replace(goodDef, "    manifests:\n", "    repositories: [{url: https://127.0.0.1:1/r.git}]\n    manifests:\n", 1),
		"local git":   strings.Replace(goodDef, "    manifests:\n", "    repositories: [{url: https://example.com/r.git, path: sub}]\n    manifests:\n", 1),
		"remotechart": strings.Replace(goodDef, "    manifests:\n", "    charts: [{url: oci://127.0.0.1:1/charts/c, version: 1.0.0}]\n    manifests:\n", 1),
	}
	type errCase struct {
		name string
		args []string
	}
	var cases []errCase
	for kind, body := range mistakes {
		d := filepath.Join(dir, "mistake-"+strings.ReplaceAll(kind, " ", "-"))
		writeFile(t, filepath.Join(d, "ferry.yaml"), body)
		writeFile(t, filepath.Join(d, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
		writeFile(t, filepath.Join(d, "f.txt"), "hello\n")
		mustDo(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
		out := filepath.Join(dir, "out", kind+".tar.zst")
		cases = append(cases, errCase{"create/" + kind, []string{"package", "create", d, "-f", out, "--sbom=false"}})
		// find-images reads the definition, its charts and manifests only.
		switch kind {
		case "yaml", "unknown", "name", "escape", "manifest", "image", "chart", "duplicate", "remotechart":
			cases = append(cases, errCase{"find-images/" + kind, []string{"package", "find-images", d}})
		}
		if kind != "remote" && kind != "git" && kind != "remotechart" {
			cases = append(cases, errCase{"dry-run/" + kind, []string{"package", "create", d, "--dry-run"}})
		}
	}
	missing, folder, damagedPkg := filepath.Join(dir, "missing.tar.zst"), filepath.Join(dir, "folder"), filepath.Join(dir, "damaged.tar.zst")
	pub, key := filepath.Join(dir, "cosign.pub"), filepath.Join(dir, "cosign.key")
	out := filepath.Join(dir, "out", "x.tar.zst")
	kube := []string{"--kubeconfig", filepath.Join(dir, "kubeconfig")}
	cases = append(cases, []errCase{
		{"create/no definition", []string{"package", "create", filepath.Join(dir, "nowhere")}},
		{"create/definition a folder", []string{"package", "create", filepath.Join(dir, "folder")}},
		{"create/bad format", []string{"package", "create", def, "--format", "zip"}},
		{"create/bad part size", []string{"package", "create", def, "--part-size", "lots"}},
		{"create/missing key", []string{"package", "create", def, "-f", out, "--sign-key", filepath.Join(dir, "gone.key")}},
		{"create/folder key", []string{"package", "create", def, "-f", out, "--sign-key", folder}},
		{"inspect/missing", []string{"package", "inspect", missing}},
		{"inspect/folder", []string{"package", "inspect", folder}},
		{"inspect/damaged", []string{"package", "inspect", damagedPkg}},
		{"inspect/unreachable", []string{"package", "inspect", "127.0.0.1:1/x/pkg:1.0"}},
		{"verify/missing", []string{"package", "verify", missing, "--key", pub}},
		{"verify/damaged", []string{"package", "verify", damagedPkg, "--key", pub}},
		{"verify/missing key", []string{"package", "verify", pkg, "--key", filepath.Join(dir, "gone.pub")}},
		{"verify/folder key", []string{"package", "verify", pkg, "--key", folder}},
		{"sign/missing", []string{"package", "sign", missing, "--key", key}},
		{"sign/damaged", []string{"package", "sign", damagedPkg, "--key", key}},
		{"push/missing", []string{"package", "push", missing, "127.0.0.1:1/x/pkg:1.0"}},
		{"push/damaged", []string{"package", "push", damagedPkg, "127.0.0.1:1/x/pkg:1.0"}},
		{"push/unreachable", []string{"package", "push", pkg, "127.0.0.1:1/x/pkg:1.0"}},
		{"push/bad reference", []string{"package", "push", pkg, "127.0.0.1:1/X Y:1.0"}},
		{"pull/unreachable", []string{"package", "pull", "127.0.0.1:1/x/pkg:1.0", "-f", out}},
		{"pull/bad reference", []string{"package", "pull", "127.0.0.1:1/x/pkg::", "-f", out}},
		{"mirror/damaged", []string{"package", "mirror", damagedPkg, "127.0.0.1:1"}},
		{"mirror/unreachable", []string{"package", "mirror", pkg, "127.0.0.1:1"}},
		{"split/bad size", []string{"package", "split", pkg, "--size", "0"}},
		{"split/damaged", []string{"package", "split", damagedPkg, "--size", "1MiB"}},
		{"sbom/damaged", []string{"package", "sbom", damagedPkg}},
		{"delta/missing have", []string{"package", "delta", pkg, "--have", missing, "-f", out}},
		{"delta/damaged", []string{"package", "delta", damagedPkg, "--have", pkg, "-f", out}},
		{"load/damaged", []string{"registry", "load", damagedPkg, "--root", filepath.Join(dir, "root")}},
		{"load/missing", []string{"registry", "load", missing, "--root", filepath.Join(dir, "root")}},
		{"have/unreachable", []string{"registry", "have", "127.0.0.1:1", "-f", filepath.Join(dir, "out", "r.json")}},
		{"check/unreachable", []string{"registry", "check", "127.0.0.1:1"}},
		{"deploy/missing", append([]string{"deploy", missing}, kube...)},
		{"deploy/damaged", append([]string{"deploy", damagedPkg}, kube...)},
		{"deploy/unreachable cluster", append([]string{"deploy", pkg, "--key", pub}, kube...)},
		{"list/unreachable cluster", append([]string{"list"}, kube...)},
		{"key/folder", []string{"key", "generate", filepath.Join(dir, "good.tar.zst")}},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runFerryEnv(t, dir, env, c.args...)
			if fault := refusalFault(code, stderr); fault != "" {
				t.Errorf("ferry %s: %s", strings.Join(c.args, " "), fault)
			}
			t.Logf("%s", strings.TrimSpace(stderr))
		})
	}
}
