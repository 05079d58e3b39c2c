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
	"path/filepath"
	"strings"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/childproc"
	"github.com/ferrypkg/ferry/internal/scratch"
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

// pollInterval is how often a running helper's memory and writes are read.
const pollInterval = 50 * time.Millisecond

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
// (childproc): it dies with ferry, and a cancelled or timed-out run kills
// whatever it started too.
func run(ctx context.Context, helper string, args []string, tmp string, lim Limits) ([]byte, error) {
	timedOut := errors.New("time limit")
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, lim.Timeout, timedOut)
	defer cancelTimeout()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := childproc.Command(ctx, helper, args...)
	// The helper's GC aims below the limit (Go's soft memory limit), so
	// that only an image that really needs more reaches it.
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, fmt.Sprintf("GOMEMLIMIT=%d", lim.Memory/2))
	stderr := &capped{max: maxStderr}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("SBOM helper: %w", err) // names the helper
	}
	w := &watch{pid: cmd.Process.Pid, lim: lim, kill: cancel, done: make(chan struct{})}
	// The kernel's limits, set on the running helper (it has done no work
	// yet); the watcher's polls stand behind them, and alone where there
	// are none.
	setLimits(w.pid, lim)
	go w.run()
	doc, readErr := io.ReadAll(io.LimitReader(stdout, artifact.MaxSBOMSize+1))
	if len(doc) > artifact.MaxSBOMSize {
		cancel()
		_ = cmd.Wait()
		close(w.done)
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("%w: its document is more than %d bytes", ErrLimit, artifact.MaxSBOMSize)}
	}
	err = cmd.Wait()
	close(w.done)
	peak := peakRSS(cmd.ProcessState)
	if over := w.exceeded(); over != nil {
		return nil, &HelperError{Path: helper, Err: over, PeakRSS: peak}
	}
	switch {
	case errors.Is(context.Cause(ctx), timedOut):
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("%w: it ran longer than %s", ErrLimit, lim.Timeout), PeakRSS: peak}
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && (outOfMemory(stderr.buf.String()) || w.nearDataLimit()):
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("%w: it needed more than %d MiB of memory", ErrLimit, lim.Memory>>20), PeakRSS: peak}
	case err != nil && fileTooLarge(err):
		return nil, &HelperError{Path: helper, Err: fmt.Errorf("%w: it wrote a file of more than %d MiB", ErrLimit, lim.Disk>>20), PeakRSS: peak}
	case err != nil:
		return nil, &HelperError{Path: helper, Err: err, Stderr: stderr.lastLine(), PeakRSS: peak}
	case readErr != nil:
		return nil, &HelperError{Path: helper, Err: readErr}
	}
	return doc, nil
}

// outOfMemory reports a Go program's crash for want of memory.
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "fatal error: runtime: out of memory") || strings.Contains(stderr, "fatal error: out of memory") ||
		strings.Contains(stderr, "cannot allocate memory")
}

// watch polls a running helper's resident memory and the bytes it has
// written, and kills it past its limits.
type watch struct {
	pid  int
	lim  Limits
	kill context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	over error
	data int64 // the largest data segment seen
}

// nearDataLimit reports whether the helper's data segment came within an
// eighth of the kernel's limit on it: a Go program that cannot map more
// memory may die of it in ways other than "out of memory" (Go 1.26's
// garbage collector faults).
func (w *watch) nearDataLimit() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.data >= dataLimit(w.lim)/8*7
}

// dataLimit is the kernel's limit on the helper's data segment: 7/8 of
// the memory limit, so that with its code and stacks its resident set
// stays under it.
func dataLimit(lim Limits) int64 { return lim.Memory / 8 * 7 }

func (w *watch) run() {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		rss, data, written, ok := usage(w.pid)
		if !ok {
			continue
		}
		w.mu.Lock()
		w.data = max(w.data, data)
		w.mu.Unlock()
		var over error
		switch {
		case rss > w.lim.Memory:
			over = fmt.Errorf("%w: it used more than %d MiB of memory", ErrLimit, w.lim.Memory>>20)
		case written > w.lim.Disk:
			over = fmt.Errorf("%w: it wrote more than %d MiB of temporary files", ErrLimit, w.lim.Disk>>20)
		}
		if over != nil {
			w.mu.Lock()
			w.over = over
			w.mu.Unlock()
			w.kill()
			return
		}
	}
}

func (w *watch) exceeded() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
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

// lastLine is the line that says why the helper failed: the first of a
// Go program's crash ("fatal error: …", "panic: …", "SIGSEGV: …"), else
// the last non-empty line written.
func (c *capped) lastLine() string {
	lines := strings.Split(strings.TrimSpace(c.buf.String()), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "SIG") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}
