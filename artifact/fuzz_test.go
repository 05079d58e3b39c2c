package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
)

// FuzzParseDefinition: the parser never panics, and every error it returns
// is a one-line *DefinitionError.
//
//	go test ./artifact -run '^$' -fuzz FuzzParseDefinition -fuzztime 60s
func FuzzParseDefinition(f *testing.F) {
	f.Add([]byte(validDef))
	f.Add([]byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: a, version: '1'}\nplatforms: [linux/arm64/v8]\n"))
	f.Add([]byte("components: [{name: a, images: [{ref: x, layout: ../y}]}]"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		def, err := artifact.ParseDefinition("ferry.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ferry.yaml") {
				t.Fatalf("error does not name the file: %q", err)
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

// FuzzReadArchive: the reader never panics on arbitrary archive bytes, and
// never accepts an archive whose blobs do not hold their digests.
//
//	go test ./artifact -run '^$' -fuzz FuzzReadArchive -fuzztime 60s
func FuzzReadArchive(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/archive/*.tar")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err == nil {
			f.Add(b)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "ferry.json", Size: 2, Mode: 0o644, Typeflag: tar.TypeReg})
	tw.Write([]byte("{}"))
	tw.Close()
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f.tar")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := artifact.Open(context.Background(), p)
		if err != nil {
			return
		}
		rep, err := artifact.Inspect(context.Background(), r, nil)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if rep.Root == "" || rep.Name == "" {
			t.Fatalf("accepted a package without root or name")
		}
	})
}
