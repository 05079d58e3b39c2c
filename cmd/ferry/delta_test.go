package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIDelta: the far side's signed receipt, the delta made against it,
// read alone, refused by a registry that lacks what it leaves out (one line
// naming the blobs, nothing written), completed by push and by registry
// load where v1 is, and verified whole there.
func TestCLIDelta(t *testing.T) {
	dir := t.TempDir()
	pw := []string{passwordEnv + "=secret"}
	ok := func(env []string, args ...string) string {
		t.Helper()
		out, stderr, code := runFerryEnv(t, dir, env, args...)
		if code != 0 {
			t.Fatalf("ferry %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return out
	}
	fails := func(want string, args ...string) string {
		t.Helper()
		out, stderr, code := runFerryEnv(t, dir, nil, args...)
		wantFail(t, out, stderr, code, want)
		return stderr
	}
	ok(pw, "key", "generate")
	def := func(version, content string) {
		writeFile(t, filepath.Join(dir, "ferry.yaml"), strings.Replace(goodDef, "0.1.0", version, 1))
		writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
		writeFile(t, filepath.Join(dir, "f.txt"), content)
	}
	def("0.1.0", "hello\n")
	ok(nil, "package", "create")
	def("0.2.0", "hello again\n")
	ok(pw, "package", "create", "--sign-key", "cosign.key")

	url, _ := serveForTest(t, registryServeOptions{})
	host := strings.TrimPrefix(url, "http://")
	ok(nil, "package", "push", "cli-0.1.0.tar.zst", host+"/cli")

	// The far side: a signed receipt of its registry.
	out := ok(pw, "registry", "have", host, "-f", "receipt.json", "--key", "cosign.key")
	if !strings.Contains(out, "receipt of "+host) || !strings.Contains(out, "receipt.json.sig") {
		t.Fatalf("registry have: %q", out)
	}
	// Only the package's repository: here, the same blobs.
	for _, args := range [][]string{{host, "--prefix", "cli"}, {host + "/cli"}} {
		var r struct{ Blobs int }
		out := ok(nil, append([]string{"registry", "have", "-f", "scoped.json", "-o", "json"}, args...)...)
		var all struct{ Blobs int }
		if json.Unmarshal([]byte(out), &r) != nil || json.Unmarshal([]byte(ok(nil, "registry", "have", host, "-f", "all.json", "-o", "json")), &all) != nil || r.Blobs == 0 || r.Blobs != all.Blobs {
			t.Fatalf("registry have %v: %q", args, out)
		}
	}
	fails("names a prefix already", "registry", "have", host+"/cli", "--prefix", "cli", "-f", "x.json")
	var res struct {
		Carried, Omitted int
	}
	out = ok(nil, "package", "delta", "cli-0.2.0.tar.zst", "--have", "receipt.json", "--have-key", "cosign.pub", "-f", "update.tar.zst", "-o", "json")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Carried == 0 || res.Omitted == 0 {
		t.Fatalf("package delta: %q %v", out, err)
	}
	// The same from the package v1 itself, and from v1 in the registry.
	for _, have := range []string{"cli-0.1.0.tar.zst", host + "/cli:0.1.0"} {
		var other struct{ Carried, Omitted int }
		out := ok(nil, "package", "delta", "cli-0.2.0.tar.zst", "--have", have, "-f", "other.tar.zst", "-o", "json")
		if err := json.Unmarshal([]byte(out), &other); err != nil || other != res {
			t.Fatalf("delta against %s: %q, want %+v", have, out, res)
		}
	}
	// A receipt changed after it was signed is refused.
	data, _ := os.ReadFile(filepath.Join(dir, "receipt.json"))
	writeFile(t, filepath.Join(dir, "forged.json"), strings.Replace(string(data), `"blobs"`, `"blobs" `, 1))
	if err := os.WriteFile(filepath.Join(dir, "forged.json.sig"), mustRead(t, filepath.Join(dir, "receipt.json.sig")), 0o644); err != nil {
		t.Fatal(err)
	}
	fails("signature", "package", "delta", "cli-0.2.0.tar.zst", "--have", "forged.json", "--have-key", "cosign.pub", "-f", "x.tar.zst")

	// Read alone.
	out = ok(nil, "package", "inspect", "update.tar.zst")
	if !strings.Contains(out, "Delta") || !strings.Contains(out, "leaves out") {
		t.Fatalf("inspect of a delta: %q", out)
	}
	out = ok(nil, "package", "verify", "update.tar.zst", "--key", "cosign.pub")
	if !strings.Contains(out, "a delta:") {
		t.Fatalf("verify of a delta: %q", out)
	}

	// Into a registry that lacks v1: refused, naming the blobs, nothing written.
	emptyRoot := t.TempDir()
	url2, _ := serveForTest(t, registryServeOptions{storageOptions: storageOptions{root: emptyRoot}})
	host2 := strings.TrimPrefix(url2, "http://")
	stderr := fails("blobs the delta leaves out", "package", "push", "update.tar.zst", host2+"/cli")
	if !strings.Contains(stderr, "sha256:") || !strings.Contains(stderr, "ferry registry have") {
		t.Fatalf("refusal: %q", stderr)
	}
	if entries, _ := os.ReadDir(filepath.Join(emptyRoot, "docker", "registry", "v2", "repositories")); len(entries) != 0 {
		t.Fatalf("a refused delta left repositories %v", entries)
	}

	// Where v1 is: complete, and verified whole.
	ok(nil, "package", "push", "update.tar.zst", host+"/cli")
	ok(nil, "package", "verify", host+"/cli:0.2.0", "--key", "cosign.pub")

	// registry load (deploy's push: each image under its own path) into a
	// storage holding v1.
	root := t.TempDir()
	ok(nil, "registry", "load", "cli-0.1.0.tar.zst", "--root", root)
	out = ok(nil, "registry", "load", "update.tar.zst", "--root", root)
	if !strings.Contains(out, "loaded package cli:0.2.0") {
		t.Fatalf("registry load of a delta: %q", out)
	}
	emptyLoad := t.TempDir()
	fails("blobs the delta leaves out", "registry", "load", "update.tar.zst", "--root", emptyLoad)
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
