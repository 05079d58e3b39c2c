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
	"path/filepath"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/childproc"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// HelperName is the file name of the helper binary.
const HelperName = "ferry-sbom"

// ErrHelperNotFound is returned (wrapped) when the helper is neither beside
// the running executable nor on PATH.
var ErrHelperNotFound = errors.New(HelperName + " not found")

// maxManifestSize bounds the image manifest read into memory.
const maxManifestSize = 4 << 20

// FindHelper returns the helper binary: HelperName beside the running
// executable (symbolic links followed, as when bin/ferry-full is linked
// into /usr/local/bin), else on PATH. The error wraps ErrHelperNotFound
// when it is in neither.
func FindHelper() (string, error) {
	p, exe, err := childproc.FindSibling(HelperName)
	if p == "" && err == nil {
		return "", fmt.Errorf("%w beside %s nor on PATH", ErrHelperNotFound, exe)
	}
	return p, err
}

// Generator makes SBOMs by running the helper, one run per image manifest,
// each bounded (see Limits). The zero value finds the helper with
// FindHelper at each call.
type Generator struct {
	// Path is the helper binary; if empty, FindHelper's.
	Path string
	// ToolVersion is the version of ferry named as the documents' creator
	// tool ("ferry-<version>"); if empty, "devel".
	ToolVersion string
	// TempDir is where the image's layout and the helper's unpacked layers
	// go while an SBOM is made (removed after, or by the next run if this
	// one is killed); if empty, os.TempDir().
	TempDir string
	// Limits bound each run of the helper; the zero value is
	// DefaultLimits.
	Limits Limits
}

// Limits bound one run of the helper. A run past one is killed (with any
// process it started) and the image refused with an error wrapping
// ErrLimit.
type Limits struct {
	// Memory bounds the helper's heap (RLIMIT_DATA, on Linux) and resident
	// set (polled); if 0, artifact.SBOMHelperMemory.
	Memory int64
	// Timeout bounds the run; if 0, artifact.SBOMHelperTimeout.
	Timeout time.Duration
	// Disk bounds what the helper writes (its temporary files); if 0,
	// artifact.SBOMHelperDiskFloor plus artifact.SBOMHelperDiskFactor times
	// the image's layers.
	Disk int64
}

// ErrLimit is wrapped by the error of a run of the helper that passed one
// of its Limits.
var ErrLimit = errors.New("the SBOM helper passed its limit")

var _ build.SBOMGenerator = Generator{}

// GenerateSBOM implements artifact.SBOMGenerator.
func (g Generator) GenerateSBOM(ctx context.Context, src content.Fetcher, req build.SBOMRequest) ([]byte, error) {
	if req.Manifest.MediaType != ocispec.MediaTypeImageManifest && req.Manifest.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
		return nil, fmt.Errorf("%s: media type %.64q is not an image manifest", req.Manifest.Digest, req.Manifest.MediaType)
	}
	format, err := definition.ParseSBOMFormat(string(req.Format))
	if err != nil {
		return nil, err
	}
	helper := g.Path
	if helper == "" {
		if helper, err = FindHelper(); err != nil {
			return nil, err
		}
	}
	tmp, err := scratch.MkdirTemp(g.TempDir, "ferry-sbom-")
	if err != nil {
		return nil, err
	}
	defer tmp.Remove()
	layout := filepath.Join(tmp.Path, "layout")
	layers, err := spool(ctx, src, req.Manifest, layout)
	if err != nil {
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
	lim := g.Limits
	if lim.Memory <= 0 {
		lim.Memory = artifact.SBOMHelperMemory
	}
	if lim.Timeout <= 0 {
		lim.Timeout = artifact.SBOMHelperTimeout
	}
	if lim.Disk <= 0 {
		lim.Disk = artifact.SBOMHelperDiskFloor + artifact.SBOMHelperDiskFactor*layers
	}
	doc, err := run(ctx, helper, args, tmp.Path, lim)
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
// checks every blob against its descriptor. It returns the layers' size.
func spool(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor, dir string) (int64, error) {
	store, err := oci.New(dir)
	if err != nil {
		return 0, err
	}
	if desc.Size > maxManifestSize {
		return 0, fmt.Errorf("manifest %s: %d bytes is more than %d", desc.Digest, desc.Size, maxManifestSize)
	}
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	raw, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return 0, fmt.Errorf("fetch manifest %s: %w", desc.Digest, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return 0, fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
	}
	var layers int64
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := copyBlob(ctx, src, store, d); err != nil {
			return 0, err
		}
		layers += d.Size
	}
	if err := store.Push(ctx, desc, bytes.NewReader(raw)); err != nil {
		return 0, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	return layers, store.Tag(ctx, desc, "image")
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

// run runs the helper with args, its temporary files in tmp, within lim,
// and returns what it writes to standard output, at most
// artifact.MaxSBOMSize bytes. The helper is tied to this process
// (childproc): it dies with ferry, and a run past a limit, cancelled or
// timed out kills whatever it started too.
func run(ctx context.Context, helper string, args []string, tmp string, lim Limits) ([]byte, error) {
	res, err := childproc.Run(ctx, helper, args, childproc.RunOptions{
		Env:    []string{"TMPDIR=" + tmp},
		Limits: childproc.Limits{Memory: lim.Memory, Time: lim.Timeout, Disk: lim.Disk, Output: artifact.MaxSBOMSize},
	})
	var le *childproc.LimitError
	var ee *childproc.ExitError
	switch {
	case errors.As(err, &le):
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("%w of %s", ErrLimit, le.Limit()), PeakRSS: res.PeakRSS}
	case errors.As(err, &ee):
		return nil, &HelperError{Path: helper, Err: ee.Err, Stderr: ee.Stderr, PeakRSS: res.PeakRSS}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("SBOM helper: %w", err) // names the helper
	}
	return res.Stdout, nil
}

// check checks that doc is one JSON document of format.
func check(doc []byte, format definition.SBOMFormat) error {
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
	case format == definition.SBOMFormatCycloneDX && head.BOMFormat != "CycloneDX":
		return fmt.Errorf("its output is not a CycloneDX document (bomFormat %.64q)", head.BOMFormat)
	case format == definition.SBOMFormatSPDX && !strings.HasPrefix(head.SPDXVersion, "SPDX-"):
		return fmt.Errorf("its output is not an SPDX document (spdxVersion %.64q)", head.SPDXVersion)
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
	// PeakRSS is the helper's peak resident set in bytes, where the
	// system tells it (0 if not).
	PeakRSS int64
	Err     error
}

func (e *HelperError) Error() string {
	if e.Stderr != "" {
		// The helper's line names it ("ferry-sbom: …").
		return fmt.Sprintf("%s (%v)", e.Stderr, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *HelperError) Unwrap() error { return e.Err }
