package zarf

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
)

// extraction is one Extract: the package's head files and what was checked
// so far. Nothing grows with the package's entries but the names of those
// read before checksums.txt (bounded) and the list checksums.txt gives.
type extraction struct {
	root          *os.Root
	entries       int
	def, sig, raw []byte            // zarf.yaml, zarf.yaml.sig, checksums.txt
	sums          map[string]string // checksums.txt: path → sha256, once read
	order         []string          // checksums.txt's paths, in its order
	pending       []entrySum        // files read before checksums.txt
	pendingBytes  int
	lastDir       string // the folder the last file was written to
}

type entrySum struct{ name, sum string }

// outer reads the package's tar, checking each entry as it comes (see
// Extract).
func (x *extraction) outer(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return tarError(err)
		}
		name, err := x.name(h.Name, "")
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = x.root.MkdirAll(name, 0o700)
		case tar.TypeReg:
			err = x.outerFile(tr, h, name)
		default:
			return fmt.Errorf("entry %s is %s: a Zarf package holds files and folders", clip(name), entryType(h.Typeflag))
		}
		if err != nil {
			return pathError(err)
		}
	}
}

func (x *extraction) outerFile(tr *tar.Reader, h *tar.Header, name string) error {
	var err error
	switch name {
	case ZarfYAML:
		x.def, err = x.keep(tr, h, name, definition.MaxSize)
		return err
	case SignatureFile:
		x.sig, err = x.keep(tr, h, name, artifact.MaxSignaturePayload)
		return err
	case ChecksumsFile:
		if x.raw, err = x.keep(tr, h, name, artifact.MaxGraphSize); err != nil {
			return err
		}
		return x.readSums()
	}
	if x.sums != nil {
		if _, ok := x.sums[name]; !ok {
			return fmt.Errorf("%w: %s: not listed in %s", ErrIntegrity, clip(name), ChecksumsFile)
		}
	}
	sum, err := x.write(tr, h, name)
	if err != nil {
		return err
	}
	if x.sums == nil {
		if x.pendingBytes += len(name) + len(sum); x.pendingBytes > artifact.MaxGraphSize {
			return fmt.Errorf("%w: more than %s bytes of entry names before %s", artifact.ErrCorrupt, count(artifact.MaxGraphSize), ChecksumsFile)
		}
		x.pending = append(x.pending, entrySum{name, sum})
		return nil
	}
	return x.checkSum(name, sum)
}

func (x *extraction) checkSum(name, sum string) error {
	if want := x.sums[name]; sum != want {
		return fmt.Errorf("%w: %s has sha256 %s, %s says %s", ErrIntegrity, clip(name), sum, ChecksumsFile, clip(want))
	}
	return nil
}

// readSums parses checksums.txt (lines "SHA256 PATH") and checks the
// files read before it: the first that it does not list, or whose sha256
// differs, is refused.
func (x *extraction) readSums() error {
	x.sums = map[string]string{}
	for i, line := range strings.Split(string(x.raw), "\n") {
		if line == "" {
			continue
		}
		sum, rel, ok := strings.Cut(line, " ")
		if !ok || sum == "" || rel == "" {
			return fmt.Errorf("%w: %s line %d is not \"SHA256 PATH\": %q", ErrIntegrity, ChecksumsFile, i+1, clip(line))
		}
		if _, dup := x.sums[rel]; dup {
			return fmt.Errorf("%w: %s lists %s twice", ErrIntegrity, ChecksumsFile, clip(rel))
		}
		if len(x.sums) >= MaxEntries {
			return fmt.Errorf("%w: %s lists more than %s files", artifact.ErrCorrupt, ChecksumsFile, count(MaxEntries))
		}
		x.sums[rel] = sum
		x.order = append(x.order, rel)
	}
	var strays []string
	for _, e := range x.pending {
		if _, ok := x.sums[e.name]; !ok {
			strays = append(strays, e.name)
		}
	}
	if len(strays) > 0 {
		return fmt.Errorf("%w: %s: not listed in %s", ErrIntegrity, firstOf(strays), ChecksumsFile)
	}
	for _, e := range x.pending {
		if err := x.checkSum(e.name, e.sum); err != nil {
			return err
		}
	}
	x.pending = nil
	return nil
}

// checkAll checks, once the package is read, checksums.txt against
// zarf.yaml's metadata.aggregateChecksum (zarf.yaml decoded within its
// limits) and that every file it lists was there.
func (x *extraction) checkAll() error {
	if x.sums == nil {
		return fmt.Errorf("%w: the package holds no %s", ErrIntegrity, ChecksumsFile)
	}
	doc, err := decode(ZarfYAML, x.def)
	if err != nil {
		return err
	}
	var meta struct {
		Metadata struct {
			AggregateChecksum string `yaml:"aggregateChecksum"`
		} `yaml:"metadata"`
	}
	_ = doc.Decode(&meta)
	if got := fmt.Sprintf("%x", sha256.Sum256(x.raw)); got != meta.Metadata.AggregateChecksum {
		return fmt.Errorf("%w: %s has sha256 %s, zarf.yaml's aggregateChecksum is %q", ErrIntegrity, ChecksumsFile, got, clip(meta.Metadata.AggregateChecksum))
	}
	var missing []string
	for _, p := range x.order {
		if fi, err := x.root.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s: listed in %s but not in the package", ErrIntegrity, firstOf(missing), ChecksumsFile)
	}
	return nil
}

// inner extracts the tar file (a component's, sboms.tar) below prefix:
// files, folders, and links that stay inside the package.
func (x *extraction) inner(file, prefix string) error {
	f, _, err := confine.OpenFile(x.root, file)
	if err != nil {
		return pathError(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, tarError(err))
		}
		name, err := x.name(h.Name, prefix)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = x.root.MkdirAll(name, 0o700)
		case tar.TypeReg:
			_, err = x.write(tr, h, name)
		case tar.TypeSymlink:
			err = x.symlink(h.Linkname, name)
		default:
			err = fmt.Errorf("entry %s is %s: a Zarf package holds files, folders and links", clip(h.Name), entryType(h.Typeflag))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, pathError(err))
		}
	}
}

// name checks an entry's name, counts it to MaxEntries and returns it
// below prefix.
func (x *extraction) name(raw, prefix string) (string, error) {
	if x.entries++; x.entries > MaxEntries {
		return "", fmt.Errorf("%w: more than %s entries", artifact.ErrCorrupt, count(MaxEntries))
	}
	name := path.Clean(strings.TrimPrefix(filepath.ToSlash(raw), "./"))
	if !filepath.IsLocal(name) || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("entry %q leaves the package", clip(raw))
	}
	if prefix != "" {
		name = prefix + "/" + name
	}
	return name, nil
}

// keep writes a head file of at most max bytes and returns its content.
func (x *extraction) keep(tr *tar.Reader, h *tar.Header, name string, max int64) ([]byte, error) {
	if h.Size > max {
		return nil, fmt.Errorf("%w: %s is too large: %d bytes, more than %d", artifact.ErrCorrupt, name, h.Size, max)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, tarError(err)
	}
	_, err = x.write(bytes.NewReader(data), h, name)
	return data, err
}

// write writes a regular file (a second entry of one name is refused) and
// returns its sha256.
func (x *extraction) write(r io.Reader, h *tar.Header, name string) (string, error) {
	if dir := path.Dir(name); dir != x.lastDir {
		if err := x.root.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		x.lastDir = dir
	}
	mode := fs.FileMode(h.Mode).Perm()
	f, err := x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode|0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("entry %s appears twice", clip(name))
	}
	if err != nil {
		return "", confine.Wrap(name, err)
	}
	sum := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, sum), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", tarError(err)
	}
	if err := x.root.Chmod(name, mode|0o400); err != nil {
		return "", err
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// symlink makes name a link to target, which must stay inside the package
// (every file of it is read through the package's folder anyway, which
// refuses a link out).
func (x *extraction) symlink(target, name string) error {
	if path.IsAbs(target) || !filepath.IsLocal(path.Join(path.Dir(name), filepath.ToSlash(target))) {
		return fmt.Errorf("entry %s links outside the package (to %s)", clip(name), clip(target))
	}
	if err := x.root.MkdirAll(path.Dir(name), 0o700); err != nil {
		return err
	}
	err := x.root.Symlink(target, name)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("entry %s appears twice", clip(name))
	}
	return confine.Wrap(name, err)
}

// tarError is an error of the tar reader without its package's name.
func tarError(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "archive/tar: "); ok {
		return fmt.Errorf("%w: %s", artifact.ErrCorrupt, s)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the archive ends in the middle of an entry", artifact.ErrCorrupt)
	}
	return err
}

// entryType says what kind of tar entry t is.
func entryType(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "a symbolic link"
	case tar.TypeLink:
		return "a hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "a device"
	case tar.TypeFifo:
		return "a named pipe"
	}
	return fmt.Sprintf("of type %q", t)
}
