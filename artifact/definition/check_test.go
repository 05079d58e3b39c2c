package definition_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestCheckFindsEveryMistake: Check goes on past the first mistake and
// names each by line and field, once; what Load refuses at the first.
func TestCheckFindsEveryMistake(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ferry.yaml")
	body := `apiVersion: ferry.dev/v1alpha1
kind: Pakage
metadata:
  name: Demo
  version: 1.0.0
colour: blue
components:
  - name: web
    images:
      - "nginx:1.27 "
    charts:
      - path: charts/app
        bogus: 1
  - name: [x]
    required: maybe
  - name: web
    verify: strict
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	def, problems := definition.Check(dir)
	var got []string
	for _, p := range problems {
		got = append(got, strings.TrimPrefix(p.Error(), path))
	}
	want := []string{
		`:2: kind: must be "Package", got "Pakage"`,
		`:4: metadata.name: "Demo" is not a valid name (lowercase letters, digits, '-' and '.')`,
		`:6: colour: unknown field`,
		`:10: components[0].images[0]: invalid image reference "nginx:1.27 "`,
		`:13: components[0].charts[0].bogus: unknown field`,
		`:14: components[1].name: must be a string`,
		`:15: components[1].required: must be true or false`,
		`:16: components[2].name: duplicate component name "web" (also components[0])`,
		`:16: components[2].verify: names policy "strict", which imagePolicies does not define`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if def == nil {
		t.Fatal("no definition read past the mistakes")
	}
	if _, err := definition.Load(dir); err == nil || !strings.HasSuffix(err.Error(), want[1]) {
		t.Errorf("Load: %v, want the first problem", err)
	}
}

// TestCheckOfAGoodDefinition: no problem, and the definition Load reads.
func TestCheckOfAGoodDefinition(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(validDef), 0o644); err != nil {
		t.Fatal(err)
	}
	def, problems := definition.Check(dir)
	if len(problems) != 0 || def == nil || len(def.Components[0].Images) != 2 {
		t.Fatalf("Check: %v, %+v", problems, def)
	}
}
