package zarf

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
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
	// Definition is the package's zarf.yaml, as zarf package create wrote it.
	Definition []byte
	// Signed says the package holds zarf.yaml.sig; Verified that it was
	// checked against a key.
	Signed, Verified bool
}

// Extract reads a built Zarf package — a .tar.zst, a .tar, or the .part000
// of a multi-part one (its parts beside it) — into dir, which must be
// empty or absent. With key, zarf.yaml.sig must verify against it before
// anything else is read; a signed package with no key is extracted
// (Signed) but not Verified.
func Extract(archive, dir string, key *artifact.PublicKey) (*Package, error) {
	r, closeAll, err := openArchive(archive)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := untar(r, root, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	p := &Package{Dir: dir}
	if p.Definition, err = readBounded(root, ZarfYAML, artifact.MaxManifestSize); err != nil {
		return nil, fmt.Errorf("%s: not a Zarf package: %w", archive, err)
	}
	sig, err := readBounded(root, SignatureFile, artifact.MaxSignaturePayload)
	p.Signed = err == nil
	switch {
	case key != nil && !p.Signed:
		return nil, fmt.Errorf("%s: a key was given but the package is not signed (no %s)", archive, SignatureFile)
	case key != nil:
		if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(sig))); err == nil {
			sig = raw
		}
		if err := key.VerifyPayload(p.Definition, sig); err != nil {
			return nil, fmt.Errorf("%s: %s does not verify with %s: %w", archive, SignatureFile, key.KeyName(), err)
		}
		p.Verified = true
	}
	if err := checkIntegrity(root, p.Definition); err != nil {
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	// The component tars, each holding NAME/… .
	entries, _ := fs.ReadDir(root.FS(), "components")
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".tar") {
			continue
		}
		f, err := root.Open("components/" + e.Name())
		if err != nil {
			return nil, err
		}
		err = untar(f, root, "components")
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: components/%s: %w", archive, e.Name(), err)
		}
	}
	// sboms.tar, into sboms/.
	if f, err := root.Open(SBOMTar); err == nil {
		err = untar(f, root, SBOMDir)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", archive, SBOMTar, err)
		}
	}
	return p, nil
}

// splitHeader is the .part000 of a multi-part package (Zarf's
// src/internal/split).
type splitHeader struct {
	Sha256Sum string
	Bytes     int64
	Count     int
}

// openArchive opens the package's tar stream: zstd or plain, one file or
// the parts that .part000 describes (their sha256 and size checked as they
// are read). As the package archive reader's, it is bounded: a zstd frame
// may declare a window of at most artifact.MaxZstdWindow, and the stream
// may give at most artifact.MaxExpansion times the bytes read from disk
// (past artifact.MaxManifestSize), so a bomb is refused before it fills
// the disk.
func openArchive(name string) (io.Reader, func(), error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var r io.Reader
	if strings.HasSuffix(name, ".part000") {
		data, err := readFileBounded(name, artifact.MaxManifestSize)
		if err != nil {
			return nil, nil, err
		}
		var h splitHeader
		if err := json.Unmarshal(data, &h); err != nil || h.Count < 1 {
			return nil, nil, fmt.Errorf("%s: not the header of a multi-part Zarf package", name)
		}
		base := strings.TrimSuffix(name, ".part000")
		var parts []io.Reader
		for i := 1; i <= h.Count; i++ {
			f, err := os.Open(fmt.Sprintf("%s.part%03d", base, i))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("part %d of %d: %w", i, h.Count, err)
			}
			files = append(files, f)
			parts = append(parts, f)
		}
		r = &checkedReader{r: io.MultiReader(parts...), h: sha256.New(), want: h.Sha256Sum, size: h.Bytes, name: name}
		name = base
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
		r = f
	}
	counted := &countingReader{r: r}
	br := bufio.NewReader(counted)
	magic, _ := br.Peek(4)
	if bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(artifact.MaxZstdWindow), zstd.WithDecoderMaxMemory(artifact.MaxZstdWindow*4))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return &expansionLimit{r: zr, in: counted, name: name}, func() { zr.Close(); closeAll() }, nil
	}
	return br, closeAll, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// expansionLimit refuses a decompressed stream that gives more than
// artifact.MaxExpansion times the compressed bytes read (past
// artifact.MaxManifestSize).
type expansionLimit struct {
	r    io.Reader
	in   *countingReader
	out  int64
	name string
}

func (e *expansionLimit) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.out += int64(n)
	if e.out > artifact.MaxManifestSize && e.out > artifact.MaxExpansion*e.in.n {
		return n, fmt.Errorf("%w: %s expands to more than %d times its size (a zstd bomb?)", artifact.ErrCorrupt, e.name, artifact.MaxExpansion)
	}
	return n, err
}

// readBounded reads file name of root, refusing one over max bytes
// (ErrCorrupt: a Zarf package's files are small).
func readBounded(root *os.Root, name string, max int64) ([]byte, error) {
	return corruptIfLarge(confine.ReadFile(root, name, max))
}

// readFileBounded is readBounded for a path outside any root.
func readFileBounded(name string, max int64) ([]byte, error) {
	return corruptIfLarge(confine.ReadPath(name, max))
}

func corruptIfLarge(data []byte, err error) ([]byte, error) {
	if errors.Is(err, confine.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", artifact.ErrCorrupt, err)
	}
	return data, err
}

// checkedReader checks the sha256 and size of a multi-part package at EOF.
type checkedReader struct {
	r io.Reader
	h interface {
		Write([]byte) (int, error)
		Sum([]byte) []byte
	}
	want, name string
	size, n    int64
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if err == io.EOF {
		if got := hex.EncodeToString(c.h.Sum(nil)); got != c.want || c.n != c.size {
			return n, fmt.Errorf("%w: the parts of %s hold %d bytes of sha256 %s, its header says %d bytes of %s", ErrIntegrity, c.name, c.n, got, c.size, c.want)
		}
	}
	return n, err
}

// untar writes regular files, folders and symbolic links below prefix in
// root, which confines them (a path or link that leaves it fails).
func untar(r io.Reader, root *os.Root, prefix string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(filepath.ToSlash(h.Name), "./"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the package", h.Name)
		}
		if prefix != "" {
			name = prefix + "/" + name
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := root.Chmod(name, mode|0o400); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
				return err
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
}

// checkIntegrity checks checksums.txt against aggregateChecksum and every
// file against it, as zarf package deploy does: a file it does not list
// (but zarf.yaml, checksums.txt and zarf.yaml.sig) is an error.
func checkIntegrity(root *os.Root, def []byte) error {
	var meta struct {
		Metadata struct {
			AggregateChecksum string `yaml:"aggregateChecksum"`
		} `yaml:"metadata"`
	}
	if err := yaml.Unmarshal(def, &meta); err != nil {
		return fmt.Errorf("zarf.yaml: %w", err)
	}
	sums, err := readBounded(root, ChecksumsFile, artifact.MaxGraphSize)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIntegrity, err)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(sums)); got != meta.Metadata.AggregateChecksum {
		return fmt.Errorf("%w: checksums.txt has sha256 %s, zarf.yaml's aggregateChecksum is %q", ErrIntegrity, got, meta.Metadata.AggregateChecksum)
	}
	present := map[string]bool{}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			present[p] = true
		}
		return err
	})
	if err != nil {
		return err
	}
	delete(present, ZarfYAML)
	delete(present, ChecksumsFile)
	delete(present, SignatureFile)
	for _, line := range strings.Split(string(sums), "\n") {
		if line == "" {
			continue
		}
		sum, rel, ok := strings.Cut(line, " ")
		if !ok || sum == "" || rel == "" {
			return fmt.Errorf("%w: invalid checksums.txt line %q", ErrIntegrity, line)
		}
		if !present[rel] {
			return fmt.Errorf("%w: %s is in checksums.txt but not in the package", ErrIntegrity, rel)
		}
		delete(present, rel)
		f, err := root.Open(rel)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != sum {
			return fmt.Errorf("%w: %s has sha256 %s, checksums.txt says %s", ErrIntegrity, rel, got, sum)
		}
	}
	if len(present) > 0 {
		var extra []string
		for p := range present {
			extra = append(extra, p)
		}
		sort.Strings(extra)
		return fmt.Errorf("%w: files not in checksums.txt: %s", ErrIntegrity, strings.Join(extra, ", "))
	}
	return nil
}
