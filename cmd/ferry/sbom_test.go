package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestCLIPackageSBOM: create makes an SBOM per image platform (and none
// with --sbom=false); package sbom lists them, prints one, writes them into
// a folder; inspect counts them; bad input, and no ferry-sbom to run, is
// a one-line error.
func TestCLIPackageSBOM(t *testing.T) {
	dir := t.TempDir()
	m := sbomDefinition(t, dir)

	stdout, stderr, code := runFerry(t, dir, "package", "create", "--sbom-format", "xml")
	wantFail(t, stdout, stderr, code, `--sbom-format must be spdx-json or cyclonedx-json, not "xml"`)
	if _, stderr, code := runFerry(t, dir, "package", "create"); code != 0 {
		t.Fatal(stderr)
	}
	pkg := "s-0.1.0.tar.zst"
	out, stderr, code := runFerry(t, dir, "package", "sbom", pkg)
	if code != 0 || !strings.HasPrefix(out, "IMAGE") || !strings.Contains(out, "example.com/org/one:1.0  linux/amd64  spdx-json  sha256:") {
		t.Fatalf("package sbom: exit %d\n%s%s", code, out, stderr)
	}
	out, _, _ = runFerry(t, dir, "package", "sbom", pkg, "-o", "json")
	var rows []struct {
		Image, Platform, ArtifactType, Digest, Subject string
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Subject != m.Digest.String() || rows[0].ArtifactType != "application/spdx+json" {
		t.Fatalf("package sbom -o json: %v\n%s", err, out)
	}
	doc, stderr, code := runFerry(t, dir, "package", "sbom", pkg, "example.com/org/one:1.0")
	if code != 0 || !strings.Contains(doc, `"libferry1"`) || !strings.Contains(doc, `"spdxVersion"`) {
		t.Fatalf("package sbom IMAGE: exit %d %s\n%.300s", code, stderr, doc)
	}
	// --table: the components, sorted by type then name; -o json the same.
	out, stderr, code = runFerry(t, dir, "package", "sbom", pkg, "example.com/org/one:1.0", "--table")
	if code != 0 || !strings.HasPrefix(out, "example.com/org/one:1.0 linux/amd64 (spdx-json, ") ||
		!regexp.MustCompile(`(?m)^NAME +VERSION +TYPE +LICENSES +PURL\n(.*\n)*ferry-tools +0\.9\.0-2 +deb +- +pkg:deb/debian/ferry-tools@0\.9\.0-2\?arch=amd64&distro=debian-12\nlibferry1 +1\.2\.3-1 +deb `).MatchString(out) ||
		!strings.Contains(out, "pkg:golang/"+fixture.GoModule) {
		t.Fatalf("--table: exit %d %s\n%s", code, stderr, out)
	}
	out, _, code = runFerry(t, dir, "package", "sbom", pkg, "example.com/org/one:1.0", "--table", "-o", "json")
	var tables []struct {
		Image, Platform, Format string
		Components              []struct{ Name, Version, Type, PURL string }
	}
	if err := json.Unmarshal([]byte(out), &tables); err != nil || code != 0 || len(tables) != 1 || tables[0].Format != "spdx-json" ||
		!slices.ContainsFunc(tables[0].Components, func(c struct{ Name, Version, Type, PURL string }) bool {
			return c.Name == "libferry1" && c.Version == "1.2.3-1" && c.Type == "deb"
		}) {
		t.Fatalf("--table -o json: %v\n%s", err, out)
	}
	stdout, stderr, code = runFerry(t, dir, "package", "sbom", pkg, "--table")
	wantFail(t, stdout, stderr, code, "--platform, --output-dir and --table need an IMAGE")
	out, stderr, code = runFerry(t, dir, "package", "sbom", pkg, "example.com/org/one:1.0", "--platform", "linux/amd64", "--output-dir", "sboms")
	if code != 0 {
		t.Fatal(stderr)
	}
	written, err := os.ReadFile(filepath.Join(dir, "sboms", "example.com_org_one_1.0_linux_amd64.spdx.json"))
	if err != nil || string(written) != doc || !strings.HasPrefix(out, "wrote ") {
		t.Fatalf("--output-dir: %v; printed %q", err, out)
	}
	stdout, stderr, code = runFerry(t, dir, "package", "sbom", pkg, "example.com/org/two:1.0")
	wantFail(t, stdout, stderr, code, "the package has no image example.com/org/two:1.0; it has example.com/org/one:1.0")
	stdout, stderr, code = runFerry(t, dir, "package", "sbom", pkg, "example.com/org/one:1.0", "--platform", "linux/arm64")
	wantFail(t, stdout, stderr, code, "image example.com/org/one:1.0 has no SBOM for linux/arm64; it has linux/amd64")
	out, _, _ = runFerry(t, dir, "package", "inspect", pkg)
	if !strings.Contains(out, "1 SBOM (spdx-json;") {
		t.Errorf("inspect does not count the SBOM:\n%s", out)
	}

	// A ferry-full with no ferry-sbom beside it nor on PATH: a one-line
	// error naming the way out, and --sbom=false needs none.
	lone := filepath.Join(t.TempDir(), "ferry-full")
	if err := os.Link(filepath.Join(filepath.Dir(ferryBin), "ferry-full"), lone); err != nil {
		t.Fatal(err)
	}
	noPath := []string{"PATH=" + t.TempDir()}
	stdout, stderr, code = runBinary(t, lone, dir, noPath, "", "package", "create", "-f", "nohelper.tar.zst")
	wantFail(t, stdout, stderr, code, "SBOMs need ferry-sbom (make build puts it next to ferry), or pass --sbom=false")
	if _, stderr, code := runBinary(t, lone, dir, noPath, "", "package", "create", "--sbom=false", "-f", "nosbom.tar.zst"); code != 0 {
		t.Fatal(stderr)
	}
	out, _, code = runFerry(t, dir, "package", "sbom", "nosbom.tar.zst")
	if code != 0 || !strings.Contains(out, "holds no SBOM") {
		t.Errorf("--sbom=false: %s", out)
	}
}
