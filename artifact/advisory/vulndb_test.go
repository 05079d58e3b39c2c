package advisory_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sbomexectest.Cleanup()
	os.Exit(code)
}

// vulndbVersion is the golang.org/x/vulndb the tests take the Go
// vulnerability database's OSV records from (its data/osv).
const vulndbVersion = "v0.0.0-20261105234957-e22db6528018"

// vulndb returns the folder of the Go vulnerability database's records,
// downloaded through the module proxy.
func vulndb(t testing.TB) string {
	t.Helper()
	dir, err := thirdparty.ModuleDir("golang.org/x/vulndb", vulndbVersion)
	if err != nil {
		t.Skipf("the Go vulnerability database: %v", err)
	}
	return filepath.Join(dir, "data", "osv")
}

// census counts dir's records that are not withdrawn, and their newest
// modified time, as a reader independent of package advisory sees them.
func census(t *testing.T, dir string) (int, time.Time) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var newest time.Time
	for _, p := range names {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Modified, Published, Withdrawn string }
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		m, _ := time.Parse(time.RFC3339, r.Modified)
		if m.Year() <= 1 { // vulndb's data/osv: modified is set on publication
			m, _ = time.Parse(time.RFC3339, r.Published)
		}
		if m.After(newest) {
			newest = m
		}
		if r.Withdrawn == "" {
			n++
		}
	}
	return n, newest
}

// TestVulndbCarried: the Go vulnerability database, carried as a package
// (a copy of data/osv named by `advisories:`), reads back whole.
func TestVulndbCarried(t *testing.T) {
	src := vulndb(t)
	want, newest := census(t, src)
	if want < 4000 {
		t.Fatalf("only %d records in %s", want, src)
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "osv"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: govulndb, version: 1.0.0}\n"+
		"components:\n- name: vulns\n  advisories:\n  - source: osv/\n"), 0o644)
	def := loadDef(t, dir)
	res, err := build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(t.TempDir(), "govulndb.tar.zst")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(context.Background(), res.Path)
	if err != nil {
		t.Fatal(err)
	}
	db, recs, err := advisory.ReadPackage(context.Background(), r, "", advisory.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if db.Len() != want || !db.Date().Equal(newest) {
		t.Errorf("Len %d, Date %v; want %d, %v", db.Len(), db.Date(), want, newest)
	}
	if recs[0].Records != want || recs[0].Modified != newest.Format(time.RFC3339) {
		t.Errorf("ferry.json records %+v", recs[0])
	}
	t.Logf("%d records, dated %s, carried in a layer of %d bytes", db.Len(), db.Date().Format(time.RFC3339), recs[0].Size)
}

// goProgram builds a program that uses golang.org/x/text's language
// package at version, through the module proxy.
func goProgram(t *testing.T, version string) []byte {
	t.Helper()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/uses-text\n\ngo 1.22\n\nrequire golang.org/x/text "+version+"\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"golang.org/x/text/language\"\n\n"+
		"func main() { t, _, _ := language.ParseAcceptLanguage(\"en-US\"); println(len(t)) }\n"), 0o644)
	out := filepath.Join(src, "uses-text")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("go build with golang.org/x/text %s (the module proxy): %v: %s", version, err, msg)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// spdxComponents reads the components of an SPDX JSON document as the
// audit does.
func spdxComponents(t *testing.T, doc []byte) []bom.Component {
	t.Helper()
	cs, err := bom.Read(bytes.NewReader(doc), definition.ArtifactTypeSPDX, bom.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestAuditGoBuilds is the test: two images, one holding a Go
// program built with golang.org/x/text at v0.3.6 (affected by
// GO-2021-0113, fixed in 0.3.7), one with the same program at v0.3.7;
// their SBOMs, made by the real helper, matched against the Go
// vulnerability database: the first names GO-2021-0113 with its installed
// and fixed versions, the second does not.
func TestAuditGoBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go programs and the SBOM helper")
	}
	db, err := advisory.LoadDir(vulndb(t), advisory.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	gen, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	gen.ToolVersion, gen.TempDir = "test", t.TempDir()
	ctx := context.Background()
	audit := func(version string) []advisory.Match {
		bin := goProgram(t, version)
		mem := memory.New()
		l := fixture.FilesLayer([]fixture.File{{Name: "usr/local/bin/uses-text", Data: bin, Mode: 0o755}})
		desc, err := fixture.PushImage(ctx, mem, fixture.Platform("linux", "amd64", ""), []fixture.Layer{l})
		if err != nil {
			t.Fatal(err)
		}
		doc, err := gen.GenerateSBOM(ctx, mem, build.SBOMRequest{Ref: "example.com/uses-text:" + version, Manifest: desc, Platform: "linux/amd64", Created: time.Unix(1700000000, 0)})
		if err != nil {
			t.Fatal(err)
		}
		var ms []advisory.Match
		seen := false
		for _, c := range spdxComponents(t, doc) {
			if strings.HasPrefix(c.PURL, "pkg:golang/golang.org/x/text@") {
				seen = true
			}
			ms = append(ms, db.Match(c)...)
		}
		if !seen {
			t.Fatalf("the SBOM of the %s build lists no golang.org/x/text:\n%.2000s", version, doc)
		}
		return ms
	}
	find := func(ms []advisory.Match, id string) *advisory.Match {
		for i := range ms {
			if ms[i].ID == id {
				return &ms[i]
			}
		}
		return nil
	}
	affected := audit("v0.3.6")
	m := find(affected, "GO-2021-0113")
	if m == nil {
		t.Fatalf("the v0.3.6 build: no GO-2021-0113 among %v", affected)
	}
	if m.Package != "golang.org/x/text" || m.Installed != "v0.3.6" || m.Fixed != "0.3.7" || !strings.Contains(strings.Join(m.Aliases, " "), "CVE-2021-38561") {
		t.Errorf("the v0.3.6 build: %+v", *m)
	}
	if m := find(audit("v0.3.7"), "GO-2021-0113"); m != nil {
		t.Errorf("the v0.3.7 build, fixed, still names %+v", *m)
	}
}
