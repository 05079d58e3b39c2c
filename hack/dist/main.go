// Command dist turns the folders `make dist` stages into release files:
// one reproducible .tar.gz per folder, the SPDX SBOM of each archive, and
// checksums.txt over them (sha256sum's format), which `make dist` then
// signs with cosign.
//
// Usage:
//
//	dist -o OUT -epoch SECONDS [-sbom HELPER] [-version V] STAGE...
//
// Each STAGE is a folder named as its archive, <name>_<os>_<arch>
// (e.g. out/dist/.stage/ferry_v1.2.3_linux_amd64), holding regular files
// and folders only. For each, dist writes into OUT:
//
//   - <STAGE's name>.tar.gz: its files, sorted, owned by root (0/0),
//     mode 0755 for executables and folders, else 0644, mtime SECONDS
//     (SOURCE_DATE_EPOCH: the commit's time), gzip at the best
//     compression with an empty header. The same staged bytes give the
//     same archive bytes.
//   - <STAGE's name>.spdx.json: the archive's SBOM (SPDX 2.3 JSON), made
//     by HELPER (ferry-sbom, run on this machine) over an OCI image
//     layout whose one layer is the archive itself: the document names
//     each binary with its sha256 and the Go modules linked into it. Its
//     root package, which Syft makes the image, is turned into the
//     archive: its file name, version V, its sha256, purpose ARCHIVE; and
//     ferry's own modules, whose version Syft cannot read from the binaries
//     (built with -buildvcs=false: "UNKNOWN"), get version V. Its time is
//     SECONDS; V is also named as the creator tool's version.
//     Without -sbom, no SBOMs are made.
//
// then checksums.txt: "<sha256 hex>  <file>" for every archive and SBOM,
// sorted by name. Archives are packed two at a time; the SBOMs are made one
// at a time (the helper needs a few hundred MiB). A table of what it wrote
// goes to standard output.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
)

// packJobs is how many archives are packed at once (gzip at its best
// compression keeps one core busy per archive).
const packJobs = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dist", flag.ContinueOnError)
	out := fs.String("o", "", "the folder the release files go to")
	epoch := fs.Int64("epoch", -1, "the archives' mtime and the SBOMs' time, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	helper := fs.String("sbom", "", "the ferry-sbom binary that makes the SBOMs (none without it)")
	version := fs.String("version", "", "the version named as the SBOMs' creator tool")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stages := fs.Args()
	switch {
	case *out == "" || *epoch < 0:
		return errors.New("usage: dist -o OUT -epoch SECONDS [-sbom HELPER] [-version V] STAGE...")
	case len(stages) == 0:
		return errors.New("no folder to pack")
	}
	t := time.Unix(*epoch, 0).UTC()
	archives := make([]archive, len(stages))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(packJobs)
	for i, stage := range stages {
		plat, err := platformOf(filepath.Base(stage))
		if err != nil {
			return err
		}
		archives[i] = archive{stage: stage, name: filepath.Base(stage), platform: plat}
		g.Go(func() error { return archives[i].pack(gctx, *out, t) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var written []file
	for _, a := range archives {
		written = append(written, a.file)
		if *helper == "" {
			continue
		}
		sbom, err := a.writeSBOM(ctx, *out, *helper, *version, t)
		if err != nil {
			return err
		}
		written = append(written, sbom)
	}
	slices.SortFunc(written, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var sums bytes.Buffer
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "FILE\tBYTES\tSHA256\n")
	for _, f := range written {
		fmt.Fprintf(&sums, "%s  %s\n", f.digest.Encoded(), f.name)
		fmt.Fprintf(tw, "%s\t%d\t%s…\n", f.name, f.size, f.digest.Encoded()[:16])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeFile(filepath.Join(*out, "checksums.txt"), sums.Bytes())
}

// platformOf reads "<os>/<arch>" from a name ending in _<os>_<arch>.
func platformOf(name string) (ocispec.Platform, error) {
	parts := strings.Split(name, "_")
	if len(parts) < 3 || parts[len(parts)-2] == "" || parts[len(parts)-1] == "" {
		return ocispec.Platform{}, fmt.Errorf("%s: a staged folder is named <name>_<os>_<arch>", name)
	}
	return ocispec.Platform{OS: parts[len(parts)-2], Architecture: parts[len(parts)-1]}, nil
}

// file is one release file written.
type file struct {
	name   string
	size   int64
	digest digest.Digest
}

// archive is one staged folder and, once packed, its archive.
type archive struct {
	stage    string
	name     string // without .tar.gz
	platform ocispec.Platform
	file     // the .tar.gz
	diffID   digest.Digest
}

// pack writes the archive of a.stage into dir.
func (a *archive) pack(ctx context.Context, dir string, mtime time.Time) error {
	a.file.name = a.name + ".tar.gz"
	p := filepath.Join(dir, a.file.name)
	f, err := os.CreateTemp(dir, "."+a.file.name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	gzHash, tarHash := sha256.New(), sha256.New()
	counted := &counter{w: io.MultiWriter(f, gzHash)}
	zw, err := gzip.NewWriterLevel(counted, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.ModTime = time.Unix(0, 0) // "none" (the zero Time would be written as a date)
	if err := writeTar(ctx, io.MultiWriter(zw, tarHash), a.stage, mtime); err != nil {
		return fmt.Errorf("%s: %w", a.stage, err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	a.size = counted.n
	a.digest = digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(gzHash.Sum(nil)))
	a.diffID = digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(tarHash.Sum(nil)))
	return os.Rename(f.Name(), p)
}

// writeTar writes the tar of the files under root to w: sorted (WalkDir's
// lexical order), root-owned, modes normalised, times mtime.
func writeTar(ctx context.Context, w io.Writer, root string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{
			Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: mtime,
			Uname: "root", Gname: "root", Format: tar.FormatUSTAR,
		}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case info.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
			if info.Mode()&0o111 != 0 {
				h.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: %s is not a regular file or folder", rel, info.Mode().Type())
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != h.Size {
			err = fmt.Errorf("%s changed while it was packed", rel)
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeSBOM makes the SBOM of the packed archive with helper and writes it
// into dir.
func (a *archive) writeSBOM(ctx context.Context, dir, helper, version string, created time.Time) (file, error) {
	tmp, err := os.MkdirTemp("", "ferry-dist-sbom-")
	if err != nil {
		return file{}, err
	}
	defer os.RemoveAll(tmp)
	layout := filepath.Join(tmp, "layout")
	manifest, err := a.writeLayout(layout, filepath.Join(dir, a.file.name))
	if err != nil {
		return file{}, fmt.Errorf("%s: image layout: %w", a.file.name, err)
	}
	cmd := exec.CommandContext(ctx, helper, "--layout", layout, "--manifest", manifest.String(), "--format", "spdx-json",
		"--created", created.Format(time.RFC3339), "--ref", a.file.name, "--tool-version", version)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	doc, err := cmd.Output()
	if err != nil {
		return file{}, fmt.Errorf("%s: %s: %w: %s", a.file.name, helper, err, strings.TrimSpace(stderr.String()))
	}
	if doc, err = describeArchive(doc, version, a.digest); err != nil {
		return file{}, fmt.Errorf("%s: the SBOM of %s: %w", a.file.name, helper, err)
	}
	f := file{name: a.name + ".spdx.json", size: int64(len(doc)), digest: digest.FromBytes(doc)}
	return f, writeFile(filepath.Join(dir, f.name), doc)
}

// ownModule is the path of ferry's module; those under it (sbomgen) are
// ferry's too.
const ownModule = "github.com/ferrypkg/ferry"

// rootPrefix starts the SPDX identifier of the package an SPDX document
// from Syft describes (an image's: SPDXRef-DocumentRoot-Image-…).
const rootPrefix = "SPDXRef-DocumentRoot-"

// describeArchive makes the root package of the SPDX document doc, which
// Syft describes as the image (version: the manifest digest; purl:
// pkg:oci/…), describe the archive: version, the archive's sha256 (sum),
// purpose ARCHIVE, no purl; and gives ferry's own modules of unknown
// version that version (in their purl too). The rest is kept as it is; the
// document is written as ferry-sbom writes it (compact, keys sorted).
func describeArchive(doc []byte, version string, sum digest.Digest) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, err
	}
	var pkgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["packages"], &pkgs); err != nil {
		return nil, fmt.Errorf("packages: %w", err)
	}
	found := 0
	for _, p := range pkgs {
		if err := setOwnVersion(p, version); err != nil {
			return nil, err
		}
		var id string
		if err := json.Unmarshal(p["SPDXID"], &id); err != nil || !strings.HasPrefix(id, rootPrefix) {
			continue
		}
		found++
		p["versionInfo"] = mustJSON(version)
		p["checksums"] = mustJSON([]map[string]string{{"algorithm": "SHA256", "checksumValue": sum.Encoded()}})
		p["primaryPackagePurpose"] = mustJSON("ARCHIVE")
		delete(p, "externalRefs")
	}
	if found != 1 {
		return nil, fmt.Errorf("%d packages named %s…, want 1", found, rootPrefix)
	}
	top["packages"] = mustJSON(pkgs)
	return encodeJSON(top)
}

// setOwnVersion gives the SPDX package p, if it is one of ferry's modules
// with version UNKNOWN, the version and a purl that names it.
func setOwnVersion(p map[string]json.RawMessage, version string) error {
	var name, v string
	if json.Unmarshal(p["name"], &name) != nil || json.Unmarshal(p["versionInfo"], &v) != nil ||
		name != ownModule && !strings.HasPrefix(name, ownModule+"/") || v != "UNKNOWN" {
		return nil
	}
	p["versionInfo"] = mustJSON(version)
	var refs []map[string]json.RawMessage
	if err := json.Unmarshal(p["externalRefs"], &refs); err != nil {
		return fmt.Errorf("%s: externalRefs: %w", name, err)
	}
	for _, r := range refs {
		var typ, loc string
		if json.Unmarshal(r["referenceType"], &typ) == nil && typ == "purl" &&
			json.Unmarshal(r["referenceLocator"], &loc) == nil && loc == "pkg:golang/"+name {
			r["referenceLocator"] = mustJSON(loc + "@" + strings.ReplaceAll(version, "+", "%2B"))
		}
	}
	p["externalRefs"] = mustJSON(refs)
	return nil
}

// encodeJSON encodes v as ferry-sbom does: compact, HTML characters as
// they are, a final newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// mustJSON encodes v, which cannot fail to encode.
func mustJSON(v any) json.RawMessage {
	b, err := encodeJSON(v)
	if err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b, []byte("\n"))
}

// writeLayout writes an OCI image layout at dir holding one image of
// a.platform whose one layer is the archive at path (linked, else copied,
// into the layout), and returns the image manifest's digest.
func (a *archive) writeLayout(dir, path string) (digest.Digest, error) {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", err
	}
	if err := linkOrCopy(path, filepath.Join(blobs, a.digest.Encoded())); err != nil {
		return "", err
	}
	put := func(mediaType string, v any) (ocispec.Descriptor, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		d := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
		return d, writeFile(filepath.Join(blobs, d.Digest.Encoded()), b)
	}
	config, err := put(ocispec.MediaTypeImageConfig, ocispec.Image{
		Platform: a.platform,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{a.diffID}},
	})
	if err != nil {
		return "", err
	}
	manifest, err := put(ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    config,
		Layers:    []ocispec.Descriptor{{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: a.digest, Size: a.size}},
	})
	if err != nil {
		return "", err
	}
	index, err := json.Marshal(ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifest},
	})
	if err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(dir, ocispec.ImageIndexFile), index); err != nil {
		return "", err
	}
	return manifest.Digest, writeFile(filepath.Join(dir, ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"`+ocispec.ImageLayoutVersion+`"}`))
}

// linkOrCopy makes dst a hard link to src, or a copy where links cannot be
// made (another file system).
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeFile writes data to path through a temporary file in its folder.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
