package zarf

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/diskspace"
)

// The files of a built Zarf package (Zarf v0.60.0's
// src/pkg/packager/layout).
const (
	ZarfYAML      = "zarf.yaml"
	SignatureFile = "zarf.yaml.sig"
	ChecksumsFile = "checksums.txt"
	SBOMTar       = "sboms.tar"
)

// ErrIntegrity is a built package whose content does not match its
// checksums.
var ErrIntegrity = errors.New("zarf package integrity")

// Package is a built Zarf package extracted into Dir, its integrity
// checked: checksums.txt against metadata.aggregateChecksum, every file
// against checksums.txt, and nothing else present; its component tars are
// extracted too (components/NAME/…), and sboms.tar into SBOMDir.
type Package struct {
	Dir string
	// Archive is the package as Extract was given it: errors and gaps
	// name its files ARCHIVE:zarf.yaml.
	Archive string
	// Definition is the package's zarf.yaml, as zarf package create wrote it.
	Definition []byte
	// Signed says the package holds zarf.yaml.sig; Verified that it was
	// checked against a key.
	Signed, Verified bool
}

// Extract reads a built Zarf package — a .tar.zst, a .tar, or the .part000
// of a multi-part one (its parts beside it) — into dir, which must be
// empty or absent. A multi-part package's parts are checked against their
// header before anything is written. Each entry is checked as it is read:
// a name that leaves dir, a link, a device or a duplicate is refused, and
// once checksums.txt is read (Zarf writes it first), so is a file it does
// not list or whose sha256 differs, at that entry. Then, with key,
// zarf.yaml.sig must verify against it, before zarf.yaml is parsed (a
// signed package with no key is extracted, Signed but not Verified);
// checksums.txt must match metadata.aggregateChecksum and every file it
// lists be present. Errors name the first offender and count the others.
func Extract(archive, dir string, key *artifact.PublicKey) (*Package, error) {
	p, err := extract(archive, dir, key)
	if err != nil {
		// A full file system is named by the folder extracted to (in
		// TMPDIR), with its room.
		err = diskspace.Explain(dir, 0, err)
		// Named once: some errors name the archive themselves.
		if strings.HasPrefix(err.Error(), archive) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	return p, nil
}

func extract(archive, dir string, key *artifact.PublicKey) (*Package, error) {
	a, err := openArchive(archive)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	x := &extraction{root: root}
	if err := x.outer(a.r); err != nil {
		return nil, err
	}
	if x.def == nil {
		return nil, fmt.Errorf("not a Zarf package: it holds no %s", ZarfYAML)
	}
	p := &Package{Dir: dir, Archive: archive, Definition: x.def, Signed: x.sig != nil}
	switch {
	case key != nil && !p.Signed:
		return nil, fmt.Errorf("a key was given but the package is not signed (no %s)", SignatureFile)
	case key != nil:
		sig := x.sig
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig))); err == nil {
			sig = raw
		}
		if err := key.VerifyPayload(p.Definition, sig); err != nil {
			return nil, fmt.Errorf("%s does not verify with %s: %w", SignatureFile, key.KeyName(), err)
		}
		p.Verified = true
	}
	if err := x.checkAll(); err != nil {
		return nil, err
	}
	// The component tars, each holding NAME/… .
	entries, _ := fs.ReadDir(confine.FS(root), "components")
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".tar") {
			continue
		}
		if err := x.inner("components/"+e.Name(), "components"); err != nil {
			return nil, err
		}
	}
	// sboms.tar, into sboms/.
	if _, err := root.Lstat(SBOMTar); err == nil {
		if err := x.inner(SBOMTar, SBOMDir); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// readFileBounded reads the file name, refusing one over max bytes
// (ErrCorrupt: a Zarf package's files are small).
func readFileBounded(name string, max int64) ([]byte, error) {
	return corruptIfLarge(confine.ReadPath(name, max))
}

func corruptIfLarge(data []byte, err error) ([]byte, error) {
	if errors.Is(err, confine.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", artifact.ErrCorrupt, err)
	}
	return data, err
}
