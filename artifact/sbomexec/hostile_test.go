package sbomexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/sbomexec"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// hostileImages are images built to cost an SBOM tool memory, time or
// disk, each a few MB.
var hostileImages = []struct {
	name string
	make func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error)
}{
	{"dpkg status of 200,000 packages", func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error) {
		return fixture.DpkgFloodImage(ctx, dst, p, 200_000)
	}},
	{"jar manifest of 1.5 GiB", func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error) {
		return fixture.JarManifestImage(ctx, dst, p, 3<<29)
	}},
	{"nested jar of 1.5 GiB", func(ctx context.Context, dst content.Pusher, p ocispec.Platform) (ocispec.Descriptor, error) {
		return fixture.NestedJarImage(ctx, dst, p, 3<<29)
	}},
}

// layers is the size of desc's layers.
func layers(t testing.TB, src content.Fetcher, desc ocispec.Descriptor) int64 {
	var m ocispec.Manifest
	b, err := content.FetchAll(context.Background(), src, desc)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n
}

// TestHostileImagesBounded: the real helper on images built to exhaust it
// is stopped at its limits — memory, time, temporary disk — and the image
// refused with an error wrapping ErrLimit; the helper's peak RSS (the
// kernel's count of the largest child) stays within its memory limit.
func TestHostileImagesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the SBOM helper on hostile images")
	}
	gen, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	gen.TempDir = t.TempDir()
	// Lower than the defaults, so that the test is quick: make bench runs
	// the same images under the defaults (BenchmarkSBOMHostile).
	gen.Limits = sbomexec.Limits{Memory: 384 << 20, Timeout: 30 * time.Second}
	for _, h := range hostileImages {
		t.Run(h.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			desc, err := h.make(ctx, mem, fixture.Platform("linux", "amd64", ""))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = gen.GenerateSBOM(ctx, mem, build.SBOMRequest{Ref: "example.com/hostile:1", Manifest: desc, Created: time.Unix(0, 0)})
			var he *sbomexec.HelperError
			if !errors.As(err, &he) || !errors.Is(err, sbomexec.ErrLimit) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%v, want a one-line ErrLimit", err)
			}
			t.Logf("%s (%d KB of layers): refused in %v, helper's peak RSS %d MiB: %v", h.name, layers(t, mem, desc)>>10, time.Since(start).Round(time.Millisecond), he.PeakRSS>>20, err)
			if he.PeakRSS > gen.Limits.Memory {
				t.Errorf("the helper peaked at %d MiB, limit %d MiB", he.PeakRSS>>20, gen.Limits.Memory>>20)
			}
		})
	}
}

// TestHelperTimeLimit: a helper that runs past its time limit is killed
// with what it started, and the image refused.
func TestHelperTimeLimit(t *testing.T) {
	mem, desc := fakeImage(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	gen := sbomexec.Generator{Path: fakeHelper(t, "sleep 300 & echo $! > "+pidFile+"; wait"), Limits: sbomexec.Limits{Timeout: time.Second}}
	start := time.Now()
	_, err := gen.GenerateSBOM(context.Background(), mem, build.SBOMRequest{Ref: "example.com/slow:1", Manifest: desc})
	if !errors.Is(err, sbomexec.ErrLimit) || !strings.Contains(err.Error(), "the SBOM helper passed its limit of 1s") {
		t.Fatalf("%v, want ErrLimit (time)", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("refused after %v", d)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for pid > 0 && syscall.Kill(pid, 0) == nil {
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); strings.Contains(string(stat), ") Z ") {
			break // a zombie: dead
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the helper's child %d outlived it", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkSBOMHostile (make bench): the images of the issue — a dpkg
// status of 200,000 packages, a jar whose manifest is 1.5 GiB, a nested
// jar of 1.5 GiB — each refused by the real helper under the default
// limits; reports each refusal's time and the helper's peak RSS, and fails
// past artifact.SBOMHelperMemory or artifact.SBOMHelperTimeout.
func BenchmarkSBOMHostile(b *testing.B) {
	gen, err := sbomexectest.Generator()
	if err != nil {
		b.Fatal(err)
	}
	gen.TempDir = b.TempDir()
	for _, h := range hostileImages {
		b.Run(strings.ReplaceAll(h.name, " ", "-"), func(b *testing.B) {
			ctx := context.Background()
			mem := memory.New()
			desc, err := h.make(ctx, mem, fixture.Platform("linux", "amd64", ""))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				start := time.Now()
				_, err := gen.GenerateSBOM(ctx, mem, build.SBOMRequest{Ref: "example.com/hostile:1", Manifest: desc, Created: time.Unix(0, 0)})
				d := time.Since(start)
				var he *sbomexec.HelperError
				if !errors.As(err, &he) || !errors.Is(err, sbomexec.ErrLimit) {
					b.Fatalf("%v, want a refusal at a limit", err)
				}
				b.ReportMetric(d.Seconds(), "refused-s")
				b.ReportMetric(float64(he.PeakRSS>>20), "helper-peak-MiB")
				b.Logf("%s: refused in %v, helper's peak RSS %d MiB: %v", h.name, d.Round(time.Millisecond), he.PeakRSS>>20, err)
				if he.PeakRSS > artifact.SBOMHelperMemory || d > artifact.SBOMHelperTimeout+30*time.Second {
					b.Errorf("over budget: peak %d MiB (limit %d MiB), %v (limit %v)", he.PeakRSS>>20, artifact.SBOMHelperMemory>>20, d, artifact.SBOMHelperTimeout)
				}
			}
		})
	}
}
