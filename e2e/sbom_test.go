package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/artifact/sbomexec"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
)

// sbomImage is the image chartPackage carries.
const sbomImage = "docker.io/library/app:1.0"

// sbomGenerator is create's SBOM helper as `make build` puts it beside ferry.
func sbomGenerator(t testing.TB, bin string) build.SBOMGenerator {
	t.Helper()
	path := filepath.Join(bin, "ferry-sbom")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: run `make build` first", err)
	}
	return sbomexec.Generator{Path: path, TempDir: t.TempDir()}
}

// sbomTable is `ferry package sbom PKG IMAGE --table -o json`.
type sbomTable []struct {
	Image      string          `json:"image"`
	Platform   string          `json:"platform"`
	Components []bom.Component `json:"components"`
}

// stdlibOf is the Go standard library component the SBOM of pkg's image
// lists (the image runs a Go program): what its helper really found.
func stdlibOf(ctx context.Context, t *testing.T, bin, pkg string) bom.Component {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "ferry"), "package", "sbom", pkg, sbomImage, "--table", "-o", "json").Output()
	if err != nil {
		t.Fatalf("ferry package sbom: %v: %s", err, exitStderr(err))
	}
	var tables sbomTable
	if err := json.Unmarshal(out, &tables); err != nil || len(tables) == 0 {
		t.Fatalf("ferry package sbom printed %q: %v", out, err)
	}
	for _, c := range tables[0].Components {
		if c.Name == "stdlib" && bom.Ecosystem(c) == "Go" {
			return c
		}
	}
	t.Fatalf("the SBOM of %s lists no Go standard library: %+v", sbomImage, tables[0].Components)
	return bom.Component{}
}

// osvFolder writes an OSV database of one record, id, affecting the Go
// standard library below 99.0.0: so every version the helper can find.
func osvFolder(t *testing.T, id string) string {
	t.Helper()
	dir := t.TempDir()
	rec := map[string]any{
		"schema_version": "1.6.0",
		"id":             id,
		"modified":       time.Now().UTC().Format(time.RFC3339),
		"summary":        "an advisory of the e2e suite on the Go standard library",
		"affected": []any{map[string]any{
			"package": map[string]any{"ecosystem": "Go", "name": "stdlib"},
			"ranges":  []any{map[string]any{"type": "SEMVER", "events": []any{map[string]any{"introduced": "0"}, map[string]any{"fixed": "99.0.0"}}}},
		}},
	}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, id+".json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// advisoryPackage is a signed package carrying the OSV folder osv.
func advisoryPackage(ctx context.Context, t *testing.T, name, osv string, priv *key.Private) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "osv"), os.DirFS(osv)); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: %s, version: 1.0.0}\ncomponents:\n  - name: advisories\n    advisories:\n      - source: osv\n", name)
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(t.TempDir(), name+".tar")
	if _, err := build.Create(ctx, d, build.CreateOptions{Output: pkg, Format: artifact.FormatTar, SignKey: priv}); err != nil {
		t.Fatal(err)
	}
	return pkg
}

// ferryExit runs ferry and returns its standard output and exit status
// (a failure to run at all fails the test).
func ferryExit(ctx context.Context, t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	return "", -1
}

// hitsRunningIn keeps the hits of package name whose image runs where
// (a prefix of one of its places).
func hitsRunningIn(hits []bomscan.Hit, name, where string) []bomscan.Hit {
	var keep []bomscan.Hit
	for _, h := range hits {
		if h.Package != name || h.Image != sbomImage {
			continue
		}
		for _, r := range h.Runs {
			if strings.HasPrefix(r, where) {
				keep = append(keep, h)
				break
			}
		}
	}
	return keep
}

// auditJSON is `ferry sbom audit -o json`.
type auditJSON struct {
	Database struct {
		Records int       `json:"records"`
		Date    time.Time `json:"date"`
		Stale   bool      `json:"stale"`
	} `json:"database"`
	Findings []bomscan.Finding `json:"findings"`
}

// TestSBOMSearchAudit searches and audits what a cluster runs: a package
// whose image's SBOM the real helper made at create, deployed; a
// vulnerability database carried as a signed package and deployed like
// any other; `ferry sbom query --cluster` names the Pod running the
// library, `ferry sbom audit --cluster` the advisory (exit 3), from the
// index the cluster's registry keeps; the index wiped, the same answers.
func TestSBOMSearchAudit(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 10*time.Minute)
	bin := binDir(t)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil {
		t.Fatal(err)
	}
	const name, dbName = "e2e-sbom", "e2e-advisories"
	t.Cleanup(func() {
		forgetPackage(context.Background(), t, c, name)
		forgetPackage(context.Background(), t, c, dbName)
	})
	priv, pub, _ := trustNewKey(ctx, t, c)
	pkg, _ := chartPackageWith(ctx, t, c, name, "1.0.0", "sbom-1", name, priv, sbomGenerator(t, bin))
	std := stdlibOf(ctx, t, bin, pkg)
	t.Logf("the image's SBOM lists %s %s (%s)", std.Name, std.Version, std.PURL)
	const advisoryID = "FERRY-E2E-SBOM-1"
	db := advisoryPackage(ctx, t, dbName, osvFolder(t, advisoryID), priv)
	for _, p := range []string{pkg, db} {
		memberFerry(ctx, t, c, bin, "deploy", p, "--key", pub.Name)
	}
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	waitPackage(ctx, t, pc, name, 5*time.Minute, isReady)
	waitPackage(ctx, t, pc, dbName, 5*time.Minute, isReady)

	query := func(args ...string) []bomscan.Hit {
		t.Helper()
		start := time.Now()
		out := memberFerry(ctx, t, c, bin, append([]string{"sbom", "query", "pkg:golang/stdlib", "--cluster", "-o", "json"}, args...)...)
		var hits []bomscan.Hit
		if err := json.Unmarshal([]byte(out), &hits); err != nil {
			t.Fatalf("ferry sbom query printed %q: %v", out, err)
		}
		t.Logf("query %v: %d hits in %.2fs", args, len(hits), time.Since(start).Seconds())
		return hits
	}
	hits := hitsRunningIn(query(), name, "pod "+name+"/")
	if len(hits) == 0 {
		t.Fatalf("no hit of %s names a Pod of namespace %s running it", sbomImage, name)
	}
	if h := hits[0]; h.Version != "1.0.0" || h.Component.Version != std.Version || h.Platform == "" {
		t.Fatalf("hit %+v", h)
	}
	// A range that leaves the installed version out finds nothing of it.
	out := memberFerry(ctx, t, c, bin, "sbom", "query", "pkg:golang/stdlib@<1.0.0", "--cluster", "-o", "json")
	var none []bomscan.Hit
	if err := json.Unmarshal([]byte(out), &none); err != nil || len(hitsRunningIn(none, name, "pod ")) != 0 {
		t.Fatalf("pkg:golang/stdlib@<1.0.0 found %s (%v)", out, err)
	}

	audit := func(args ...string) auditJSON {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "ferry"), append([]string{"sbom", "audit", "--cluster", "--kubeconfig", c.Kubeconfig, "-o", "json"}, args...)...)
		out, status := ferryExit(ctx, t, cmd)
		if status != 3 {
			t.Fatalf("ferry sbom audit --cluster: exit %d, want 3 (findings): %s", status, out)
		}
		var rep auditJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("ferry sbom audit printed %q: %v", out, err)
		}
		return rep
	}
	rep := audit()
	if rep.Database.Records != 1 || rep.Database.Stale {
		t.Fatalf("database %+v: want the deployed one, 1 record, fresh", rep.Database)
	}
	found := false
	for _, f := range rep.Findings {
		if f.Match.ID == advisoryID && f.Package == name && f.Image == sbomImage && f.Component.Version == std.Version && f.Match.Fixed == "99.0.0" {
			found = len(hitsRunningIn([]bomscan.Hit{{Location: f.Location}}, name, "pod "+name+"/")) == 1
		}
	}
	if !found {
		t.Fatalf("the audit did not name %s on %s running in %s: %+v", advisoryID, sbomImage, name, rep.Findings)
	}

	// The index is a cache of the carried SBOMs: rebuilt, the same answers.
	if again := hitsRunningIn(query("--rebuild"), name, "pod "+name+"/"); len(again) != len(hits) {
		t.Fatalf("after --rebuild: %d hits, before %d", len(again), len(hits))
	}
}
