package definition_test

import (
	"github.com/ferrypkg/ferry/artifact/definition"

	"os"
	"path/filepath"
	"strings"
	"testing"
)

const editDef = `# the shop, as we ship it
apiVersion: ferry.dev/v1alpha1   # pinned
kind: Package
metadata:
  name: shop # lowercase
  version: "2.4.0"
components:
  # the front end
  - name: app
    images:
      - nginx:1.27   # web
      - ref: docker.io/shop/worker:2.4.0
        layout: images
    charts:
      - path: charts/shop
  - name: db
    required: false # optional
    charts: [{path: charts/db}]
  - name: flow
    images: [a.io/x:1]
  - name: empty
    images:
`

func TestAddImagesToDefinition(t *testing.T) {
	out, err := definition.AddImages("ferry.yaml", []byte(editDef), map[string][]string{
		"app":   {"docker.io/library/nginx:1.27", "docker.io/shop/worker:2.4.0", "ghcr.io/shop/api:2.4.0"},
		"db":    {"docker.io/library/postgres:17"},
		"flow":  {"b.io/y:2"},
		"empty": {"c.io/z:3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `# the shop, as we ship it
apiVersion: ferry.dev/v1alpha1 # pinned
kind: Package
metadata:
  name: shop # lowercase
  version: "2.4.0"
components:
  # the front end
  - name: app
    images:
      - nginx:1.27 # web
      - ref: docker.io/shop/worker:2.4.0
        layout: images
      - ghcr.io/shop/api:2.4.0
    charts:
      - path: charts/shop
  - name: db
    required: false # optional
    images:
      - docker.io/library/postgres:17
    charts: [{path: charts/db}]
  - name: flow
    images: ['a.io/x:1', 'b.io/y:2']
  - name: empty
    images:
      - c.io/z:3
`
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	def, err := definition.Parse("ferry.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(def.Components[0].Images); n != 3 {
		t.Errorf("app has %d images", n)
	}

	// Nothing to add: the bytes as they were, formatting and all.
	same, err := definition.AddImages("ferry.yaml", []byte(editDef), map[string][]string{"app": {"nginx:1.27"}})
	if err != nil || string(same) != editDef {
		t.Errorf("nothing to add changed the file (%v):\n%s", err, same)
	}
	if _, err := definition.AddImages("ferry.yaml", []byte(editDef), map[string][]string{"nope": {"x:1"}}); err == nil || !strings.Contains(err.Error(), `no component "nope"`) {
		t.Errorf("unknown component: %v", err)
	}
	if _, err := definition.AddImages("ferry.yaml", []byte("kind: [\n"), nil); err == nil || !strings.HasPrefix(err.Error(), "ferry.yaml:") {
		t.Errorf("bad definition: %v", err)
	}
}

func TestAddImagesToDefinitionFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ferry.yaml")
	if err := os.WriteFile(p, []byte(editDef), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ferry.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := definition.AddImagesToFile(filepath.Join(dir, "nope"), map[string][]string{"app": {"x.io/y:1"}}); err == nil {
		t.Error("a missing file was accepted")
	}
	if err := definition.AddImagesToFile(dir, map[string][]string{"nope": {"x.io/y:1"}}); err == nil {
		t.Error("an unknown component was accepted")
	}
	if data, _ := os.ReadFile(p); string(data) != editDef {
		t.Fatal("a failed edit changed the file")
	}
	if err := definition.AddImagesToFile(filepath.Join(dir, "link.yaml"), map[string][]string{"app": {"x.io/y:1"}}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	if fi, _ := os.Lstat(filepath.Join(dir, "link.yaml")); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}
	data, _ := os.ReadFile(p)
	if !strings.Contains(string(data), "      - x.io/y:1\n") || !strings.Contains(string(data), "# the front end") {
		t.Errorf("written:\n%s", data)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("%d entries in the folder: a temporary file was left", len(ents))
	}
}

// FuzzAddImagesToDefinition: whatever the definition, an edit is a valid
// definition or an error, never a panic.
func FuzzAddImagesToDefinition(f *testing.F) {
	f.Add([]byte(editDef), "app", "x.io/y:1")
	f.Add([]byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: a, version: '1'}\ncomponents: [{name: c, images: }]\n"), "c", "nginx")
	f.Fuzz(func(t *testing.T, data []byte, comp, ref string) {
		out, err := definition.AddImages("ferry.yaml", data, map[string][]string{comp: {ref}})
		if err != nil {
			return
		}
		if _, err := definition.Parse("ferry.yaml", out); err != nil {
			t.Fatalf("edit gave an invalid definition: %v", err)
		}
	})
}
