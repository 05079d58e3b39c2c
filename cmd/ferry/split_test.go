package main

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
)

// splitPackageDir writes a definition with an image and a 5 MiB file of
// random bytes (parts of a MiB are then many).
func splitPackageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: dvd, version: 0.1.0}\nplatforms: [linux/"+runtime.GOARCH+"]\ncomponents:\n  - name: c\n    images:\n      - {ref: docker.io/library/app:1.0, layout: images}\n    files:\n      - {source: big.bin, target: /big.bin}\n")
	writeLayoutImage(t, filepath.Join(dir, "images"), "1.0")
	big := make([]byte, 5<<20)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// partFiles lists base's part files.
func partFiles(t *testing.T, base string) []string {
	t.Helper()
	m, err := filepath.Glob(base + ".part[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCLISplit: create --part-size writes only parts and their index;
// inspect, push and registry load read them by the index, a part or the
// archive's name; split again into fewer parts leaves no stale part; a
// flipped byte and a missing part are each one line naming the part.
func TestCLISplit(t *testing.T) {
	dir := splitPackageDir(t)
	out, stderr, code := runFerry(t, dir, "package", "create", "-f", "dvd.tar.zst", "--part-size", "1MiB", "--sbom=false", "-o", "json")
	var res struct {
		Path, Root string
		Parts      []struct{ Name string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("create --part-size: exit %d, %q %q", code, out, stderr)
	}
	if res.Path != "dvd.tar.zst.parts.json" || len(res.Parts) < 6 {
		t.Fatalf("create --part-size wrote %s, %d parts; want the index, ≥ 6 parts", res.Path, len(res.Parts))
	}
	if _, err := os.Stat(filepath.Join(dir, "dvd.tar.zst")); !os.IsNotExist(err) {
		t.Errorf("create --part-size left the archive: %v", err)
	}
	for _, arg := range []string{"dvd.tar.zst", "dvd.tar.zst.parts.json", "dvd.tar.zst.part003"} {
		out, stderr, code := runFerry(t, dir, "package", "inspect", arg)
		if code != 0 || !strings.Contains(out, res.Root) {
			t.Fatalf("inspect %s: exit %d, %q %q", arg, code, out, stderr)
		}
	}
	url, _ := serveForTest(t, registryServeOptions{})
	host := strings.TrimPrefix(url, "http://")
	if out, stderr, code := runFerry(t, dir, "package", "push", "dvd.tar.zst", host+"/pkgs/dvd:0.1.0", "-o", "json"); code != 0 || !strings.Contains(out, res.Root) {
		t.Fatalf("push the parts: exit %d, %q %q", code, out, stderr)
	}
	if out, stderr, code := runFerry(t, dir, "registry", "load", "dvd.tar.zst.part001", "--root", "store"); code != 0 || !strings.Contains(out, "loaded package") {
		t.Fatalf("registry load the parts: exit %d, %q %q", code, out, stderr)
	}

	// Split again, into fewer parts: the higher-numbered ones go.
	out, stderr, code = runFerry(t, dir, "package", "split", "dvd.tar.zst", "--size", "2MiB")
	if code != 0 || !strings.Contains(out, "into 3 parts") {
		t.Fatalf("split again: exit %d, %q %q", code, out, stderr)
	}
	if got := partFiles(t, filepath.Join(dir, "dvd.tar.zst")); len(got) != 3 {
		t.Fatalf("after splitting into 2 MiB parts: %v, want 3", got)
	}
	// The parts and the index have an archive's mode; the line names the
	// package split.
	for _, name := range []string{"dvd.tar.zst.part001", "dvd.tar.zst.parts.json"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v, %v; want mode 0644", name, fi.Mode(), err)
		}
	}
	if !strings.Contains(out, "split dvd.tar.zst (") {
		t.Errorf("split says %q, want the package it split named", out)
	}

	part := filepath.Join(dir, "dvd.tar.zst.part002")
	keep, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), keep...)
	bad[len(bad)/3] ^= 0x40
	if err := os.WriteFile(part, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runFerry(t, dir, "package", "inspect", "dvd.tar.zst")
	wantFail(t, stdout, stderr, code, "part dvd.tar.zst.part002 is damaged")
	wantFail(t, stdout, stderr, code, "fetch it again")
	if err := os.Remove(part); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runFerry(t, dir, "registry", "load", "dvd.tar.zst.parts.json", "--root", "store2")
	wantFail(t, stdout, stderr, code, "part dvd.tar.zst.part002 is missing (part 2 of 3): fetch it again")
	if err := os.WriteFile(part, keep, 0o644); err != nil {
		t.Fatal(err)
	}

	// A plain archive split into parts of a DVD's decimal size: one part.
	if _, stderr, code := runFerry(t, dir, "package", "create", "-f", "one.tar", "--sbom=false"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code = runFerry(t, dir, "package", "split", "one.tar", "--size", "4.7G", "-f", "out/disc", "-o", "json")
	var sp struct {
		Index    string
		PartSize int64
		Parts    []struct{ Name string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &sp) != nil || sp.PartSize != 4_700_000_000 || len(sp.Parts) != 1 || sp.Index != "out/disc.parts.json" {
		t.Fatalf("split --size 4.7G -f out/disc: exit %d, %q %q", code, out, stderr)
	}
	if _, stderr, code := runFerry(t, dir, "package", "inspect", "out/disc"); code != 0 {
		t.Fatalf("inspect out/disc: %s", stderr)
	}
	for _, tt := range []struct{ size, want string }{
		{"4.7X", "--size: size \"4.7X\""},
		{"512K", "parts are at least 1MiB"},
	} {
		stdout, stderr, code := runFerry(t, dir, "package", "split", "one.tar", "--size", tt.size)
		wantFail(t, stdout, stderr, code, tt.want)
	}
}

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"4.7G", 4_700_000_000}, {"4.7GB", 4_700_000_000}, {"4.7gb", 4_700_000_000}, {"700M", 700_000_000},
		{"4GiB", 4 << 30}, {"64MiB", 64 << 20}, {"1Mi", 1 << 20}, {"1048576", 1 << 20}, {"2 MB", 2_000_000},
	} {
		if got, err := cli.ParseSize(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "G", "4.7X", "-1M", "1e3", "0.1"} {
		if got, err := cli.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
