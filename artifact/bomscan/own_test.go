package bomscan_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
)

// requiredVersion is the version sbomgen/go.mod requires of module.
func requiredVersion(t *testing.T, module string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "sbomgen", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == module {
			return fs[1]
		}
	}
	t.Fatalf("sbomgen/go.mod requires no %s", module)
	return ""
}

// TestOwnHelperSearched: an image holding ferry's own SBOM helper, its
// SBOM made by that helper; a search by package URL names Syft at the
// version ferry's go.mod pins, a range below it finds nothing, and a name
// alone finds ferry's own module.
func TestOwnHelperSearched(t *testing.T) {
	ctx := context.Background()
	path, err := sbomexectest.Path()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const ref = "example.com/ferry/ferry-sbom:devel"
	pkg := bomscantest.Package(t, "ferry-sbom", "1.0.0", bomscantest.Image{Ref: ref, Platforms: []string{"linux/" + runtime.GOARCH}, Program: prog})
	r, err := artifact.Open(ctx, pkg)
	if err != nil {
		t.Fatal(err)
	}
	syft := requiredVersion(t, "github.com/anchore/syft")
	for _, c := range []struct {
		query string
		want  string // the version found, "" for none, "*" for any one
	}{
		{"pkg:golang/github.com/anchore/syft", syft},
		{"pkg:golang/github.com/anchore/syft@=" + syft, syft},
		{"pkg:golang/github.com/anchore/syft@<" + strings.TrimPrefix(syft, "v"), ""},
		// Built from a checkout, the helper's own module has no version.
		{"github.com/ferrypkg/ferry/sbomgen", "*"},
	} {
		q, err := bom.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		hits, err := (&bomscan.Scanner{Source: bomscan.PackageSource(r, "")}).Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hits {
			if h.Image != ref {
				t.Errorf("%s: hit in image %s", c.query, h.Image)
			}
			got = append(got, h.Component.Version)
		}
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("%s found %v, want nothing", c.query, got)
		case c.want != "" && (len(got) != 1 || (c.want != "*" && got[0] != c.want)):
			t.Errorf("%s found %v, want %s", c.query, got, c.want)
		}
	}
}
