// Package backup writes the in-cluster registry's content, and the Package
// objects and public keys that bring its packages back, as one signed
// package archive (Write), and restores such archives, a full one and the
// incremental ones that extend it, into another cluster (Restore).
//
// A backup is a ferry package: ferry.json names it ferry-backup, its root
// lists every tagged manifest and referrer of the registry as an image
// entry (ref REPOSITORY:TAG, or REPOSITORY@DIGEST for a referrer), and its
// package manifest carries one more layer, the record (MediaTypeRecord):
// which repository holds which blob and tag, the Package objects and the
// keys they name. `ferry package verify --key` checks it as it checks any
// package; an incremental backup is a delta of that package (ferry-delta.json
// lists the blobs its base chain holds). See docs/operations.md.
package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/opencontainers/go-digest"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// MediaTypeRecord is the media type of a backup's record layer.
const MediaTypeRecord = "application/vnd.ferry.backup.v1+json"

// PackageName is the name a backup's ferry.json gives it.
const PackageName = "ferry-backup"

// MaxRecordSize bounds a record read from a backup (64 MiB: about 500,000
// blobs).
const MaxRecordSize = 64 << 20

// ErrNotBackup means a package is not a backup ferry wrote.
var ErrNotBackup = errors.New("not a ferry backup")

// Record is what a backup says beyond its graph: where every blob goes,
// the tags, and the cluster objects that bring its packages back.
type Record struct {
	MediaType string `json:"mediaType"`
	// Source names the registry backed up.
	Source string `json:"source"`
	// Created is when the backup was made (RFC 3339, UTC).
	Created string `json:"created"`
	// Base is the backup this one extends; nil for a full backup.
	Base *Link `json:"base,omitempty"`
	// Repositories are the repositories backed up, with their tags.
	Repositories []Repository `json:"repositories"`
	// Blobs are every blob of the registry's graph the backup covers,
	// carried or held by its base chain, children before parents.
	Blobs []Blob `json:"blobs"`
	// Packages are the Package objects, their spec only.
	Packages []Package `json:"packages,omitempty"`
	// Keys are the Secrets and ConfigMaps holding the public keys the
	// Packages name.
	Keys []Key `json:"keys,omitempty"`
}

// Link names a backup another extends.
type Link struct {
	// Root is the base backup's root digest; empty when the base was given
	// as a receipt.
	Root digest.Digest `json:"root,omitempty"`
	// Name is where the base was read (a file, an s3:// URL, a receipt's
	// source), Created when it was made.
	Name    string `json:"name"`
	Created string `json:"created,omitempty"`
}

// Repository is one repository: its tags and its untagged referrers.
type Repository struct {
	Name      string                   `json:"name"`
	Tags      map[string]digest.Digest `json:"tags,omitempty"`
	Referrers []digest.Digest          `json:"referrers,omitempty"`
}

// Blob is one blob of the graph: its size, its media type when it is a
// manifest or index, and the repositories (indexes into
// Record.Repositories) that hold it.
type Blob struct {
	Digest    digest.Digest `json:"digest"`
	Size      int64         `json:"size"`
	MediaType string        `json:"mediaType,omitempty"`
	Repos     []int         `json:"repos"`
}

// Package is a Package object as a backup keeps it: name, namespace,
// labels and spec; no status, uid or resource version.
type Package struct {
	Name      string               `json:"name"`
	Namespace string               `json:"namespace"`
	Labels    map[string]string    `json:"labels,omitempty"`
	Spec      v1alpha1.PackageSpec `json:"spec"`
}

// Key is a Secret or ConfigMap holding public keys a Package names.
type Key struct {
	Kind      string            `json:"kind"`
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
	Data      map[string]string `json:"data"`
}

// parseRecord reads and checks a record: its media type, every digest,
// every repository index and name, each blob, repository, Package and key
// listed once, and each repository of a blob.
func parseRecord(data []byte) (*Record, error) {
	if len(data) > MaxRecordSize {
		return nil, fmt.Errorf("%w: its record is %d bytes, more than %d", ErrNotBackup, len(data), MaxRecordSize)
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%w: record: %w", ErrNotBackup, err)
	}
	if rec.MediaType != MediaTypeRecord {
		return nil, fmt.Errorf("%w: record media type %.64q, not %s", ErrNotBackup, rec.MediaType, MediaTypeRecord)
	}
	repos := make(map[string]bool, len(rec.Repositories))
	for _, r := range rec.Repositories {
		if err := checkRepositoryName(r.Name); err != nil {
			return nil, err
		}
		if repos[r.Name] {
			return nil, fmt.Errorf("%w: record lists repository %s twice", ErrNotBackup, r.Name)
		}
		repos[r.Name] = true
		for _, d := range r.Tags {
			if err := d.Validate(); err != nil {
				return nil, fmt.Errorf("%w: repository %s: %w", ErrNotBackup, r.Name, err)
			}
		}
	}
	// A blob listed twice could say two things (a manifest and a layer,
	// two sizes); a backup ferry wrote lists each once.
	blobs := make(map[digest.Digest]bool, len(rec.Blobs))
	// The blob that named each repository last: a blob names each once
	// (each is one more request of a restore).
	named := make([]int, len(rec.Repositories))
	for bi, b := range rec.Blobs {
		if err := b.Digest.Validate(); err != nil || b.Size < 0 {
			return nil, fmt.Errorf("%w: record lists blob %.80q of %d bytes", ErrNotBackup, b.Digest, b.Size)
		}
		if blobs[b.Digest] {
			return nil, fmt.Errorf("%w: record lists blob %s twice", ErrNotBackup, b.Digest)
		}
		blobs[b.Digest] = true
		for _, i := range b.Repos {
			if i < 0 || i >= len(rec.Repositories) {
				return nil, fmt.Errorf("%w: blob %s names repository %d of %d", ErrNotBackup, b.Digest, i, len(rec.Repositories))
			}
			if named[i] == bi+1 {
				return nil, fmt.Errorf("%w: blob %s names repository %s twice", ErrNotBackup, b.Digest, rec.Repositories[i].Name)
			}
			named[i] = bi + 1
		}
	}
	// A Package or a key listed twice would be applied twice, the last
	// spec or data winning (a key's first, as it is only created).
	objects := make(map[string]bool, len(rec.Packages)+len(rec.Keys))
	for _, p := range rec.Packages {
		if len(validation.IsDNS1123Subdomain(p.Name)) > 0 || len(validation.IsDNS1123Label(p.Namespace)) > 0 {
			return nil, fmt.Errorf("%w: Package %.64q in namespace %.64q: not a valid name", ErrNotBackup, p.Name, p.Namespace)
		}
		id := "Package " + p.Namespace + "/" + p.Name
		if objects[id] {
			return nil, fmt.Errorf("%w: record lists %s twice", ErrNotBackup, id)
		}
		objects[id] = true
	}
	for _, k := range rec.Keys {
		if (k.Kind != "Secret" && k.Kind != "ConfigMap") || len(validation.IsDNS1123Subdomain(k.Name)) > 0 || len(validation.IsDNS1123Label(k.Namespace)) > 0 {
			return nil, fmt.Errorf("%w: key %.16q %.64q in namespace %.64q: not a valid name", ErrNotBackup, k.Kind, k.Name, k.Namespace)
		}
		id := "key " + k.Kind + " " + k.Namespace + "/" + k.Name
		if objects[id] {
			return nil, fmt.Errorf("%w: record lists %s twice", ErrNotBackup, id)
		}
		objects[id] = true
	}
	return &rec, nil
}

// checkRepositoryName refuses a repository name a registry could not hold.
func checkRepositoryName(name string) error {
	if name == "" || len(name) > 255 || !repoName.MatchString(name) {
		return fmt.Errorf("%w: %.64q is not a repository name", ErrNotBackup, name)
	}
	return nil
}

// repoName is the OCI distribution specification's repository name.
var repoName = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
