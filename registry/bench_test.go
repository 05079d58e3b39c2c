package registry_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// BenchmarkBlobGetRatio measures blob GET throughput of `ferry registry
// serve` and of Debian's docker-registry (distribution 2.8), both separate
// processes on filesystem storage serving the same 64 MiB blob over loopback
// TCP. GETs alternate between the two so load from anything else on the
// machine hits both alike; it reports each registry's median MB/s and their
// ratio (budget, checked by `make bench-registry`: ferry ≥ 0.9×).
// FERRY_BIN names the ferry binary; otherwise it is built.
func BenchmarkBlobGetRatio(b *testing.B) {
	benchenv.Quiet(b, 4)
	const size = 64 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: size}

	ferry := getter(b, startFerryServe(b, []string{"--root", b.TempDir()}, nil), desc, data)
	dist := getter(b, registrytest.StartDockerRegistry(b), desc, data)
	ferry() // warm the page cache and the connections
	dist()

	var tf, td []float64
	b.SetBytes(2 * size)
	b.ResetTimer()
	i := 0
	for b.Loop() {
		first, second, t1, t2 := ferry, dist, &tf, &td
		if i%2 == 1 {
			first, second, t1, t2 = dist, ferry, &td, &tf
		}
		*t1 = append(*t1, first())
		*t2 = append(*t2, second())
		i++
	}
	b.StopTimer()
	mf, md := median(tf), median(td)
	b.ReportMetric(mf, "ferry-MB/s")
	b.ReportMetric(md, "dist28-MB/s")
	b.ReportMetric(mf/md, "ratio")
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// getter pushes the blob and returns a function that GETs it once and
// returns the throughput in MB/s.
func getter(b *testing.B, base string, desc ocispec.Descriptor, data []byte) func() float64 {
	repo, err := remote.NewRepository(strings.TrimPrefix(base, "http://") + "/bench/blob")
	if err != nil {
		b.Fatal(err)
	}
	repo.PlainHTTP = true
	if err := repo.Push(context.Background(), desc, bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	return func() float64 {
		start := time.Now()
		getBlob(b, base, "bench/blob", desc)
		return float64(desc.Size) / 1e6 / time.Since(start).Seconds()
	}
}

// startFerryServe runs `ferry registry serve` with storageArgs (and env
// added to its environment) on a free loopback port.
func startFerryServe(b *testing.B, storageArgs, env []string) string {
	bin := os.Getenv("FERRY_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "ferry")
		_, file, _, _ := runtime.Caller(0)
		build := exec.Command("go", "build", "-o", bin, "./cmd/ferry")
		build.Dir = filepath.Join(filepath.Dir(file), "..")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build ./cmd/ferry: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, append(append([]string{"registry", "serve"}, storageArgs...), "--addr", "127.0.0.1:0", "--output", "json")...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("reading the serve address: %v", err)
	}
	var info struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &info); err != nil || info.URL == "" {
		b.Fatalf("serve printed %q", line)
	}
	return info.URL
}
