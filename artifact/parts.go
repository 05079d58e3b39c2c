package artifact

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/opencontainers/go-digest"
)

// A package archive can travel as parts: byte ranges of the archive file,
// each on its own medium, named PKG.part001, PKG.part002, … beside an
// index PKG.parts.json that lists each part's name, size and sha256 and
// the package root. Every reader reads the parts in place, through one
// io.ReaderAt over the files, never joined on disk.
//
// The index is not trusted: what is read from the parts is verified as an
// archive is (the head names the root the index records, every blob its
// digest, the graph, the signatures over the root). The parts' digests
// serve to name the part to fetch again: when a read finds damage, each
// part is hashed and the first that differs from the index is named.

// Parts naming and limits.
const (
	// PartsIndexSuffix ends the name of a parts index: PKG.parts.json.
	PartsIndexSuffix = ".parts.json"
	// MediaTypeParts is the media type a parts index records.
	MediaTypeParts = "application/vnd.ferry.package.parts.v1+json"
	// MaxParts bounds the parts of one package (10,000).
	MaxParts = 10_000
	// MinPartSize is the smallest part Split writes (1 MiB).
	MinPartSize = 1 << 20
)

// Parts is a parts index: how a package archive was split.
type Parts struct {
	MediaType string `json:"mediaType"`
	// Package is the archive's file name (PKG), which the parts' names extend.
	Package string `json:"package"`
	// Root is the package root's digest; the head read from the parts must
	// name it.
	Root digest.Digest `json:"root"`
	// Size is the archive's size, PartSize that of every part but the last.
	Size     int64 `json:"size"`
	PartSize int64 `json:"partSize"`
	// Parts lists the parts in order.
	Parts []Part `json:"parts"`
}

// Part is one part of a split archive: its file name (beside the index),
// size and sha256.
type Part struct {
	Name   string        `json:"name"`
	Size   int64         `json:"size"`
	Digest digest.Digest `json:"digest"`
}

// PartError names a part of a split package that is missing, of the wrong
// size, or damaged: the one medium to fetch again. It wraps ErrCorrupt.
type PartError struct {
	// Part is the part's path, Index the index's.
	Part, Index string
	// Problem says what is wrong with the part.
	Problem string
	// Err is what the read found, if the damage was found by a read.
	Err error
}

func (e *PartError) Error() string {
	msg := fmt.Sprintf("part %s %s: fetch it again", e.Part, e.Problem)
	if e.Err != nil {
		msg += " (the read found: " + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap gives ErrCorrupt and the read's error.
func (e *PartError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCorrupt}
	}
	return []error{ErrCorrupt, e.Err}
}

var partNameRE = regexp.MustCompile(`\.part[0-9]{3,}$`)

// partName is the name of part i (from 0) of base.
func partName(base string, i int) string { return fmt.Sprintf("%s.part%03d", base, i+1) }

// PartsIndexPath returns the index of the split package p names, or "":
// p may be the index itself (PKG.parts.json), any of its parts
// (PKG.part001), or PKG when no file PKG exists but PKG.parts.json does.
func PartsIndexPath(p string) string {
	switch {
	case strings.HasSuffix(p, PartsIndexSuffix):
		return p
	case partNameRE.MatchString(p):
		return partNameRE.ReplaceAllString(p, "") + PartsIndexSuffix
	}
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if _, err := os.Lstat(p + PartsIndexSuffix); err == nil {
		return p + PartsIndexSuffix
	}
	return ""
}

// readParts reads and checks the parts index at p.
func readParts(p string) (*Parts, error) {
	data, err := readRegular(p, p, MaxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the parts index %s is missing: copy it from any medium of the package (%w)", p, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	var ps Parts
	if err := json.Unmarshal(data, &ps); err != nil {
		return nil, corruptIn("parts index", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: parts index: %s", ErrCorrupt, fmt.Sprintf(format, a...))
	}
	switch {
	case ps.MediaType != MediaTypeParts:
		return nil, bad("media type %q, not %s", ps.MediaType, MediaTypeParts)
	case ps.Package == "" || ps.Package != filepath.Base(ps.Package) || strings.ContainsAny(ps.Package, `/\`) || ps.Package == "." || ps.Package == "..":
		return nil, bad("package %q is not a file name", ps.Package)
	case ps.Root.Validate() != nil:
		return nil, bad("root %q is not a digest", ps.Root)
	case len(ps.Parts) == 0 || len(ps.Parts) > MaxParts:
		return nil, bad("%d parts (1 to %d)", len(ps.Parts), MaxParts)
	case ps.PartSize <= 0 || ps.PartSize > sizeCeiling/MaxParts:
		return nil, bad("part size %d out of range", ps.PartSize)
	}
	var total int64
	for i, pt := range ps.Parts {
		switch {
		case pt.Name != partName(ps.Package, i):
			return nil, bad("part %d is %q, not %s", i+1, pt.Name, partName(ps.Package, i))
		case pt.Size <= 0 || pt.Size > ps.PartSize || (i < len(ps.Parts)-1 && pt.Size != ps.PartSize):
			return nil, bad("part %s is %d bytes; parts are %d bytes, the last at most that", pt.Name, pt.Size, ps.PartSize)
		case pt.Digest.Algorithm() != digest.SHA256 || pt.Digest.Validate() != nil:
			return nil, bad("part %s has no sha256 digest", pt.Name)
		}
		total += pt.Size
	}
	if total != ps.Size {
		return nil, bad("its parts add up to %d bytes, not the %d it records", total, ps.Size)
	}
	return &ps, nil
}

// ReadParts reads and checks the parts index at p (PartsIndexPath), without
// opening the parts.
func ReadParts(p string) (*Parts, error) {
	ps, err := readParts(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return ps, nil
}

// Parts returns the parts the package was opened from, or nil when it is
// not split.
func (r *Reader) Parts() *Parts {
	if r.parts == nil {
		return nil
	}
	ps := *r.parts.ps
	ps.Parts = append([]Part(nil), ps.Parts...)
	return &ps
}
