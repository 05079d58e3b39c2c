package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
)

// Source is what a backup reads: the registry, and the cluster API for the
// Package objects and keys.
type Source struct {
	// Registry is the in-cluster registry (or any registry with a catalog).
	Registry registry.Registry
	// Name is what the backup calls it (the registry's host).
	Name string
	// Client reads Packages, Secrets and ConfigMaps; nil backs up the
	// registry alone.
	Client client.Client
	// Namespace is ferry's namespace, where the Packages and keys are.
	Namespace string
}

// Options configures Write. The zero value backs up every repository,
// unsigned, in full.
type Options struct {
	// Packages selects the Packages (by name) whose repositories are backed
	// up: the package's own and those its ferry.json names (images, git
	// repositories). Repositories adds repositories by name. Both empty:
	// every repository and every Package.
	Packages     []string
	Repositories []string
	// Key, if set, signs the backup's root (cosign's signature manifest,
	// as `package sign` makes).
	Key artifact.Signer
	// Since, if set, is the backup this one extends: the blobs its chain
	// holds are left out (an incremental backup, a delta of the package).
	Since *Base
	// Progress, if set, hears of each blob written.
	Progress artifact.ProgressFunc
	// Now is the backup's time; time.Now if nil.
	Now func() time.Time
}

// Base is what an incremental backup extends: the blobs the chain holds,
// and the link the record keeps (ReadBase, BaseFromReceipt).
type Base struct {
	Link  Link
	Blobs map[digest.Digest]int64
}

// Result tells what Write wrote.
type Result struct {
	Destination string             `json:"destination"`
	Root        ocispec.Descriptor `json:"root"`
	Size        int64              `json:"size"`
	// Resumed is the offset a rerun started from (0: from the start).
	Resumed      int64  `json:"resumed"`
	Repositories int    `json:"repositories"`
	Tags         int    `json:"tags"`
	Packages     int    `json:"packages"`
	Keys         int    `json:"keys"`
	Carried      int    `json:"carried"`
	CarriedSize  int64  `json:"carriedSize"`
	Omitted      int    `json:"omitted"`
	OmittedSize  int64  `json:"omittedSize"`
	Base         *Link  `json:"base,omitempty"`
	Signed       bool   `json:"signed"`
	Created      string `json:"created"`
}

// Destination is where a backup is written: a file (File) or an S3 object
// (S3Object). It keeps what a rerun needs to go on where an interrupted
// write stopped.
type Destination interface {
	// String names it in messages.
	String() string
	// resume returns the head of an interrupted write of the backup whose
	// root would be rootOf(head), and the offset to go on from; nil when
	// there is none to go on with (anything left is dropped).
	resume(ctx context.Context, rootOf func(*head) (digest.Digest, error)) (*head, int64, error)
	// write writes the archive from offset start on; it keeps h (what a
	// rerun needs) until the archive is whole, then makes it appear under
	// its name at once.
	write(ctx context.Context, h *head, a *archive, start int64, body func(w io.Writer, start int64) error) error
}

// Write backs up src into dst: it lists what to back up (every
// manifest and index fetched and verified), lays the archive out, and
// streams it, each blob verified, into dst. A write interrupted before
// the end leaves what a rerun with the same content needs to go on
// without sending again what was written.
func Write(ctx context.Context, src Source, dst Destination, opts Options) (*Result, error) {
	match, pkgs, keys, err := selection(ctx, src, opts)
	if err != nil {
		return nil, err
	}
	c, err := collect(ctx, src.Registry, match)
	if err != nil {
		return nil, err
	}
	c.rec.Source, c.rec.Packages, c.rec.Keys = src.Name, pkgs, keys
	var baseBlobs map[digest.Digest]int64
	if opts.Since != nil {
		link := opts.Since.Link
		c.rec.Base, baseBlobs = &link, opts.Since.Blobs
		if baseBlobs == nil {
			baseBlobs = map[digest.Digest]int64{}
		}
	}
	layout := func(h *head, key artifact.Signer) (*archive, error) {
		c.rec.Created = h.Created
		return build(c, h, key, baseBlobs)
	}
	rootOf := func(h *head) (digest.Digest, error) {
		a, err := layout(h, nil)
		if err != nil {
			return "", err
		}
		return a.root.Digest, nil
	}
	h, start, err := dst.resume(ctx, rootOf)
	if err != nil {
		return nil, err
	}
	if h == nil {
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		h, start = &head{Created: now().UTC().Format(time.RFC3339)}, 0
	}
	a, err := layout(h, opts.Key)
	if err != nil {
		return nil, err
	}
	fetch := func(ctx context.Context, repo string, d ocispec.Descriptor) (io.ReadCloser, error) {
		r, err := src.Registry.Repository(ctx, repo)
		if err != nil {
			return nil, err
		}
		return r.Blobs().Fetch(ctx, d)
	}
	err = dst.write(ctx, h, a, start, func(w io.Writer, start int64) error {
		return a.writeFrom(ctx, w, start, fetch, opts.Progress)
	})
	if err != nil {
		return nil, fmt.Errorf("back up to %s: %w", dst, err)
	}
	res := &Result{Destination: dst.String(), Root: a.root, Size: a.size, Resumed: start, Repositories: len(c.rec.Repositories),
		Packages: len(pkgs), Keys: len(keys), Carried: a.carried, CarriedSize: a.carriedSize, Omitted: a.omitted, OmittedSize: a.omittedSize,
		Base: c.rec.Base, Signed: h.Signature != nil, Created: h.Created}
	for _, r := range c.rec.Repositories {
		res.Tags += len(r.Tags)
	}
	return res, nil
}

// ErrChanged means the registry changed between a write and its rerun: the
// rerun starts over.
var ErrChanged = errors.New("the registry changed since the interrupted backup")

// inSelection reports whether repository r is one of names.
func inSelection(names map[string]bool, r string) bool { return names[strings.Trim(r, "/")] }
