package advisory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// ErrNotCarried means a package carries no vulnerability database.
var ErrNotCarried = errors.New("the package carries no advisories")

// ReadPackage reads every vulnerability database the package ref names in
// src carries (a registry repository, or a package on disk opened with
// artifact.Open and ref ""), and merges them into one DB (a record two
// databases hold is kept once). Each layer is fetched into a temporary
// file through a check of its digest, then loaded within lim. It returns
// ferry.json's records of the databases with it, and ErrNotCarried when
// there are none. It verifies no signature: callers that need one verify
// the package first.
//
// It lives here, not in package artifact, so that what links artifact
// alone (the front binary) does not link the ecosystems' version orders.
func ReadPackage(ctx context.Context, src oras.ReadOnlyTarget, ref string, lim Limits) (*DB, []artifact.Advisories, error) {
	cfg, _, err := artifact.ReadConfig(ctx, src, ref)
	if err != nil {
		return nil, nil, err
	}
	db := New(lim)
	var recs []artifact.Advisories
	for _, c := range cfg.Components {
		for _, a := range c.Advisories {
			if err := db.fetchZip(ctx, src, a); err != nil {
				return nil, nil, fmt.Errorf("advisories %s of component %s: %w", a.Source, c.Name, err)
			}
			recs = append(recs, a)
		}
	}
	if len(recs) == 0 {
		return nil, nil, fmt.Errorf("%s: %w", cfg.Name+":"+cfg.Version, ErrNotCarried)
	}
	return db, recs, nil
}

// fetchZip loads the advisories layer a into db.
func (db *DB) fetchZip(ctx context.Context, src content.Fetcher, a artifact.Advisories) error {
	if a.Size > db.lim.MaxBytes {
		return &LimitError{What: "bytes of the zip", Got: a.Size, Max: db.lim.MaxBytes}
	}
	desc := ocispec.Descriptor{MediaType: artifact.MediaTypeAdvisories, Digest: a.Digest, Size: a.Size}
	rc, err := src.Fetch(ctx, desc)
	if err != nil {
		return &artifact.BlobError{Op: "fetch", Digest: a.Digest, Err: err}
	}
	defer rc.Close()
	f, err := scratch.CreateTemp("", "ferry-advisories-")
	if err != nil {
		return err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	vr := content.NewVerifyReader(rc, desc)
	if _, err := io.Copy(f, vr); err != nil {
		return &artifact.BlobError{Op: "fetch", Digest: a.Digest, Err: err}
	}
	if err := vr.Verify(); err != nil {
		return &artifact.BlobError{Op: "verify", Digest: a.Digest, Err: err}
	}
	return db.LoadZip(f, a.Size)
}
