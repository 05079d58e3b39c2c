package bom_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sbomexectest.Cleanup()
	os.Exit(code)
}

// ApkPackages are the packages of the Alpine fixture image's apk database.
var apkPackages = []struct{ Name, Version, License string }{
	{"musl", "1.2.4-r2", "MIT"},
	{"busybox", "1.36.1-r15", "GPL-2.0-only"},
}

// apkInstalled renders /lib/apk/db/installed listing apkPackages.
func apkInstalled() []byte {
	var b bytes.Buffer
	for _, p := range apkPackages {
		b.WriteString("C:Q1AAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")
		b.WriteString("P:" + p.Name + "\nV:" + p.Version + "\nA:x86_64\nS:1024\nI:4096\n")
		b.WriteString("T:a package of the SBOM fixture\nU:https://ferry.dev\nL:" + p.License + "\no:" + p.Name + "\n")
		b.WriteString("m:Ferry Tests <tests@ferry.dev>\nt:1700000000\nc:0000000000000000000000000000000000000000\n\n")
	}
	return b.Bytes()
}

const alpineRelease = "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.19.1\nPRETTY_NAME=\"Alpine Linux v3.19\"\n"

// realDocs are SBOMs the ferry-sbom helper (Syft) made of two fixture
// images: a Debian one (dpkg status, a Go binary with build info) and an
// Alpine one (apk database, the same binary); made once per process.
type realDocs struct {
	// SPDX, CycloneDX and Syft hold each image's document, Debian first.
	SPDX, CycloneDX, Syft [2][]byte
}

var real struct {
	once sync.Once
	docs realDocs
	err  error
}

// makeRealDocs runs the helper on both fixture images in both formats, and
// has Syft itself convert each SPDX document to Syft JSON (a program run in
// module sbomgen, whose dependencies hold Syft), the format the helper
// does not write but Zarf packages carry.
func makeRealDocs(t *testing.T) realDocs {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the SBOM helper")
	}
	real.once.Do(func() { real.docs, real.err = buildRealDocs() })
	if real.err != nil {
		t.Fatal(real.err)
	}
	return real.docs
}

func buildRealDocs() (realDocs, error) {
	var docs realDocs
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bom-real-")
	if err != nil {
		return docs, err
	}
	defer os.RemoveAll(dir)
	gen, err := sbomexectest.Generator()
	if err != nil {
		return docs, err
	}
	gen.ToolVersion, gen.TempDir = "test", dir
	bin, err := fixture.GoBinary(ctx, dir, "amd64")
	if err != nil {
		return docs, err
	}
	mem := memory.New()
	plat := fixture.Platform("linux", "amd64", "")
	debian, err := fixture.SBOMImage(ctx, mem, plat, bin)
	if err != nil {
		return docs, err
	}
	alpine, err := fixture.PushImage(ctx, mem, plat, []fixture.Layer{fixture.FilesLayer([]fixture.File{
		{Name: "etc/os-release", Data: []byte(alpineRelease), Mode: 0o644},
		{Name: "lib/apk/db/installed", Data: apkInstalled(), Mode: 0o644},
		{Name: "usr/local/bin/hello", Data: bin, Mode: 0o755},
	})})
	if err != nil {
		return docs, err
	}
	for i, m := range []ocispec.Descriptor{debian, alpine} {
		for _, f := range []definition.SBOMFormat{definition.SBOMFormatSPDX, definition.SBOMFormatCycloneDX} {
			req := build.SBOMRequest{Ref: "example.com/app:1.0", Manifest: m, Platform: "linux/amd64", Format: f, Created: time.Unix(1700000000, 0)}
			doc, err := gen.GenerateSBOM(ctx, mem, req)
			if err != nil {
				return docs, err
			}
			if f == definition.SBOMFormatSPDX {
				docs.SPDX[i] = doc
			} else {
				docs.CycloneDX[i] = doc
			}
		}
		if docs.Syft[i], err = toSyftJSON(dir, docs.SPDX[i]); err != nil {
			return docs, err
		}
	}
	if d := os.Getenv("BOM_DUMP"); d != "" {
		for i := range 2 {
			_ = os.WriteFile(filepath.Join(d, []string{"debian", "alpine"}[i]+".spdx.json"), docs.SPDX[i], 0o644)
			_ = os.WriteFile(filepath.Join(d, []string{"debian", "alpine"}[i]+".cdx.json"), docs.CycloneDX[i], 0o644)
			_ = os.WriteFile(filepath.Join(d, []string{"debian", "alpine"}[i]+".syft.json"), docs.Syft[i], 0o644)
		}
	}
	return docs, nil
}

// syftConvert is a program that decodes an SBOM from standard input with
// Syft and writes it as Syft JSON.
const syftConvert = `package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/anchore/syft/syft/format"
	"github.com/anchore/syft/syft/format/syftjson"
)

func main() {
	doc, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(1)
	}
	s, _, _, err := format.Decode(bytes.NewReader(doc))
	if err != nil || s == nil {
		fmt.Fprintln(os.Stderr, "decode:", err)
		os.Exit(1)
	}
	if err := syftjson.NewFormatEncoder().Encode(os.Stdout, *s); err != nil {
		fmt.Fprintln(os.Stderr, "encode:", err)
		os.Exit(1)
	}
}
`

// toSyftJSON converts doc with Syft's own decoder and Syft JSON encoder.
func toSyftJSON(dir string, doc []byte) ([]byte, error) {
	src := filepath.Join(dir, "syftconvert", "main.go")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(src, []byte(syftConvert), 0o644); err != nil {
		return nil, err
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "run", "-trimpath", src)
	cmd.Dir = filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "sbomgen")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	cmd.Stdin = bytes.NewReader(doc)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("convert to Syft JSON: %v: %s", err, stderr.Bytes())
	}
	return out, nil
}
