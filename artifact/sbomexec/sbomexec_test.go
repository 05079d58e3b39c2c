package sbomexec_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sbomexectest.Cleanup()
	os.Exit(code)
}

// fixtureImage pushes the SBOM fixture image (dpkg status with two
// packages, os-release, a Go binary with build info) into a memory store.
func fixtureImage(t *testing.T) (*memory.Store, ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	bin, err := fixture.GoBinary(ctx, t.TempDir(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	desc, err := fixture.SBOMImage(ctx, mem, fixture.Platform("linux", "amd64", ""), bin)
	if err != nil {
		t.Fatal(err)
	}
	return mem, desc
}

// TestGenerateSBOM: the real helper's documents, in both formats, list
// the fixture's packages and state the request's time; the same request
// gives the same bytes; the temporary layout is gone after.
func TestGenerateSBOM(t *testing.T) {
	gen, err := sbomexectest.Generator()
	if err != nil {
		t.Fatal(err)
	}
	gen.ToolVersion, gen.TempDir = "test", t.TempDir()
	mem, desc := fixtureImage(t)
	ctx := context.Background()
	for _, c := range []struct {
		format definition.SBOMFormat
		want   []string
	}{
		{"", []string{`"spdxVersion":"SPDX-2.`, `"created":"2023-11-14T22:13:20Z"`, `"Tool: ferry-test"`,
			`"documentNamespace":"https://ferry.dev/spdx/` + desc.Digest.Encoded() + `"`, `"libferry1"`, `"` + fixture.GoModule + `"`}},
		{definition.SBOMFormatCycloneDX, []string{`"bomFormat":"CycloneDX"`, `"timestamp":"2023-11-14T22:13:20Z"`, `"libferry1"`, `"ferry-tools"`}},
	} {
		req := build.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc, Platform: "linux/amd64", Format: c.format, Created: time.Unix(1700000000, 0)}
		doc, err := gen.GenerateSBOM(ctx, mem, req)
		if err != nil {
			t.Fatalf("%q: %v", c.format, err)
		}
		for _, w := range c.want {
			if !bytes.Contains(doc, []byte(w)) {
				t.Errorf("%q: the document has no %s:\n%.400s", c.format, w, doc)
			}
		}
		again, err := gen.GenerateSBOM(ctx, mem, req)
		if err != nil || !bytes.Equal(doc, again) {
			t.Errorf("%q: a second run gave other bytes (%v)", c.format, err)
		}
	}
	if left, _ := os.ReadDir(gen.TempDir); len(left) != 0 {
		t.Errorf("left in TempDir: %v", left)
	}
}

// tamperFetcher returns a layer whose bytes differ from its digest.
type tamperFetcher struct{ *memory.Store }

func (f tamperFetcher) Fetch(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	rc, err := f.Store.Fetch(ctx, d)
	if err != nil || d.MediaType != ocispec.MediaTypeImageLayerGzip {
		return rc, err
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	data[len(data)/2] ^= 1
	return io.NopCloser(bytes.NewReader(data)), nil
}

// TestGenerateChecksBlobs: a layer that does not match its digest is an
// error before the helper runs, not an SBOM of other content.
func TestGenerateChecksBlobs(t *testing.T) {
	mem, desc := fixtureImage(t)
	gen := sbomexec.Generator{Path: fakeHelper(t, "echo ran >&2; exit 1")}
	_, err := gen.GenerateSBOM(context.Background(), tamperFetcher{mem}, build.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc})
	if !errors.Is(err, content.ErrMismatchedDigest) {
		t.Fatalf("a tampered layer: %v, want content.ErrMismatchedDigest", err)
	}
}

// TestGenerateNamesLongMediaTypeInShort: a manifest media type of 1 MiB
// is refused in at most 512 bytes that still name it, the helper unrun.
func TestGenerateNamesLongMediaTypeInShort(t *testing.T) {
	mem, desc := fixtureImage(t)
	desc.MediaType = strings.Repeat("a", 1<<20)
	gen := sbomexec.Generator{Path: fakeHelper(t, "echo ran >&2; exit 1")}
	_, err := gen.GenerateSBOM(context.Background(), mem, build.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc})
	if err == nil || len(err.Error()) > 512 || !strings.Contains(err.Error(), "is not an image manifest") {
		t.Fatalf("%.200v, want at most 512 bytes naming the media type", err)
	}
}

// fakeHelper writes a shell script standing in for the helper.
func fakeHelper(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), sbomexec.HelperName)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGenerateHelper: the helper gets the layout, the manifest and the
// request in its flags and its own TMPDIR; its failures, output that is
// not one document of the format asked for, and a missing helper are
// errors saying so.
func TestGenerateHelper(t *testing.T) {
	mem, desc := fakeImage(t)
	ctx := context.Background()
	req := build.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc, Format: definition.SBOMFormatCycloneDX, Created: time.Unix(0, 0)}

	args := filepath.Join(t.TempDir(), "args")
	// The script records its arguments and checks the layout: index.json
	// and the manifest's blob, under TMPDIR.
	gen := sbomexec.Generator{Path: fakeHelper(t, `echo "$@" > `+args+`
case "$2" in "$TMPDIR"/*) ;; *) echo "layout $2 not under TMPDIR $TMPDIR" >&2; exit 1;; esac
test -f "$2/index.json" && test -f "$2/blobs/sha256/${4#sha256:}" || { echo "no layout" >&2; exit 1; }
echo '{"bomFormat":"CycloneDX","specVersion":"1.6"}'`), ToolVersion: "v9"}
	doc, err := gen.GenerateSBOM(ctx, mem, req)
	if err != nil || string(doc) != "{\"bomFormat\":\"CycloneDX\",\"specVersion\":\"1.6\"}\n" {
		t.Fatalf("%v: %q", err, doc)
	}
	got, _ := os.ReadFile(args)
	if want := " --manifest " + desc.Digest.String() + " --format cyclonedx-json --created 1970-01-01T00:00:00Z --ref example.com/app:1.0 --tool-version v9\n"; !strings.HasPrefix(string(got), "--layout /") || !strings.HasSuffix(string(got), want) {
		t.Errorf("arguments %q, want --layout DIR%s", got, want)
	}

	for _, c := range []struct {
		name, script string
		format       definition.SBOMFormat
		want         string
	}{
		{"exit 1", "echo warming up >&2; echo 'ferry-sbom: read image: no such layer' >&2; exit 1", "", "ferry-sbom: read image: no such layer (exit status 1)"},
		{"not JSON", "echo 'not json'", "", "its output is not a JSON document"},
		{"two documents", `echo '{"spdxVersion":"SPDX-2.3"} {}'`, "", "more than one JSON document"},
		{"other format", `echo '{"bomFormat":"CycloneDX"}'`, definition.SBOMFormatSPDX, `its output is not an SPDX document (spdxVersion "")`},
		{"empty", "exit 0", definition.SBOMFormatCycloneDX, "its output is not a JSON document: EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := req
			req.Format = c.format
			_, err := sbomexec.Generator{Path: fakeHelper(t, c.script)}.GenerateSBOM(ctx, mem, req)
			var he *sbomexec.HelperError
			if !errors.As(err, &he) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want a HelperError with %q", err, c.want)
			}
		})
	}

	missing := filepath.Join(t.TempDir(), "ferry-sbom")
	if _, err := (sbomexec.Generator{Path: missing}).GenerateSBOM(ctx, mem, req); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing helper: %v", err)
	}
	req.Manifest.MediaType = ocispec.MediaTypeImageIndex
	if _, err := gen.GenerateSBOM(ctx, mem, req); err == nil || !strings.Contains(err.Error(), "is not an image manifest") {
		t.Errorf("an index: %v", err)
	}
}

// fakeImage pushes a small image (one layer, no Go binary to build).
func fakeImage(t *testing.T) (*memory.Store, ocispec.Descriptor) {
	t.Helper()
	mem := memory.New()
	desc, err := fixture.PushImage(context.Background(), mem, fixture.Platform("linux", "amd64", ""),
		[]fixture.Layer{fixture.FilesLayer([]fixture.File{{Name: "etc/hello", Data: []byte("hi\n"), Mode: 0o644}})})
	if err != nil {
		t.Fatal(err)
	}
	return mem, desc
}

// TestFindHelper: on PATH when not beside the executable; else an error
// wrapping ErrHelperNotFound.
func TestFindHelper(t *testing.T) {
	dir := filepath.Dir(fakeHelper(t, "exit 0"))
	t.Setenv("PATH", dir)
	if p, err := sbomexec.FindHelper(); err != nil || p != filepath.Join(dir, sbomexec.HelperName) {
		t.Errorf("on PATH: %q, %v", p, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := sbomexec.FindHelper(); !errors.Is(err, sbomexec.ErrHelperNotFound) {
		t.Errorf("nowhere: %v", err)
	}
	if _, err := (sbomexec.Generator{}).GenerateSBOM(context.Background(), memory.New(), build.SBOMRequest{Manifest: ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest}}); !errors.Is(err, sbomexec.ErrHelperNotFound) {
		t.Errorf("the zero Generator, no helper: %v", err)
	}
}
