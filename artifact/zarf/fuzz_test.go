package zarf_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
)

// Any zarf.yaml gives an error or a valid ferry definition, never a panic.
func FuzzConvert(f *testing.F) {
	full, err := os.ReadFile("testdata/full/zarf.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte("kind: ZarfPackageConfig\nmetadata: {name: a}\ncomponents: [{name: b, images: [nginx], repos: ['https://h/r.git@v1']}]\n"))
	f.Add([]byte("kind: ZarfPackageConfig\nmetadata: &m {name: a}\ncomponents: [{<<: *m, only: {flavor: x}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		type result struct {
			res *zarf.Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := zarf.Convert(filepath.Join(dir, "zarf.yaml"), data, zarf.ConvertOptions{Set: map[string]string{"VERSION": "1"}})
			done <- result{res, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Convert hangs on %q", data)
		}
		res, err := r.res, r.err
		if err != nil {
			return
		}
		if _, err := definition.Parse(filepath.Join(dir, "ferry.yaml"), res.Definition); err != nil {
			t.Fatalf("an invalid definition: %v\n%s", err, res.Definition)
		}
	})
}
