package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// maxDeltaRatio is the budget of issue 33: a v1 → v2 update where one of
// four images changed carries at most 1.05 times the changed bytes.
const maxDeltaRatio = 1.05

// BenchmarkDelta: v1 of four images (a shared base layer and one of their
// own each, FERRY_BENCH_DELTA_MIB MiB per layer, default 16), v2 with the
// last image's own layer changed. The receipt of a registry holding v1, the
// delta of v2 against it, and the push that completes v2 there (every
// blob left out read back and re-hashed). Fails when the delta archive is
// more than maxDeltaRatio times the changed image's new bytes (its
// manifest, config and layer).
func BenchmarkDelta(b *testing.B) {
	ctx := context.Background()
	mib := envInt("FERRY_BENCH_DELTA_MIB", 16)
	pair := makeDeltaPair(b, mib<<20, nil)
	for b.Loop() {
		host := registrytest.Host(registrytest.NewServer(b, registry.Config{RootDir: b.TempDir()}))
		start := time.Now()
		if _, err := artifact.Push(ctx, openPkg(b, pair.V1), host+"/app:1.0.0", artifact.PushOptions{}); err != nil {
			b.Fatal(err)
		}
		v1Took := time.Since(start)
		start = time.Now()
		rc, err := artifact.HaveRegistry(ctx, registryOf(b, host), host, "")
		if err != nil {
			b.Fatal(err)
		}
		receiptTook := time.Since(start)
		data, _ := rc.Marshal()
		out := filepath.Join(b.TempDir(), "update.tar.zst")
		start = time.Now()
		res, err := artifact.Delta(ctx, openPkg(b, pair.V2), rc, out, artifact.DeltaOptions{})
		if err != nil {
			b.Fatal(err)
		}
		deltaTook := time.Since(start)
		start = time.Now()
		if _, err := artifact.Push(ctx, openPkg(b, out), host+"/app:2.0.0", artifact.PushOptions{}); err != nil {
			b.Fatal(err)
		}
		pushTook := time.Since(start)
		full := fileSize(b, pair.V2)
		ratio := float64(res.Size) / float64(pair.Changed)
		b.ReportMetric(ratio, "delta/changed")
		b.ReportMetric(float64(res.Size)/float64(full), "delta/full")
		b.ReportMetric(float64(len(data)), "receipt-bytes")
		b.ReportMetric(receiptTook.Seconds(), "receipt-s")
		b.ReportMetric(deltaTook.Seconds(), "delta-s")
		b.ReportMetric(pushTook.Seconds(), "complete-s")
		b.ReportMetric(v1Took.Seconds(), "push-v1-s")
		b.Logf("layers %d MiB: changed %d bytes, delta archive %d bytes (%.4f×; %d blobs carried, %d left out, %d bytes), v2 whole %d bytes; receipt %d bytes in %s, delta in %s, push completing v2 (%d bytes read back) in %s; push of v1 whole in %s",
			mib, pair.Changed, res.Size, ratio, res.Carried, res.Omitted, res.OmittedSize, full, len(data), receiptTook.Round(time.Millisecond), deltaTook.Round(time.Millisecond), res.OmittedSize, pushTook.Round(time.Millisecond), v1Took.Round(time.Millisecond))
		if ratio > maxDeltaRatio {
			b.Fatalf("the delta is %.4f times the changed bytes, over the budget of %.2f", ratio, maxDeltaRatio)
		}
	}
}

func fileSize(b testing.TB, p string) int64 {
	b.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// maxDeltaMissingRatio is the budget of issue 49: refusing a delta whose
// blobs left out are missing costs no more in a registry of
// deltaRepositories repositories than in an empty one (1.5×, for noise;
// it asks the destination repository only, one batch).
const maxDeltaMissingRatio = 1.5

// BenchmarkDeltaMissing: a delta listing deltaListed (26,000) blobs that
// are nowhere, pushed into an empty registry and into one of
// deltaRepositories (1,000) repositories; both refusals timed. Fails when
// the second takes more than maxDeltaMissingRatio times the first.
func BenchmarkDeltaMissing(b *testing.B) {
	path := manyMissingDelta(b, deltaListed)
	for b.Loop() {
		empty := registrytest.New(b)
		full := registrytest.New(b)
		manyRepositories(b, full, deltaRepositories)
		// Each pushed into once before it is timed: connections and caches
		// warm alike.
		completeMissing(b, empty, path, deltaListed)
		completeMissing(b, full, path, deltaListed)
		emptyTook := completeMissing(b, empty, path, deltaListed)
		fullTook := completeMissing(b, full, path, deltaListed)
		ratio := fullTook.Seconds() / emptyTook.Seconds()
		b.ReportMetric(emptyTook.Seconds(), "empty-s")
		b.ReportMetric(fullTook.Seconds(), "full-s")
		b.ReportMetric(ratio, "full/empty")
		b.Logf("a delta listing %d missing blobs refused in %s by an empty registry, in %s by one of %d repositories (%.2f×)",
			deltaListed, emptyTook.Round(time.Millisecond), fullTook.Round(time.Millisecond), deltaRepositories, ratio)
		if ratio > maxDeltaMissingRatio {
			b.Fatalf("refused %.2f times slower in a registry of %d repositories than in an empty one, over the budget of %.1f", ratio, deltaRepositories, maxDeltaMissingRatio)
		}
	}
}
