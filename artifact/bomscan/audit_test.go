package bomscan_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// vulndbVersion is the golang.org/x/vulndb whose data/osv (the Go
// vulnerability database's OSV records) the audit tests read.
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

// Two images whose programs link golang.org/x/net at an affected and at a
// fixed version of GO-2023-1988 (x/net/html, fixed in 0.13.0).
const (
	affected = "example.com/org/affected:1.0"
	fixed    = "example.com/org/fixed:1.0"
)

func auditPackage(t testing.TB) string {
	t.Helper()
	return bomscantest.Package(t, "audit", "1.0.0",
		bomscantest.Image{Ref: affected, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.11.0")},
		bomscantest.Image{Ref: fixed, Platforms: []string{"linux/amd64"}, Program: bomscantest.GoProgram(t, "golang.org/x/net", "golang.org/x/net/html", "v0.39.0")},
	)
}

// TestAuditAffectedAndFixed: against the Go vulnerability database, the
// image with x/net at an affected version is named with the advisory's
// id, installed and fixed versions; the one at the fixed version is not;
// every x/net advisory fixed by v0.39.0 names the first image only.
func TestAuditAffectedAndFixed(t *testing.T) {
	ctx := context.Background()
	db, err := advisory.LoadDir(vulndb(t), advisory.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(ctx, auditPackage(t))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := (&bomscan.Scanner{Source: bomscan.PackageSource(r, "")}).Audit(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	byImage := map[string]map[string]bomscan.Finding{affected: {}, fixed: {}}
	for _, f := range fs {
		if f.Component.Name == "golang.org/x/net" {
			byImage[f.Image][f.Match.ID] = f
		}
	}
	f, ok := byImage[affected]["GO-2023-1988"]
	if !ok || f.Component.Version != "v0.11.0" || strings.TrimPrefix(f.Match.Fixed, "v") != "0.13.0" || f.Package != "audit" || f.Platform != "linux/amd64" {
		t.Fatalf("GO-2023-1988 of the affected image: %+v (found %d x/net advisories)", f, len(byImage[affected]))
	}
	if _, ok := byImage[fixed]["GO-2023-1988"]; ok {
		t.Fatal("GO-2023-1988 names the image at the fixed version")
	}
	n := 0
	for id, f := range byImage[affected] {
		if f.Match.Fixed == "" {
			continue
		}
		if c, err := bom.Compare("Go", strings.TrimPrefix(f.Match.Fixed, "v"), "0.39.0"); err == nil && c <= 0 {
			n++
			if _, ok := byImage[fixed][id]; ok {
				t.Errorf("%s (fixed in %s) names the image at v0.39.0", id, f.Match.Fixed)
			}
		}
	}
	t.Logf("%d findings; %d x/net advisories fixed by v0.39.0 name the image at v0.11.0; %d name the one at v0.39.0", len(fs), n, len(byImage[fixed]))
}
