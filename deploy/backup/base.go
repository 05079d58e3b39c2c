package backup

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
)

// maxHeadEntries bounds the entries read before a backup's record (its
// head, two folders, ferry.json's blob, the record).
const maxHeadEntries = 8

// Info is what a backup's head and record say, read without reading its
// blobs.
type Info struct {
	Name   string
	Root   digest.Digest
	Config *artifact.Config
	Record *Record
	// Omitted are the blobs an incremental backup leaves to its base.
	Omitted int
}

// ReadInfo reads the head and the record of the backup r holds, which
// lead the archive; name is what messages call it.
func ReadInfo(r io.Reader, name string) (*Info, error) {
	tr := tar.NewReader(r)
	info := &Info{Name: name}
	var recDigest digest.Digest
	recName := "\x00" // no entry's name until ferry.json names the record
	for i := 0; i < maxHeadEntries; i++ {
		h, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%s: %w: it ends before its record", name, ErrNotBackup)
			}
			return nil, fmt.Errorf("%s: %w: %w", name, ErrNotBackup, err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		limit := int64(artifact.MaxManifestSize)
		if h.Name == recName {
			limit = MaxRecordSize
		}
		if h.Size > limit {
			return nil, fmt.Errorf("%s: %w: %s is %d bytes", name, ErrNotBackup, h.Name, h.Size)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", name, ErrNotBackup, err)
		}
		switch h.Name {
		case artifact.ConfigFileName:
			var cfg artifact.Config
			if err := json.Unmarshal(data, &cfg); err != nil || cfg.Name != PackageName || len(cfg.Components) != 1 || len(cfg.Components[0].Files) != 1 {
				return nil, fmt.Errorf("%s: %w: its ferry.json names package %.64q", name, ErrNotBackup, cfg.Name)
			}
			info.Config, recDigest = &cfg, cfg.Components[0].Files[0].Digest
			if recDigest.Validate() != nil || recDigest.Algorithm() != digest.SHA256 {
				return nil, fmt.Errorf("%s: %w: its ferry.json names record %.80q", name, ErrNotBackup, recDigest)
			}
			recName = blobName(recDigest)
		case "index.json":
			var idx ocispec.Index
			if err := json.Unmarshal(data, &idx); err != nil || len(idx.Manifests) == 0 {
				return nil, fmt.Errorf("%s: %w: index.json", name, ErrNotBackup)
			}
			info.Root = idx.Manifests[0].Digest
		case deltaFileName:
			var d artifact.DeltaInfo
			if err := json.Unmarshal(data, &d); err != nil {
				return nil, fmt.Errorf("%s: %w: %s", name, ErrNotBackup, deltaFileName)
			}
			info.Omitted = len(d.Omitted)
		case recName:
			if digest.FromBytes(data) != recDigest {
				return nil, fmt.Errorf("%s: %w: its record does not match its digest", name, artifact.ErrCorrupt)
			}
			rec, err := parseRecord(data)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			info.Record = rec
			return info, nil
		}
	}
	return nil, fmt.Errorf("%s: %w: no record among its first entries", name, ErrNotBackup)
}

// ReadInfoFile reads the head and record of the backup at path.
func ReadInfoFile(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadInfo(f, path)
}

// ReadInfoS3 reads the head and record of the backup st names; only the
// start of the object is read.
func ReadInfoS3(ctx context.Context, st *registry.S3) (*Info, error) {
	body, err := OpenS3(ctx, st)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return ReadInfo(body, "s3://"+st.Bucket+"/"+st.Prefix)
}

// Base is the base an incremental backup extending this one takes: every
// blob its record lists (carried, or held by its own base).
func (i *Info) Base() *Base {
	b := &Base{Link: Link{Root: i.Root, Name: i.Name, Created: i.Record.Created}, Blobs: map[digest.Digest]int64{}}
	for _, bl := range i.Record.Blobs {
		b.Blobs[bl.Digest] = bl.Size
	}
	return b
}

// BaseFromReceipt is the base a receipt gives (artifact.Receipt: what a
// registry holds); the chain is then the restorer's to keep.
func BaseFromReceipt(rc *artifact.Receipt) *Base {
	return &Base{Link: Link{Name: rc.Source, Created: rc.Created}, Blobs: rc.Blobs}
}
