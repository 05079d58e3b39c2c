package advisory_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

const (
	recA = `{"id":"GO-A","modified":"2024-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"Go","name":"example.com/a"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.1.0"}]}]}]}`
	recB = `{"id":"GO-B","modified":"2024-06-01T12:00:00Z","affected":[{"package":{"ecosystem":"Go","name":"example.com/b"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"2.0.0"}]}]}]}`
)

// createWith writes files into a definition folder and creates its package.
func createWith(t *testing.T, files map[string]string) (*build.CreateResult, error) {
	t.Helper()
	dir := t.TempDir()
	for n, s := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(t.TempDir(), "p.tar.zst")})
}

func TestPackageCarriesAdvisories(t *testing.T) {
	ctx := context.Background()
	res, err := createWith(t, map[string]string{
		"ferry.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: vulns, version: 1.0.0}\n" +
			"components:\n- name: db\n  advisories:\n  - source: osv\n",
		"osv/GO-A.json": recA,
		"osv/GO-B.json": recB,
		"osv/notes.txt": "skipped",
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := res.Config.Components[0].Advisories
	if len(recs) != 1 || recs[0].Records != 2 || recs[0].Modified != "2024-06-01T12:00:00Z" || recs[0].Source != "osv" {
		t.Fatalf("ferry.json records %+v", recs)
	}
	again, err := createWith(t, map[string]string{
		"ferry.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: vulns, version: 1.0.0}\n" +
			"components:\n- name: db\n  advisories:\n  - source: osv\n",
		"osv/GO-A.json": recA,
		"osv/GO-B.json": recB,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := again.Config.Components[0].Advisories[0].Digest; d != recs[0].Digest {
		t.Errorf("the same records zipped twice: %s, then %s", recs[0].Digest, d)
	}

	r, err := artifact.Open(ctx, res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Inspect(ctx, r, "", nil); err != nil {
		t.Fatalf("inspect (ferry.json against the layers): %v", err)
	}
	check := func(t *testing.T, db *advisory.DB, got []artifact.Advisories) {
		t.Helper()
		if db.Len() != 2 || db.Date().Format("2006-01-02") != "2024-06-01" || len(got) != 1 {
			t.Fatalf("Len %d, Date %v, records %v", db.Len(), db.Date(), got)
		}
		m := db.Match(bom.Component{Version: "v1.0.0", PURL: "pkg:golang/example.com/a@v1.0.0"})
		if len(m) != 1 || m[0].ID != "GO-A" || m[0].Fixed != "1.1.0" {
			t.Errorf("Match = %+v", m)
		}
	}
	t.Run("archive", func(t *testing.T) {
		db, got, err := advisory.ReadPackage(ctx, r, "", advisory.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, db, got)
	})
	t.Run("registry", func(t *testing.T) {
		ref := registrytest.New(t) + "/vulns:1.0.0"
		if _, err := artifact.Push(ctx, r, ref, artifact.PushOptions{}); err != nil {
			t.Fatal(err)
		}
		repo, err := artifact.RemoteOptions{}.Repository(ref)
		if err != nil {
			t.Fatal(err)
		}
		db, got, err := advisory.ReadPackage(ctx, repo, "1.0.0", advisory.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, db, got)
	})
	t.Run("limits apply", func(t *testing.T) {
		_, _, err := advisory.ReadPackage(ctx, r, "", advisory.Limits{MaxRecords: 1})
		var le *advisory.LimitError
		if !errors.As(err, &le) {
			t.Fatalf("err = %v, want a LimitError", err)
		}
	})
}

func TestPackageAdvisoriesRefused(t *testing.T) {
	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: vulns, version: 1.0.0}\ncomponents:\n- name: db\n  advisories:\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{"malformed record", map[string]string{"ferry.yaml": head + "  - source: osv\n", "osv/X.json": "{"}, `components[0].advisories[0]: osv: osv/X.json: not an OSV record`},
		{"not a zip", map[string]string{"ferry.yaml": head + "  - source: db.zip\n", "db.zip": "PK no"}, `components[0].advisories[0]: db.zip: advisory database: not a zip`},
		{"missing", map[string]string{"ferry.yaml": head + "  - source: nope\n"}, `nope does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := createWith(t, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestPackageWithoutAdvisories(t *testing.T) {
	res, err := createWith(t, map[string]string{
		"ferry.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: none, version: 1.0.0}\ncomponents:\n- name: f\n  files: [{source: f, target: /f}]\n",
		"f":          "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(context.Background(), res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := advisory.ReadPackage(context.Background(), r, "", advisory.Limits{}); !errors.Is(err, advisory.ErrNotCarried) {
		t.Fatalf("err = %v, want ErrNotCarried", err)
	}
}

func loadDef(t *testing.T, dir string) *definition.Definition {
	t.Helper()
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return def
}
