package definition_test

import (
	"github.com/ferrypkg/ferry/artifact/definition"

	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/confine"
)

const validDef = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: demo
  version: 1.0.0
components:
  - name: web
    images:
      - nginx:1.27
      - ref: ghcr.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
        layout: images
    charts:
      - path: charts/app
      - url: oci://registry.example/charts/db
        version: 1.2.3
    manifests:
      - name: base
        files: [manifests]
    files:
      - source: files/a.conf
        target: /etc/a.conf
        mode: 0600
`

func TestParseDefinition(t *testing.T) {
	def, err := definition.Parse("pkg/ferry.yaml", []byte(validDef))
	if err != nil {
		t.Fatal(err)
	}
	c := def.Components[0]
	if c.Images[0].Ref != "docker.io/library/nginx:1.27" {
		t.Errorf("normalized ref = %q", c.Images[0].Ref)
	}
	if c.Images[1].Tag != "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" || c.Images[1].Layout != "images" {
		t.Errorf("layout image = %+v", c.Images[1])
	}
	if c.Files[0].Mode != 0o600 || !c.Required || def.Dir != "pkg" {
		t.Errorf("file mode %o, required %v, dir %q", c.Files[0].Mode, c.Required, def.Dir)
	}
	if len(def.Platforms) != 1 || def.Platforms[0] != definition.HostPlatform() {
		t.Errorf("default platforms = %v", def.Platforms)
	}
}

func TestParseDefinitionErrors(t *testing.T) {
	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: demo\n  version: 1.0.0\n"
	tests := []struct {
		name, yaml string
		want       string // substring: file:line: field: message
	}{
		{"malformed YAML", "apiVersion: [\n", "ferry.yaml:1: invalid YAML"},
		{"unknown top field", head + "extra: 1\n", "ferry.yaml:6: extra: unknown field"},
		{"unknown component field", head + "components:\n  - name: a\n    image: [x]\n", "ferry.yaml:8: components[0].image: unknown field"},
		{"missing metadata", "apiVersion: ferry.dev/v1alpha1\nkind: Package\n", "ferry.yaml:1: metadata: missing"},
		{"missing name", "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  version: 1.0.0\n", "ferry.yaml:4: metadata.name: missing"},
		{"missing version", "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: demo\n", "ferry.yaml:4: metadata.version: missing"},
		{"bad apiVersion", "apiVersion: v9\nkind: Package\nmetadata:\n  name: demo\n  version: 1\n", "ferry.yaml:1: apiVersion: must be"},
		{"duplicate component", head + "components:\n  - name: a\n  - name: a\n", "ferry.yaml:8: components[1].name: duplicate component name \"a\""},
		{"invalid image ref", head + "components:\n  - name: a\n    images:\n      - \"Not A Ref\"\n", "ferry.yaml:9: components[0].images[0]: invalid image reference"},
		{"uppercase image", head + "components:\n  - name: a\n    images: [\"docker.io/Library/x:1\"]\n", "ferry.yaml:8: components[0].images[0]: invalid image reference"},
		{"chart without source", head + "components:\n  - name: a\n    charts:\n      - version: 1.0.0\n", "ferry.yaml:9: components[0].charts[0]: needs a path"},
		{"chart http url", head + "components:\n  - name: a\n    charts:\n      - url: https://charts.example/x\n        version: 1\n", "ferry.yaml:9: components[0].charts[0].url: unsupported chart source"},
		{"chart url without version", head + "components:\n  - name: a\n    charts:\n      - url: oci://r.example/x\n", "components[0].charts[0].version: missing"},
		{"chart bad namespace", head + "components:\n  - name: a\n    charts:\n      - path: c\n        namespace: Apps_1\n", "ferry.yaml:10: components[0].charts[0].namespace: \"Apps_1\" is not a valid name"},
		{"chart long release name", head + "components:\n  - name: a\n    charts:\n      - path: c\n        releaseName: " + strings.Repeat("a", 54) + "\n", "components[0].charts[0].releaseName: \"aaaa"},
		{"path escapes", head + "components:\n  - name: a\n    charts:\n      - path: ../outside\n", "ferry.yaml:9: components[0].charts[0].path: path \"../outside\" escapes"},
		{"absolute path", head + "components:\n  - name: a\n    files:\n      - source: /etc/passwd\n        target: x\n", "ferry.yaml:9: components[0].files[0].source: path \"/etc/passwd\" must be relative"},
		{"bad mode", head + "components:\n  - name: a\n    files:\n      - source: a\n        target: x\n        mode: rwx\n", "ferry.yaml:11: components[0].files[0].mode"},
		{"bad platform", head + "platforms: [linux]\n", "ferry.yaml:6: platforms[0]: invalid platform"},
		{"duplicate key", head + "components: []\ncomponents: []\n", "ferry.yaml:"},
		{"two documents", head + "---\nfoo: 1\n", "more than one YAML document"},
		{"empty", "", "empty definition"},
		{"bad name", "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: Demo_X\n  version: 1\n", "ferry.yaml:4: metadata.name: \"Demo_X\" is not a valid name"},
		{"repository without url", head + "components:\n  - name: a\n    repositories:\n      - {path: fleet}\n", "ferry.yaml:9: components[0].repositories[0].url: missing"},
		{"repository not a url", head + "components:\n  - name: a\n    repositories:\n      - url: fleet\n", "ferry.yaml:9: components[0].repositories[0].url: \"fleet\" is not a git URL"},
		{"repository password", head + "components:\n  - name: a\n    repositories:\n      - url: https://u:tok@git.example/x.git\n", "components[0].repositories[0].url: https://xxxxx:xxxxx@git.example/x.git carries a password"},
		{"repository scp password", head + "components:\n  - name: a\n    repositories:\n      - url: \"me:hunter2@git.example:o/x.git\"\n", "components[0].repositories[0].url: \"xxxxx:xxxxx@git.example:o/x.git\" is not a git URL"},
		{"repository password with slash", head + "components:\n  - name: a\n    repositories:\n      - url: \"https://me:hunt/er2@git.example/o/x.git\"\n", "components[0].repositories[0].url: \"https://xxxxx@git.example/o/x.git\" is not a git URL"},
		{"chart url password", head + "components:\n  - name: a\n    charts:\n      - url: https://me:hunter2@charts.example/x\n        version: 1\n", "components[0].charts[0].url: unsupported chart source \"https://xxxxx:xxxxx@charts.example/x\""},
		{"repository bad ref", head + "components:\n  - name: a\n    repositories:\n      - url: https://git.example/x.git\n        ref: main~1\n", "ferry.yaml:10: components[0].repositories[0].ref: \"main~1\" is not"},
		{"repository history", head + "components:\n  - name: a\n    repositories:\n      - url: https://git.example/x.git\n        history: all\n", "ferry.yaml:10: components[0].repositories[0].history: must be true or false"},
		{"repository path escapes", head + "components:\n  - name: a\n    repositories:\n      - url: https://git.example/x.git\n        path: ../x\n", "components[0].repositories[0].path: path \"../x\" escapes"},
		{"required not bool", head + "components:\n  - name: a\n    required: yes please\n", "ferry.yaml:8: components[0].required: must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := definition.Parse("ferry.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if strings.Contains(err.Error(), "hunt") {
				t.Errorf("error shows the password: %q", err)
			}
			var de *definition.Error
			if !errors.As(err, &de) {
				t.Errorf("error %T is not a *Error", err)
			}
		})
	}
}

// A definition path that never ends (a device) is refused unread, a
// planted huge file from its size.
func TestLoadDefinitionBounded(t *testing.T) {
	_, err := definition.Load("/dev/zero")
	if !errors.Is(err, confine.ErrNotRegular) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("/dev/zero as a definition: %v", err)
	}
	big := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, definition.MaxSize+1); err != nil {
		t.Fatal(err)
	}
	if _, err := definition.Load(big); !errors.Is(err, confine.ErrTooLarge) {
		t.Fatalf("a definition over the bound: %v", err)
	}
}

// Names, descriptions and targets hold no terminal escape; a target no
// line end either (its readers go a line at a time).
func TestDefinitionRefusesControlCharacters(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"metadata: {name: x, version: 1.0.0, description: \"a\\e[31mred\"}\ncomponents: [{name: c, files: [{source: f, target: /f}]}]\n", `metadata.description: holds the control character "\x1b"`},
		{"metadata: {name: x, version: 1.0.0}\ncomponents: [{name: c, files: [{source: f, target: \"/etc/x\\nfake\"}]}]\n", "invalid target: it holds a control character or a line end"},
	} {
		_, err := definition.Parse("ferry.yaml", []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\n"+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	if _, err := definition.Parse("ferry.yaml", []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: x, version: 1.0.0, description: \"two\\nlines\\tand a tab\"}\ncomponents: [{name: c, files: [{source: f, target: /f}]}]\n")); err != nil {
		t.Errorf("line ends and tabs in a description: %v", err)
	}
}

// TestDefinitionRefusalsNameLongValuesInShort: a value of 1 MiB at a field
// is refused in at most 512 bytes that still name the field and the fault.
func TestDefinitionRefusalsNameLongValuesInShort(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	head := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: demo\n  version: 1.0.0\n"
	comp := head + "components:\n  - name: a\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"name", "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: " + long + "\n  version: 1\n", "metadata.name: \"aaaa"},
		{"kind", "apiVersion: ferry.dev/v1alpha1\nkind: " + long + "\nmetadata:\n  name: demo\n  version: 1\n", "kind: must be"},
		{"platform", head + "platforms: [linux/" + long + ", linux/" + long + "]\n", "platforms[1]: duplicate platform"},
		{"component name", head + "components:\n  - name: " + long + "\n", "components[0].name: \"aaaa"},
		{"image", comp + "    images: [\"" + long + "!\"]\n", "components[0].images[0]: invalid image reference"},
		{"path", comp + "    charts:\n      - path: ../" + long + "\n", "components[0].charts[0].path: path \"../aaa"},
		{"chart url", comp + "    charts:\n      - url: https://" + long + "\n        version: 1\n", "components[0].charts[0].url: unsupported chart source"},
		{"git ref", comp + "    repositories:\n      - url: https://git.example/x.git\n        ref: " + long + "~1\n", "components[0].repositories[0].ref: \"aaaa"},
		{"file mode", comp + "    files:\n      - source: a\n        target: x\n        mode: " + long + "\n", "components[0].files[0].mode"},
		{"policy", comp + "    verify: " + long + "\n", "names policy \"aaaa"},
		{"regexp", head + "imagePolicies:\n  - name: p\n    authorities:\n      - keyless:\n          trustedRoot: r.json\n          identities:\n            - issuer: i\n              subjectRegExp: \"(" + long + "\"\n", "invalid regular expression: missing closing )"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := definition.Parse("ferry.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if msg := err.Error(); len(msg) > 512 || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("refusal of %d bytes %.200q, want at most 512 naming %q", len(msg), msg, tc.want)
			}
		})
	}
}
