package main

import (
	"context"
	"encoding/json"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"path/filepath"
	"strings"
	"testing"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// sbomPackage creates, in dir, package s-0.1.0.tar.zst holding image
// example.com/org/one:1.0 (the SBOM fixture, linux/amd64) with its SBOM.
func sbomPackage(t *testing.T, dir string) string {
	t.Helper()
	sbomDefinition(t, dir)
	if _, stderr, code := runFerry(t, dir, "package", "create"); code != 0 {
		t.Fatal(stderr)
	}
	return "s-0.1.0.tar.zst"
}

// TestCLISBOMQuery: a query of a package and of a registry's packages
// names package, version, image, platform and component, as a table and as
// JSON; no hit is said; wrong use is a one-line error.
func TestCLISBOMQuery(t *testing.T) {
	dir := t.TempDir()
	pkg := sbomPackage(t, dir)
	out, stderr, code := runFerry(t, dir, "sbom", "query", "libferry1", pkg)
	if code != 0 || !strings.HasPrefix(out, "PACKAGE") || !strings.Contains(out, "s 0.1.0  example.com/org/one:1.0  linux/amd64  libferry1  1.2.3-1  pkg:deb/debian/libferry1@1.2.3-1") {
		t.Fatalf("query: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runFerry(t, dir, "sbom", "query", "openssl", pkg)
	if code != 0 || out != "no SBOM lists openssl\n" {
		t.Errorf("no hit: exit %d %q", code, out)
	}

	host := registrytest.New(t)
	if _, stderr, code := runFerry(t, dir, "package", "push", pkg, host+"/apps/s:0.1.0"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code = runFerry(t, dir, "sbom", "query", fixture.GoModule, "--registry", host+"/apps", "-o", "json")
	var hits []struct {
		Package, Version, Image, Platform string
		Component                         struct{ Name, Type string }
	}
	if err := json.Unmarshal([]byte(out), &hits); code != 0 || err != nil || len(hits) != 1 ||
		hits[0].Package != "s" || hits[0].Image != "example.com/org/one:1.0" || hits[0].Component.Name != fixture.GoModule || hits[0].Component.Type != "golang" {
		t.Fatalf("--registry -o json: exit %d %v\n%s%s", code, err, out, stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sbom", "query", "libferry1"}, "name the SBOMs to read: a package or reference, --registry, --cluster or --fleet"},
		{[]string{"sbom", "query", "libferry1", pkg, "--registry", host}, "name one place to read SBOMs from: a package or reference, --registry, --cluster or --fleet"},
		{[]string{"sbom", "query", "libferry1", pkg, "--rebuild"}, "--rebuild makes a cluster's or the centre's index again: add --cluster or --fleet"},
		{[]string{"sbom", "query", "libferry1", "--fleet"}, "--registry is required with --fleet: the centre's registry (host[:port])"},
		{[]string{"sbom", "audit", pkg}, "--db is required: the advisory database (a package, a zip or a folder of OSV records); only --cluster has one deployed"},
		{[]string{"sbom", "audit", pkg, "--db", pkg, "-o", "xml"}, `-o/--output must be text, json or sarif, not "xml"`},
	} {
		stdout, stderr, code := runFerry(t, dir, c.args...)
		wantFail(t, stdout, stderr, code, c.want)
	}
}

// osvRecord is an OSV record naming Debian's libferry1 below fixed.
func osvRecord(id, fixed string) string {
	return `{"schema_version":"1.6.0","id":"` + id + `","modified":"2020-01-02T00:00:00Z","published":"2020-01-01T00:00:00Z","summary":"a flaw in libferry1",` +
		`"affected":[{"package":{"ecosystem":"Debian:12","name":"libferry1"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"` + fixed + `"}]}]}]}`
}

// TestCLISBOMAudit: a package against a folder of OSV records and against
// the same records carried as a signed package: the finding named with
// advisory, installed and fixed versions, exit 3; an old database said
// so; JSON and SARIF parse; nothing found is exit 0.
func TestCLISBOMAudit(t *testing.T) {
	dir := t.TempDir()
	pkg := sbomPackage(t, dir)
	writeFile(t, filepath.Join(dir, "osv", "DSA-TEST-1.json"), osvRecord("DSA-TEST-1", "1.2.4-1"))
	writeFile(t, filepath.Join(dir, "old", "DSA-TEST-2.json"), osvRecord("DSA-TEST-2", "1.2.0-1"))

	out, stderr, code := runFerry(t, dir, "sbom", "audit", pkg, "--db", "osv")
	if code != 3 || stderr != "" || !strings.HasPrefix(out, "advisory database osv: 1 records, newest of 2020-01-02") ||
		!strings.Contains(out, "warning: the advisory database is") ||
		!strings.Contains(out, "DSA-TEST-1  libferry1  1.2.3-1 → 1.2.4-1  s 0.1.0  example.com/org/one:1.0  linux/amd64  -") ||
		!strings.HasSuffix(out, "1 finding of 1 advisory\n") {
		t.Fatalf("audit: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = runFerry(t, dir, "sbom", "audit", pkg, "--db", "osv", "-o", "json", "--max-age", "0")
	var rep struct {
		Database struct {
			Records int
			Stale   bool
		}
		Findings []struct {
			Image     string
			Component struct{ Name, Version string }
			Advisory  struct{ ID, Fixed string }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 3 || err != nil || rep.Database.Records != 1 || rep.Database.Stale || len(rep.Findings) != 1 ||
		rep.Findings[0].Advisory.ID != "DSA-TEST-1" || rep.Findings[0].Advisory.Fixed != "1.2.4-1" || rep.Findings[0].Component.Version != "1.2.3-1" {
		t.Fatalf("-o json: exit %d %v\n%s", code, err, out)
	}
	out, _, code = runFerry(t, dir, "sbom", "audit", pkg, "--db", "osv", "-o", "sarif")
	var sarif struct{ Version string }
	if err := json.Unmarshal([]byte(out), &sarif); code != 3 || err != nil || sarif.Version != "2.1.0" {
		t.Fatalf("-o sarif: exit %d %v\n%s", code, err, out)
	}
	out, _, code = runFerry(t, dir, "sbom", "audit", pkg, "--db", "old")
	if code != 0 || !strings.HasSuffix(out, "no findings\n") {
		t.Fatalf("nothing found: exit %d\n%s", code, out)
	}

	// The records carried as a signed package, verified with --key.
	if _, stderr, code := runFerryEnv(t, dir, []string{"COSIGN_PASSWORD=pw"}, "key", "generate", dir); code != 0 {
		t.Fatal(stderr)
	}
	db := filepath.Join(dir, "db")
	writeFile(t, filepath.Join(db, "osv", "DSA-TEST-1.json"), osvRecord("DSA-TEST-1", "1.2.4-1"))
	writeFile(t, filepath.Join(db, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: db, version: 1.0.0}\ncomponents:\n  - name: db\n    advisories:\n      - source: osv\n")
	if _, stderr, code := runFerryEnv(t, dir, []string{"COSIGN_PASSWORD=pw"}, "package", "create", db, "-f", "db.tar.zst", "--sign-key", "cosign.key"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code = runFerry(t, dir, "sbom", "audit", pkg, "--db", "db.tar.zst", "--key", "cosign.pub")
	if code != 3 || !strings.Contains(out, "DSA-TEST-1  libferry1  1.2.3-1 → 1.2.4-1") {
		t.Fatalf("a database package: exit %d\n%s%s", code, out, stderr)
	}
	writeFile(t, filepath.Join(dir, "empty", "README"), "no records\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sbom", "audit", pkg, "--db", "empty"}, "empty holds no OSV record"},
		{[]string{"sbom", "audit", pkg, "--db", "osv", "--key", "cosign.pub"}, "--key verifies a database package; osv is a folder of records"},
		{[]string{"sbom", "audit", pkg, "--db", pkg}, "carries no advisories"},
	} {
		stdout, stderr, code := runFerry(t, dir, c.args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("ferry %s: exit %d %q, want one line with %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// sbomDefinition writes, in dir, the definition of package s 0.1.0:
// image example.com/org/one:1.0 (the SBOM fixture, linux/amd64) in the
// layout images/; it returns the image's manifest.
func sbomDefinition(t *testing.T, dir string) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	bin, err := fixture.GoBinary(ctx, t.TempDir(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := fixture.SBOMImage(ctx, store, fixture.Platform("linux", "amd64", ""), bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, m, "one"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: s, version: 0.1.0}\n"+
		"platforms: [linux/amd64]\ncomponents:\n  - name: c\n    images:\n      - {ref: example.com/org/one:1.0, layout: images, tag: one}\n")
	return m
}
