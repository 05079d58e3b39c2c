package injector

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// DefaultChunkPrefix is the file name prefix of payload chunks; chunk i is
// named DefaultChunkPrefix followed by i in decimal, zero-padded to five
// digits ("payload-00000", "payload-00001", ...).
const DefaultChunkPrefix = "payload-"

// ChunkName returns the file name of chunk i with the given prefix.
func ChunkName(prefix string, i int) string {
	s := strconv.Itoa(i)
	if len(s) < 5 {
		s = strings.Repeat("0", 5-len(s)) + s
	}
	return prefix + s
}

// ReassembleOptions say where the chunks are, what they must hash to and
// where the extracted layout goes.
type ReassembleOptions struct {
	// Dir holds the chunk files, e.g. a ConfigMap volume. Chunk keys may be
	// symlinks (as the kubelet mounts them); dot-entries are ignored.
	Dir string
	// Prefix is the chunk file name prefix; if empty, DefaultChunkPrefix.
	Prefix string
	// Count is the number of chunks, named Prefix+00000 … Prefix+Count-1.
	// A missing chunk, or an extra one with the same prefix, is an error.
	Count int
	// Digest is the expected sha256 of the joined chunks, as "sha256:<hex>"
	// or bare hex.
	Digest string
	// Out is the directory the tar is extracted into. It is replaced only
	// when the digest matches; the work happens in Out+".partial", which is
	// removed on any error.
	Out string
}

// Result describes a successful reassembly.
type Result struct {
	// Size is the number of payload bytes read, Files the number of regular
	// files extracted.
	Size  int64
	Files int
}

// Reassemble joins the chunks in numeric order, hashing as it streams and
// extracting the tar into a staging directory. Only when every byte has been
// read and the sha256 matches is the staging directory renamed to Out; on a
// mismatch, a missing or extra chunk or an unsafe tar entry nothing is left
// behind and the error names the cause.
func Reassemble(ctx context.Context, opts ReassembleOptions) (Result, error) {
	want, err := parseSHA256(opts.Digest)
	if err != nil {
		return Result{}, err
	}
	if opts.Out == "" {
		return Result{}, errors.New("reassemble: output directory is empty")
	}
	paths, err := chunkPaths(opts)
	if err != nil {
		return Result{}, err
	}
	staging := filepath.Clean(opts.Out) + ".partial"
	if err := os.RemoveAll(staging); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return Result{}, errors.New("reassemble: create " + staging + ": " + err.Error())
	}
	res, err := extractVerified(ctx, paths, want, staging)
	if err != nil {
		os.RemoveAll(staging)
		return Result{}, err
	}
	if err := os.RemoveAll(opts.Out); err != nil {
		os.RemoveAll(staging)
		return Result{}, err
	}
	if err := os.Rename(staging, opts.Out); err != nil {
		os.RemoveAll(staging)
		return Result{}, err
	}
	return res, nil
}

// chunkPaths lists the chunk files in order after checking that exactly
// Count of them exist with the prefix.
func chunkPaths(opts ReassembleOptions) ([]string, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultChunkPrefix
	}
	if opts.Count <= 0 {
		return nil, errors.New("reassemble: chunk count must be positive, got " + strconv.Itoa(opts.Count))
	}
	entries, err := os.ReadDir(opts.Dir)
	if err != nil {
		return nil, errors.New("reassemble: chunk directory: " + err.Error())
	}
	seen := make([]bool, opts.Count)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasPrefix(name, prefix) {
			continue
		}
		i, err := strconv.Atoi(name[len(prefix):])
		if err != nil || i < 0 || i >= opts.Count || name != ChunkName(prefix, i) {
			return nil, errors.New("reassemble: unexpected chunk " + filepath.Join(opts.Dir, name) + " (expected " + strconv.Itoa(opts.Count) + " chunks)")
		}
		seen[i] = true
	}
	paths := make([]string, opts.Count)
	for i := range paths {
		paths[i] = filepath.Join(opts.Dir, ChunkName(prefix, i))
		if !seen[i] {
			return nil, errors.New("reassemble: missing chunk " + paths[i])
		}
		// Follow the kubelet's symlinks into ..data: the target must be a
		// readable regular file.
		fi, err := os.Stat(paths[i])
		if err != nil {
			return nil, errors.New("reassemble: chunk " + paths[i] + ": " + err.Error())
		}
		if !fi.Mode().IsRegular() {
			return nil, errors.New("reassemble: chunk " + paths[i] + " is not a regular file")
		}
	}
	return paths, nil
}

// chunkReader reads the chunk files one after the other, opening each only
// when the previous one is exhausted.
type chunkReader struct {
	ctx   context.Context
	paths []string
	cur   *os.File
	n     int64
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			if len(r.paths) == 0 {
				return 0, io.EOF
			}
			if err := r.ctx.Err(); err != nil {
				return 0, err
			}
			f, err := os.Open(r.paths[0])
			if err != nil {
				return 0, errors.New("reassemble: open chunk: " + err.Error())
			}
			r.cur = f
		}
		n, err := r.cur.Read(p)
		r.n += int64(n)
		if err == io.EOF {
			r.cur.Close()
			r.cur = nil
			r.paths = r.paths[1:]
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			return n, errors.New("reassemble: read chunk " + r.paths[0] + ": " + err.Error())
		}
		return n, nil
	}
}

func (r *chunkReader) Close() {
	if r.cur != nil {
		r.cur.Close()
	}
}

// hashingReader feeds everything it reads into h.
type hashingReader struct {
	r io.Reader
	h hash.Hash
}

func (r hashingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	return n, err
}

func extractVerified(ctx context.Context, paths []string, want []byte, dir string) (Result, error) {
	cr := &chunkReader{ctx: ctx, paths: paths}
	defer cr.Close()
	h := sha256.New()
	hr := hashingReader{r: bufio.NewReaderSize(cr, 1<<20), h: h}
	files, extractErr := extract(tar.NewReader(hr), dir)
	// Hash every remaining byte (tar padding, or the rest after a bad
	// entry) so a digest mismatch is reported in preference to the
	// symptom it caused.
	if _, err := io.Copy(io.Discard, hr); err != nil && extractErr == nil {
		extractErr = err
	}
	got := h.Sum(nil)
	if !bytesEqual(got, want) {
		return Result{}, errors.New("reassemble: payload digest mismatch: want sha256:" + hex.EncodeToString(want) + ", got sha256:" + hex.EncodeToString(got) + " (" + strconv.FormatInt(cr.n, 10) + " bytes in " + strconv.Itoa(len(paths)) + " chunks)")
	}
	if extractErr != nil {
		return Result{}, extractErr
	}
	return Result{Size: cr.n, Files: files}, nil
}

func bytesEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := range a {
		v |= a[i] ^ b[i]
	}
	return v == 0
}

// extract writes regular files and directories from tr below dir, refusing
// absolute names, ".." elements, links, devices and anything else.
func extract(tr *tar.Reader, dir string) (int, error) {
	buf := make([]byte, 1<<20)
	files := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, errors.New("extract: " + err.Error())
		}
		name, err := safeName(hdr.Name)
		if err != nil {
			return files, err
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return files, errors.New("extract: " + err.Error())
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return files, errors.New("extract: " + err.Error())
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return files, errors.New("extract: " + err.Error())
			}
			n, err := io.CopyBuffer(f, tr, buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, errors.New("extract " + name + ": " + err.Error())
			}
			if n != hdr.Size {
				return files, errors.New("extract " + name + ": short file")
			}
			files++
		default:
			return files, errors.New("extract: tar entry " + strconv.Quote(hdr.Name) + " has type " + strconv.QuoteRune(rune(hdr.Typeflag)) + "; only regular files and directories are allowed")
		}
	}
}

// safeName checks a tar entry name and returns it cleaned.
func safeName(name string) (string, error) {
	bad := func(why string) (string, error) {
		return "", errors.New("extract: tar entry " + strconv.Quote(name) + " refused: " + why)
	}
	if name == "" {
		return bad("empty name")
	}
	if strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return bad("absolute or invalid path")
	}
	for _, el := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if el == ".." {
			return bad("path traversal")
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return bad("names the extraction root")
	}
	return clean, nil
}

// parseSHA256 accepts "sha256:<hex>" or bare hex.
func parseSHA256(s string) ([]byte, error) {
	h := strings.TrimPrefix(s, "sha256:")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size || strings.ToLower(h) != h {
		return nil, errors.New("invalid sha256 digest " + strconv.Quote(s))
	}
	return b, nil
}

// FileSHA256 returns the hex sha256 of the file at p.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
