package registry_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/internal/testsupport/benchenv"
	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry"
)

// BenchmarkS3Storage measures `ferry registry serve` on S3 (MinIO on
// loopback) against the same on the filesystem, both separate processes:
// a push (POST, one PUT of the whole body) and a GET of one 1 GiB blob on
// each, and the ratio of their times (budget, checked by `make
// bench-storage`: S3 ≤ 1.5× the filesystem for push and for pull). Then
// the aggregate throughput of 4 concurrent GETs of a 64 MiB blob from two
// serve processes on one bucket against one.
func BenchmarkS3Storage(b *testing.B) {
	benchenv.Quiet(b, 4)
	ms := miniotest.Start(b)
	s3Args := func() []string { return []string{"--storage", storageURL(ms.Bucket(b))} }

	const size = 1 << 30
	data := make([]byte, size)
	_, _ = rand.Read(data)
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: size}
	fs := startFerryServe(b, []string{"--root", b.TempDir()}, nil)
	s3 := startFerryServe(b, s3Args(), ms.Env())

	var fsPush, fsPull, s3Push, s3Pull time.Duration
	for b.Loop() {
		fsPush += timed(func() { pushBlob1(b, fs, "bench/fs", desc, data) })
		s3Push += timed(func() { pushBlob1(b, s3, "bench/s3", desc, data) })
		fsPull += timed(func() { getBlob(b, fs, "bench/fs", desc) })
		s3Pull += timed(func() { getBlob(b, s3, "bench/s3", desc) })
	}
	mbs := func(d time.Duration) float64 { return float64(b.N) * size / 1e6 / d.Seconds() }
	b.ReportMetric(mbs(fsPush), "fs-push-MB/s")
	b.ReportMetric(mbs(s3Push), "s3-push-MB/s")
	b.ReportMetric(mbs(fsPull), "fs-pull-MB/s")
	b.ReportMetric(mbs(s3Pull), "s3-pull-MB/s")
	b.ReportMetric(s3Push.Seconds()/fsPush.Seconds(), "push-ratio")
	b.ReportMetric(s3Pull.Seconds()/fsPull.Seconds(), "pull-ratio")

	// Two replicas against one: the same bucket, 4 GETs at once, spread
	// over the replicas or all on one.
	const small = 64 << 20
	blob := data[:small]
	sdesc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(blob), Size: small}
	shared := s3Args()
	r1 := startFerryServe(b, shared, ms.Env())
	r2 := startFerryServe(b, shared, ms.Env())
	pushBlob1(b, r1, "bench/replicas", sdesc, blob)
	parallel := func(bases ...string) float64 {
		const n = 4
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			wg.Go(func() { getBlob(b, bases[i%len(bases)], "bench/replicas", sdesc) })
		}
		wg.Wait()
		return n * small / 1e6 / time.Since(start).Seconds()
	}
	parallel(r1, r2) // warm
	var one, two []float64
	for range 5 {
		one = append(one, parallel(r1))
		two = append(two, parallel(r1, r2))
	}
	b.ReportMetric(median(one), "1-replica-MB/s")
	b.ReportMetric(median(two), "2-replicas-MB/s")
	b.ReportMetric(median(two)/median(one), "replica-ratio")
}

func storageURL(st *registry.S3) string {
	c := *st
	c.AccessKey, c.SecretKey = "", ""
	return c.String()
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// pushBlob1 pushes data to repo at base (oras: POST, then one PUT).
func pushBlob1(b *testing.B, base, repo string, desc ocispec.Descriptor, data []byte) {
	r, err := remote.NewRepository(strings.TrimPrefix(base, "http://") + "/" + repo)
	if err != nil {
		b.Fatal(err)
	}
	r.PlainHTTP = true
	if err := r.Blobs().Push(context.Background(), desc, bytes.NewReader(data)); err != nil {
		b.Fatalf("push to %s: %v", base, err)
	}
}

// benchClient reuses its connections across a benchmark's GETs.
var benchClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// getBlob GETs a blob and checks its size.
func getBlob(b *testing.B, base, repo string, desc ocispec.Descriptor) {
	resp, err := benchClient.Get(fmt.Sprintf("%s/v2/%s/blobs/%s", base, repo, desc.Digest))
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || n != desc.Size {
		b.Fatalf("GET blob from %s: %s, %d bytes, %v", base, resp.Status, n, err)
	}
}
