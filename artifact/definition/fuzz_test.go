package definition_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// FuzzParseDefinition: the parser never panics, and every error it returns
// is a one-line *definition.Error.
//
//	go test ./artifact/definition -run '^$' -fuzz FuzzParseDefinition -fuzztime 60s
func FuzzParseDefinition(f *testing.F) {
	f.Add([]byte(validDef))
	f.Add([]byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: a, version: '1'}\nplatforms: [linux/arm64/v8]\n"))
	f.Add([]byte("components: [{name: a, images: [{ref: x, layout: ../y}]}]"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: a, version: '1'}\ncomponents: [{name: c, findImages: true, charts: [{path: c}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := definition.Parse("ferry.yaml", data)
		if err != nil {
			var de *definition.Error
			if !errors.As(err, &de) || de.File != "ferry.yaml" || !strings.HasPrefix(err.Error(), "ferry.yaml") {
				t.Fatalf("error is not a *definition.Error naming the file: %q", err)
			}
			return
		}
		if def.Metadata.Name == "" || def.Metadata.Version == "" || len(def.Platforms) == 0 {
			t.Fatalf("accepted an incomplete definition: %+v", def)
		}
		for _, c := range def.Components {
			for _, m := range c.Manifests {
				for _, p := range m.Files {
					if !filepath.IsLocal(p) {
						t.Fatalf("accepted escaping path %q", p)
					}
				}
			}
			for _, fd := range c.Files {
				if !filepath.IsLocal(fd.Source) {
					t.Fatalf("accepted escaping path %q", fd.Source)
				}
			}
		}
	})
}
