package main

import (
	"context"
	"encoding/json"
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
