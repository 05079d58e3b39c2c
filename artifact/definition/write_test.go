package definition_test

import (
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestMarshalYAML: a definition encodes as the ferry.yaml Parse reads back
// to the same values, defaults left out.
func TestMarshalYAML(t *testing.T) {
	def := definition.Definition{
		Metadata:  definition.Metadata{Name: "shop", Version: "1.0.0"},
		Platforms: []definition.Platform{{OS: "linux", Architecture: "arm64", Variant: "v8"}},
		Components: []definition.Component{{
			Name: "app", Required: true,
			Images:       []definition.Image{{Ref: "nginx:1.27"}, {Ref: "example.com/b:1", Layout: "images"}},
			Charts:       []definition.Chart{{Path: "chart", ReleaseName: "web"}},
			Manifests:    []definition.Manifest{{Name: "m", Files: []string{"m.yaml"}}},
			Files:        []definition.File{{Source: "f", Target: "/f", Mode: 0o644}},
			Repositories: []definition.Repository{{URL: "https://example.com/r.git", History: true}, {URL: "https://example.com/s.git", Ref: "main"}},
		}},
	}
	out, err := yaml.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	const want = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
    name: shop
    version: 1.0.0
platforms:
    - linux/arm64/v8
components:
    - name: app
      required: true
      images:
        - nginx:1.27
        - ref: example.com/b:1
          layout: images
      charts:
        - path: chart
          releaseName: web
      manifests:
        - name: m
          files:
            - m.yaml
      files:
        - source: f
          target: /f
          mode: 0644
      repositories:
        - url: https://example.com/r.git
        - url: https://example.com/s.git
          ref: main
          history: false
`
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	back, err := definition.Parse("ferry.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	if c := back.Components[0]; !c.Required || len(c.Images) != 2 || c.Images[1].Layout != "images" || c.Files[0].Mode != 0o644 ||
		!c.Repositories[0].History || c.Repositories[1].History || back.Platforms[0] != def.Platforms[0] {
		t.Fatalf("parsed back as %+v", back)
	}
	def.ImagePolicies = []definition.ImagePolicy{{Name: "p"}}
	if _, err := yaml.Marshal(def); err == nil {
		t.Fatal("a definition with image policies was written")
	}
}
