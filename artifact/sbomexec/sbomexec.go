// Package sbomexec makes the SBOMs of a package's images with the ferry-sbom
// helper: it implements artifact.SBOMGenerator by copying the image
// manifest, its config and its layers into a temporary OCI layout (each
// blob checked against its descriptor), running the helper on it and
// checking the document it writes. The helper (module sbomgen, built by
// `make build` into bin/ beside ferry) links Syft, which ferry's binaries
// do not: Syft would add some 60 MB to the full binary, which is also the
// in-cluster agent's.
package sbomexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/sibling"
)

// HelperName is the file name of the helper binary.
const HelperName = "ferry-sbom"

// ErrHelperNotFound is returned (wrapped) when the helper is neither beside
// the running executable nor on PATH.
var ErrHelperNotFound = errors.New(HelperName + " not found")

// maxManifestSize bounds the image manifest read into memory.
const maxManifestSize = 4 << 20

// maxStderr bounds what is kept of the helper's standard error.
const maxStderr = 64 << 10

// FindHelper returns the helper binary: HelperName beside the running
// executable (symbolic links followed, as when bin/ferry-full is linked
// into /usr/local/bin), else on PATH. The error wraps ErrHelperNotFound
// when it is in neither.
func FindHelper() (string, error) {
	p, exe, err := sibling.Find(HelperName)
	if p == "" && err == nil {
		return "", fmt.Errorf("%w beside %s nor on PATH", ErrHelperNotFound, exe)
	}
	return p, err
}

// Generator makes SBOMs by running the helper, one run per image manifest.
// The zero value finds the helper with FindHelper at each call.
type Generator struct {
	// Path is the helper binary; if empty, FindHelper's.
	Path string
	// ToolVersion is the version of ferry named as the documents' creator
	// tool ("ferry-<version>"); if empty, "devel".
	ToolVersion string
	// TempDir is where the image's layout and the helper's unpacked layers
	// go while an SBOM is made (removed after); if empty, os.TempDir().
	TempDir string
}

var _ artifact.SBOMGenerator = Generator{}

// GenerateSBOM implements artifact.SBOMGenerator.
func (g Generator) GenerateSBOM(ctx context.Context, src content.Fetcher, req artifact.SBOMRequest) ([]byte, error) {
	if req.Manifest.MediaType != ocispec.MediaTypeImageManifest && req.Manifest.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
		return nil, fmt.Errorf("%s: media type %q is not an image manifest", req.Manifest.Digest, req.Manifest.MediaType)
	}
	format, err := artifact.ParseSBOMFormat(string(req.Format))
	if err != nil {
		return nil, err
	}
	helper := g.Path
	if helper == "" {
		if helper, err = FindHelper(); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp(g.TempDir, "ferry-sbom-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	layout := filepath.Join(tmp, "layout")
	if err := spool(ctx, src, req.Manifest, layout); err != nil {
		return nil, err
	}
	version := g.ToolVersion
	if version == "" {
		version = "devel"
	}
	args := []string{
		"--layout", layout, "--manifest", req.Manifest.Digest.String(), "--format", string(format),
		"--created", req.Created.UTC().Format(time.RFC3339), "--ref", req.Ref, "--tool-version", version,
	}
	doc, err := run(ctx, helper, args, tmp)
	if err != nil {
		return nil, err
	}
	if err := check(doc, format); err != nil {
		return nil, &HelperError{Path: helper, Err: err}
	}
	return doc, nil
}

// spool copies the image manifest desc and its config and layers from src
// into a new OCI layout at dir, the manifest tagged there; oras's store
// checks every blob against its descriptor.
func spool(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor, dir string) error {
	store, err := oci.New(dir)
	if err != nil {
		return err
	}
	if desc.Size > maxManifestSize {
		return fmt.Errorf("manifest %s: %d bytes is more than %d", desc.Digest, desc.Size, maxManifestSize)
	}
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	raw, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return fmt.Errorf("fetch manifest %s: %w", desc.Digest, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := copyBlob(ctx, src, store, d); err != nil {
			return err
		}
	}
	if err := store.Push(ctx, desc, bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	return store.Tag(ctx, desc, "image")
}

func copyBlob(ctx context.Context, src content.Fetcher, dst content.Pusher, d ocispec.Descriptor) error {
	d = ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
	rc, err := src.Fetch(ctx, d)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", d.Digest, err)
	}
	defer rc.Close()
	if err := dst.Push(ctx, d, rc); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

// run runs the helper with args, its temporary files in tmp, and returns
// what it writes to standard output, at most artifact.MaxSBOMSize bytes.
func run(ctx context.Context, helper string, args []string, tmp string) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, helper, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr := &capped{max: maxStderr}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("SBOM helper: %w", err) // names the helper
	}
	doc, readErr := io.ReadAll(io.LimitReader(stdout, artifact.MaxSBOMSize+1))
	if len(doc) > artifact.MaxSBOMSize {
		cancel()
		_ = cmd.Wait()
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("its document is more than %d bytes", artifact.MaxSBOMSize)}
	}
	err = cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, &HelperError{Path: helper, Err: err, Stderr: stderr.lastLine()}
	case readErr != nil:
		return nil, &HelperError{Path: helper, Err: readErr}
	}
	return doc, nil
}

// check checks that doc is one JSON document of format.
func check(doc []byte, format artifact.SBOMFormat) error {
	var head struct {
		SPDXVersion string `json:"spdxVersion"`
		BOMFormat   string `json:"bomFormat"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	if err := dec.Decode(&head); err != nil {
		return fmt.Errorf("its output is not a JSON document: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("its output is more than one JSON document")
	}
	switch {
	case format == artifact.SBOMFormatCycloneDX && head.BOMFormat != "CycloneDX":
		return fmt.Errorf("its output is not a CycloneDX document (bomFormat %q)", head.BOMFormat)
	case format == artifact.SBOMFormatSPDX && !strings.HasPrefix(head.SPDXVersion, "SPDX-"):
		return fmt.Errorf("its output is not an SPDX document (spdxVersion %q)", head.SPDXVersion)
	}
	return nil
}

// HelperError is a failed run of the helper, or output of it that is not
// an SBOM of the format asked for.
type HelperError struct {
	// Path is the helper binary.
	Path string
	// Stderr is the last line the helper wrote to standard error, if any.
	Stderr string
	Err    error
}

func (e *HelperError) Error() string {
	if e.Stderr != "" {
		// The helper's line names it ("ferry-sbom: …").
		return fmt.Sprintf("%s (%v)", e.Stderr, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *HelperError) Unwrap() error { return e.Err }

// capped keeps the first max bytes written to it.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// lastLine is the last non-empty line written.
func (c *capped) lastLine() string {
	lines := strings.Split(strings.TrimSpace(c.buf.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
