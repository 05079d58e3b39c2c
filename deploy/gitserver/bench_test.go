package gitserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrypkg/ferry/deploy/gitserver"
)

// benchSource is a repository of 40 commits, each changing 25 of its 500
// files of 4 KiB (text).
func benchSource(b *testing.B) source {
	b.Helper()
	dir := b.TempDir()
	mustGit(b, dir, "init", "-q", "-b", "main")
	for c := range 40 {
		for f := range 500 {
			if c > 0 && f%20 != c%20 {
				continue
			}
			p := filepath.Join(dir, fmt.Sprintf("d%02d/f%03d.yaml", f%25, f))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			body := bytes.Repeat([]byte(fmt.Sprintf("key%d: value %d %d\n", f, c, f)), 4096/24)
			if err := os.WriteFile(p, body, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		mustGit(b, dir, "add", "-A")
		mustGit(b, dir, "commit", "-q", "-m", fmt.Sprint("commit ", c))
	}
	return source{dir: dir, second: mustGit(b, dir, "rev-parse", "HEAD")}
}

// BenchmarkIndex: a new server's first request, which indexes the bundle
// (in memory and in a cache directory).
func BenchmarkIndex(b *testing.B) {
	src := benchSource(b)
	repo, _ := carried(b, src, "main")
	rc, _ := repo.Bundle(context.Background())
	var n bytes.Buffer
	n.ReadFrom(rc)
	b.Logf("bundle: %d bytes", n.Len())
	for _, mode := range []string{"memory", "dir"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				var opts []gitserver.Option
				if mode == "dir" {
					opts = append(opts, gitserver.WithCacheDir(b.TempDir()))
				}
				url, _ := serve(b, lookupOf(repo), opts...)
				resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(err, resp.Status)
				}
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkClone: Debian's git cloning from a warm server, whole and
// shallow, protocol v2, from memory and from a cache directory.
func BenchmarkClone(b *testing.B) {
	src := benchSource(b)
	repo, _ := carried(b, src, "main")
	for _, mode := range []string{"memory", "dir"} {
		var opts []gitserver.Option
		if mode == "dir" {
			opts = append(opts, gitserver.WithCacheDir(b.TempDir()))
		}
		url, _ := serve(b, lookupOf(repo), opts...)
		mustGit(b, "", "ls-remote", url) // index
		for _, depth := range []string{"full", "depth1"} {
			b.Run(mode+"/"+depth, func(b *testing.B) {
				for b.Loop() {
					args := []string{"clone", "-q", "--no-checkout"}
					if depth == "depth1" {
						args = append(args, "--depth", "1")
					}
					mustGit(b, "", append(args, url, filepath.Join(b.TempDir(), "c"))...)
				}
			})
		}
	}
}
