package bomscan_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// benchImages, benchPackages and benchLayer shape BenchmarkAudit's package:
// benchImages images, each a dpkg database of benchPackages packages, a Go
// program linking golang.org/x/net v0.11.0, and random layers of
// benchLayer bytes up to FERRY_BENCH_AUDIT_MIB (default 1024) in all.
const (
	benchImages   = 3
	benchPackages = 3000
	benchLayer    = 64 << 20
)

// auditBenchPackages makes (once, kept in the temporary folder across
// runs) the package to audit and the Go vulnerability database as a package.
func auditBenchPackages(b *testing.B) (pkg, db string) {
	b.Helper()
	ctx := context.Background()
	mib := 1024
	if s := os.Getenv("FERRY_BENCH_AUDIT_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("FERRY_BENCH_AUDIT_MIB=%q", s)
		}
		mib = n
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ferry-bench-audit-%dMiB-%s", mib, vulndbVersion[len(vulndbVersion)-12:]))
	pkg, db = filepath.Join(dir, "app.tar.zst"), filepath.Join(dir, "vulndb.tar.zst")
	if _, err := os.Stat(db); err == nil {
		return pkg, db
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	os.RemoveAll(src)
	store, err := oci.New(filepath.Join(src, "images"))
	if err != nil {
		b.Fatal(err)
	}
	rng := fixture.Rand(53)
	prog := bomscantest.GoProgram(b, "golang.org/x/net", "golang.org/x/net/html", "v0.11.0")
	perImage := int64(mib) << 20 / benchImages
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: app, version: 1.0.0}\nplatforms: [linux/amd64]\ncomponents:\n  - name: app\n    images:\n"
	for i := range benchImages {
		var status bytes.Buffer
		for p := range benchPackages {
			fmt.Fprintf(&status, "Package: lib%d-%d\nStatus: install ok installed\nArchitecture: amd64\nVersion: %d.%d-%d\nMaintainer: x <x@example.com>\nDescription: a package\n\n", i, p, p%7, p%13, i)
		}
		layers := []fixture.Layer{fixture.FilesLayer([]fixture.File{
			{Name: "etc/os-release", Data: []byte("ID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n"), Mode: 0o644},
			{Name: "var/lib/dpkg/status", Data: status.Bytes(), Mode: 0o644},
			{Name: "usr/local/bin/app", Data: prog, Mode: 0o755},
		})}
		for left := perImage; left > 0; left -= benchLayer {
			layers = append(layers, fixture.NewLayer(rng, int(min(left, benchLayer))))
		}
		m, err := fixture.PushImage(ctx, store, fixture.Platform("linux", "amd64", ""), layers)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.Tag(ctx, m, fmt.Sprint("img", i)); err != nil {
			b.Fatal(err)
		}
		def += fmt.Sprintf("      - {ref: example.com/org/app%d:1.0, layout: images, tag: img%d}\n", i, i)
	}
	create := func(folder, yaml, out string, gen build.SBOMGenerator) {
		if err := os.WriteFile(filepath.Join(folder, definition.FileName), []byte(yaml), 0o644); err != nil {
			b.Fatal(err)
		}
		d, err := definition.Load(folder)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := build.Create(ctx, d, build.CreateOptions{Output: out, SBOM: gen}); err != nil {
			b.Fatal(err)
		}
	}
	gen, err := sbomexectest.Generator()
	if err != nil {
		b.Fatal(err)
	}
	create(src, def, pkg, gen)
	// The database package: data/osv copied into its definition's folder.
	dbSrc := filepath.Join(dir, "dbsrc")
	if err := os.CopyFS(filepath.Join(dbSrc, "osv"), os.DirFS(vulndb(b))); err != nil {
		b.Fatal(err)
	}
	create(dbSrc, "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: vulndb, version: 1.0.0}\ncomponents:\n  - name: db\n    advisories:\n      - source: osv\n", db, nil)
	os.RemoveAll(src)
	os.RemoveAll(dbSrc)
	return pkg, db
}

// readSBOMs reads every SBOM document of the package at path, in one
// pass: the package verified whole, each document fetched and checked
// (what `ferry package sbom PKG IMAGE` does for one image).
func readSBOMs(b *testing.B, path string) int64 {
	ctx := context.Background()
	r, err := artifact.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	refs, err := bomscan.PackageSource(r, "").SBOMs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, ref := range refs {
		rc, err := ref.Fetch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		m, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
		n += m
	}
	return n
}

// audit audits the package at path against the database package at db.
func audit(b *testing.B, path, db string) int {
	ctx := context.Background()
	d, err := artifact.Open(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	adb, _, err := advisory.ReadPackage(ctx, d, "", advisory.DefaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	r, err := artifact.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	fs, err := (&bomscan.Scanner{Source: bomscan.PackageSource(r, "")}).Audit(ctx, adb)
	if err != nil {
		b.Fatal(err)
	}
	return len(fs)
}

// BenchmarkAudit: an audit of a 1 GiB package (three images, real SBOMs of
// some 3,000 components each) against the whole Go vulnerability database,
// carried as a package, against reading the package's SBOMs alone. The
// issue's budget: ratio ≤ 2.
func BenchmarkAudit(b *testing.B) {
	pkg, db := auditBenchPackages(b)
	benchenv.Quiet(b, 1)
	var read, aud time.Duration
	var docs int64
	var findings int
	for b.Loop() {
		t0 := time.Now()
		docs = readSBOMs(b, pkg)
		t1 := time.Now()
		findings = audit(b, pkg, db)
		read, aud = read+t1.Sub(t0), aud+time.Since(t1)
	}
	if findings == 0 {
		b.Fatal("the audit found nothing: x/net v0.11.0 is affected")
	}
	b.ReportMetric(read.Seconds()/float64(b.N), "read-s")
	b.ReportMetric(aud.Seconds()/float64(b.N), "audit-s")
	b.ReportMetric(aud.Seconds()/read.Seconds(), "ratio")
	b.ReportMetric(float64(docs), "sbom-bytes")
	b.ReportMetric(float64(findings), "findings")
}
