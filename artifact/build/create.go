package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/internal/diskspace"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// CreateOptions configures Create. The zero value writes a .tar.zst next to
// the working directory, named <name>-<version>.tar.zst.
type CreateOptions struct {
	// Output is the archive path; if empty, <name>-<version><ext> in the
	// current folder. The format follows the extension (.tar or .tar.zst)
	// unless Format is set.
	Output string
	// Format is the archive format; if empty, taken from Output's extension,
	// FormatTarZstd by default.
	Format artifact.Format
	// Remote says how to reach registries for images and charts.
	Remote artifact.RemoteOptions
	// Epoch is the time written where a time must appear (tar mtimes, the
	// created annotation); if nil, the Unix epoch and no created annotation.
	// SourceDateEpoch reads it from SOURCE_DATE_EPOCH.
	Epoch *time.Time
	// Progress, if set, receives progress reports.
	Progress artifact.ProgressFunc
	// Charts packages the definition's charts in folders and .tgz files;
	// without one such a definition fails. Package artifact/chart has
	// Helm's (chart.Packager{}).
	Charts ChartPackager
	// SignKey, if set, signs the root digest; the signature is stored in
	// the package as Sign stores it.
	SignKey artifact.Signer
	// SBOM, if set, makes an SBOM of every image platform manifest kept
	// (unless the definition says `sbom: {enabled: false}`), in the
	// definition's format, SPDX JSON by default. Package artifact/sbomexec
	// has one running the ferry-sbom helper (Syft). Nil makes none.
	SBOM SBOMGenerator
	// Render renders charts for the components with `findImages: true`
	// (package artifact/chartrender has Helm's: chartrender.Renderer); without one
	// such a component with charts fails.
	Render ChartRenderer
	// Git fetches the definition's git repositories; without one such a
	// definition fails. Package artifact/gitrepo has go-git's
	// (gitrepo.Fetcher).
	Git GitFetcher
}

// GitFetcher resolves a git repository's ref to a commit and pushes the
// repository at that commit to dst as an OCI artifact in the format Flux's
// OCIRepository reads (see Repository), returning its manifest and the
// record ferry.json keeps (all but Size, which create counts). A src with
// a Path is a local repository: Path is slash-separated and relative to
// dir, the definition's folder, and nothing outside dir may be read for it.
type GitFetcher interface {
	FetchGit(ctx context.Context, src definition.Repository, dir *os.Root, dst content.Pusher) (artifact.Repository, ocispec.Descriptor, error)
}

// CreateResult describes a created package.
type CreateResult struct {
	Path   string
	Root   ocispec.Descriptor
	Config *artifact.Config
	// Size is the archive's size in bytes; Blobs the number of distinct blobs.
	Size  int64
	Blobs int
	// Found compares, for each component with `findImages: true`, the
	// images its charts and manifests use with those it lists: create
	// added the Missing ones.
	Found []ComponentImages
}

// SourceDateEpoch returns the time SOURCE_DATE_EPOCH names, or nil when it is unset.
func SourceDateEpoch() (*time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return nil, nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	// Years 1970 to 9999: a tar header and RFC 3339 hold no other.
	if err != nil || sec < 0 || sec > 253402300799 {
		return nil, fmt.Errorf("SOURCE_DATE_EPOCH=%.40q is not a number of seconds from 1970 to 9999", v)
	}
	t := time.Unix(sec, 0).UTC()
	return &t, nil
}

// Create builds the package a definition describes and writes it as one
// archive, atomically: on any error no file is left at Output.
func Create(ctx context.Context, def *definition.Definition, opts CreateOptions) (*CreateResult, error) {
	b := newBuilder(def, opts)
	defer b.cleanup()
	folder, err := def.OpenFolder()
	if err != nil {
		return nil, err
	}
	b.folder = folder
	pkg, err := b.build(ctx)
	if err != nil {
		return nil, err
	}
	if opts.SignKey != nil {
		if err := pkg.Sign(opts.SignKey); err != nil {
			return nil, err
		}
	}
	out := opts.Output
	if out == "" {
		out = def.Metadata.Name + "-" + def.Metadata.Version + artifact.FormatTarZstd.Ext()
	}
	format := opts.Format
	if format == "" {
		format = artifact.FormatFromPath(out)
	}
	size, err := artifact.WriteFileAtomic(out, func(w io.Writer) error {
		return pkg.WriteArchive(ctx, w, format, opts.Progress)
	})
	if err != nil {
		return nil, err
	}
	return &CreateResult{Path: out, Root: pkg.Root, Config: pkg.Config, Size: size, Blobs: len(pkg.Blobs), Found: b.found}, nil
}

type builder struct {
	def  *definition.Definition
	opts CreateOptions
	plan artifact.Plan
	// folder is the definition's folder: every file it names is read
	// through it.
	folder *definition.Folder
	// repos are the git repositories added so far, by Key.
	repos map[string]string
	// spool holds large blobs fetchers pushed, until the archive is
	// written; made when first needed.
	spool *scratch.Dir
	// found is what findImages found, per component that asks.
	found []ComponentImages
	// policies are the image policies ferry.json carries.
	policies []imagesig.Policy
}

// cleanup removes the spool folder and closes the definition's folder.
func (b *builder) cleanup() {
	b.spool.Remove()
	if b.folder != nil {
		b.folder.Close()
	}
}

// repository resolves a git repository to a commit and adds its artifact.
func (b *builder) repository(ctx context.Context, gd definition.Repository) (ocispec.Descriptor, artifact.Repository, error) {
	if b.opts.Git == nil {
		return ocispec.Descriptor{}, artifact.Repository{}, errors.New("git repositories need a git fetcher (this build of ferry has none)")
	}
	rel := gd.Path
	if gd.Path != "" {
		n, err := b.folder.CleanPath(gd.Path)
		if err != nil {
			return ocispec.Descriptor{}, artifact.Repository{}, err
		}
		gd.Path = n
	}
	dst := &blobPusher{b: b}
	rec, desc, err := b.opts.Git.FetchGit(ctx, gd, b.folder.Root(), dst)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Repository{}, err
	}
	if prev, dup := b.repos[rec.Key]; dup {
		return ocispec.Descriptor{}, artifact.Repository{}, fmt.Errorf("repository %s is the same as %s, already in the package", rec.URL, prev)
	}
	if b.repos == nil {
		b.repos = map[string]string{}
	}
	b.repos[rec.Key] = rec.URL
	if _, ok := b.plan.Blobs[desc.Digest]; !ok {
		return ocispec.Descriptor{}, artifact.Repository{}, fmt.Errorf("the git fetcher did not store the manifest %s of %s", desc.Digest, rec.URL)
	}
	rec.Source = filepath.ToSlash(rel)
	rec.Digest, rec.Size = desc.Digest, dst.size
	return ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}, rec, nil
}

// blobPusher adds what a fetcher pushes to the package being built, each
// blob checked against its descriptor, and counts the bytes.
type blobPusher struct {
	b    *builder
	size int64
}

// Blobs larger than MaxManifestSize go to the builder's spool folder, to
// be read (and checked again) when the archive is written.
func (p *blobPusher) Push(_ context.Context, d ocispec.Descriptor, r io.Reader) error {
	p.size += d.Size
	if d.Size <= artifact.MaxManifestSize {
		data, err := content.ReadAll(r, d)
		if err != nil {
			return err
		}
		p.b.add(&artifact.Blob{Desc: d, Data: data})
		return nil
	}
	if p.b.spool == nil {
		dir, err := scratch.MkdirTemp("", "ferry-create-")
		if err != nil {
			return err
		}
		p.b.spool = dir
	}
	path := filepath.Join(p.b.spool.Path, d.Digest.Encoded())
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	vr := content.NewVerifyReader(r, d)
	n, err := io.Copy(f, vr)
	if err == nil {
		err = vr.Verify()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		// A full temporary folder is named with its room (TMPDIR moves it).
		return diskspace.Explain(path, n, err)
	}
	p.b.add(&artifact.Blob{Desc: d, Open: func(context.Context) (io.ReadCloser, error) { return os.Open(path) }})
	return nil
}

func newBuilder(def *definition.Definition, opts CreateOptions) *builder {
	b := &builder{def: def, opts: opts}
	b.plan.Blobs = map[digest.Digest]*artifact.Blob{}
	b.plan.Mtime = time.Unix(0, 0).UTC()
	if opts.Epoch != nil {
		b.plan.Mtime = opts.Epoch.UTC()
	}
	return b
}

func (b *builder) add(bl *artifact.Blob) {
	if prev, ok := b.plan.Blobs[bl.Desc.Digest]; ok {
		if prev.Data == nil && bl.Data != nil {
			prev.Data, prev.Open = bl.Data, nil
		}
		return
	}
	b.plan.Blobs[bl.Desc.Digest] = bl
}

// addData stores data as a blob and returns its descriptor.
func (b *builder) addData(mediaType string, data []byte) ocispec.Descriptor {
	d := content.NewDescriptorFromBytes(mediaType, data)
	b.add(&artifact.Blob{Desc: d, Data: data})
	return d
}

// addJSON stores v, canonically encoded, as a blob. Every reader refuses
// a manifest, an index or ferry.json over MaxManifestSize: one that would
// be larger is refused here, before anything is written.
func (b *builder) addJSON(mediaType string, v any) (ocispec.Descriptor, []byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	if len(data) > artifact.MaxManifestSize {
		what := mediaType
		if mediaType == artifact.MediaTypeConfig {
			what = "ferry.json"
		}
		return ocispec.Descriptor{}, nil, fmt.Errorf("the package would hold a %s of %d bytes, more than the %d a package allows: too many files, images, charts or manifests for one package (split it into several)", what, len(data), artifact.MaxManifestSize)
	}
	return b.addData(mediaType, data), data, nil
}

func (b *builder) build(ctx context.Context) (*artifact.Plan, error) {
	def := b.def
	cfg := &artifact.Config{
		SchemaVersion: artifact.ConfigSchemaVersion,
		Name:          def.Metadata.Name,
		Version:       def.Metadata.Version,
		Description:   def.Metadata.Description,
	}
	if b.opts.Epoch != nil {
		cfg.Created = b.opts.Epoch.UTC().Format(time.RFC3339)
	}
	for _, p := range def.Platforms {
		cfg.Platforms = append(cfg.Platforms, p.String())
	}
	policies, err := b.imagePolicies()
	if err != nil {
		return nil, err
	}
	cfg.ImagePolicies, b.policies = policies, policies
	var rootEntries []ocispec.Descriptor
	var layers []ocispec.Descriptor
	for ci, cd := range def.Components {
		comp := artifact.Component{Name: cd.Name, Description: cd.Description, Required: cd.Required}
		if cd.FindImages {
			added, err := b.findImages(ctx, ci, cd)
			if err != nil {
				return nil, err
			}
			cd.Images = append(slices.Clip(cd.Images), added...)
		}
		for ii, img := range cd.Images {
			field := fmt.Sprintf("components[%d].images[%d]", ci, ii)
			stored, rec, kept, sigs, err := b.image(ctx, cd.Name, img)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: img.Line, Field: field, Msg: err.Error(), Err: err}
			}
			sboms, sbomRecs, err := b.sboms(ctx, cd.Name, img.Ref, kept)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: img.Line, Field: field, Msg: err.Error(), Err: err}
			}
			rec.SBOMs = sbomRecs
			if err := b.checkImagePolicy(ctx, cd, img, &rec, stored, sigs); err != nil {
				return nil, &definition.Error{File: def.File, Line: img.Line, Field: field, Msg: err.Error(), Err: err}
			}
			comp.Images = append(comp.Images, rec)
			stored.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindImage, artifact.AnnotationComponent: cd.Name, artifact.AnnotationImageRef: img.Ref}
			rootEntries = append(rootEntries, stored)
			rootEntries = append(rootEntries, sboms...)
			rootEntries = append(rootEntries, sigs...)
			b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: img.Ref})
		}
		for hi, ch := range cd.Charts {
			field := fmt.Sprintf("components[%d].charts[%d]", ci, hi)
			mdesc, rec, err := b.chart(ctx, ch)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: ch.Line, Field: field, Msg: err.Error(), Err: err}
			}
			comp.Charts = append(comp.Charts, rec)
			mdesc.Annotations = map[string]string{
				artifact.AnnotationKind: artifact.KindChart, artifact.AnnotationComponent: cd.Name,
				ocispec.AnnotationTitle: rec.Name, ocispec.AnnotationVersion: rec.Version,
			}
			rootEntries = append(rootEntries, mdesc)
			b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: "chart " + rec.Name})
		}
		for gi, gd := range cd.Repositories {
			field := fmt.Sprintf("components[%d].repositories[%d]", ci, gi)
			mdesc, rec, err := b.repository(ctx, gd)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: gd.Line, Field: field, Msg: err.Error(), Err: err}
			}
			comp.Repositories = append(comp.Repositories, rec)
			mdesc.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindGit, artifact.AnnotationComponent: cd.Name, artifact.AnnotationGitURL: rec.URL}
			rootEntries = append(rootEntries, mdesc)
			b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: "git " + rec.URL + " " + rec.Revision})
		}
		for mi, md := range cd.Manifests {
			field := fmt.Sprintf("components[%d].manifests[%d]", ci, mi)
			data, files, err := manifestBundle(b.folder, md)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: md.Line, Field: field, Msg: err.Error(), Err: err}
			}
			d := b.addData(artifact.MediaTypeManifestBundle, data)
			comp.Manifests = append(comp.Manifests, artifact.Manifest{Name: md.Name, Namespace: md.Namespace, Files: files, Digest: d.Digest, Size: d.Size})
			d.Annotations = map[string]string{artifact.AnnotationComponent: cd.Name, ocispec.AnnotationTitle: md.Name}
			layers = append(layers, d)
		}
		for fi, fd := range cd.Files {
			field := fmt.Sprintf("components[%d].files[%d]", ci, fi)
			d, err := b.file(fd)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: fd.Line, Field: field, Msg: err.Error(), Err: err}
			}
			comp.Files = append(comp.Files, artifact.File{Source: filepath.ToSlash(fd.Source), Target: fd.Target, Mode: fd.Mode, Digest: d.Digest, Size: d.Size})
			d.Annotations = map[string]string{artifact.AnnotationComponent: cd.Name, ocispec.AnnotationTitle: fd.Target}
			layers = append(layers, d)
		}
		for ai, ad := range cd.Advisories {
			field := fmt.Sprintf("components[%d].advisories[%d]", ci, ai)
			d, rec, err := b.advisories(ad)
			if err != nil {
				return nil, &definition.Error{File: def.File, Line: ad.Line, Field: field, Msg: err.Error(), Err: err}
			}
			comp.Advisories = append(comp.Advisories, rec)
			d.Annotations = map[string]string{artifact.AnnotationComponent: cd.Name, ocispec.AnnotationTitle: rec.Source}
			layers = append(layers, d)
			b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: fmt.Sprintf("advisories %s (%d records)", rec.Source, rec.Records)})
		}
		cfg.Components = append(cfg.Components, comp)
	}

	cfgDesc, cfgData, err := b.addJSON(artifact.MediaTypeConfig, cfg)
	if err != nil {
		return nil, err
	}
	if layers == nil {
		layers = []ocispec.Descriptor{}
	}
	pkgAnn := map[string]string{artifact.AnnotationPackageName: cfg.Name, artifact.AnnotationPackageVersion: cfg.Version}
	pkgManifest := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: artifact.ArtifactTypePackage,
		Config:       cfgDesc,
		Layers:       layers,
		Annotations:  pkgAnn,
	}
	pkgDesc, _, err := b.addJSON(ocispec.MediaTypeImageManifest, pkgManifest)
	if err != nil {
		return nil, err
	}
	pkgDesc.ArtifactType = artifact.ArtifactTypePackage
	pkgDesc.Annotations = map[string]string{artifact.AnnotationKind: artifact.KindPackage}

	rootAnn := map[string]string{
		ocispec.AnnotationRefName:         cfg.Version,
		artifact.AnnotationPackageName:    cfg.Name,
		artifact.AnnotationPackageVersion: cfg.Version,
	}
	if cfg.Created != "" {
		rootAnn[ocispec.AnnotationCreated] = cfg.Created
	}
	root := ocispec.Index{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageIndex,
		ArtifactType: artifact.ArtifactTypePackage,
		Manifests:    append([]ocispec.Descriptor{pkgDesc}, rootEntries...),
		Annotations:  rootAnn,
	}
	rootDesc, _, err := b.addJSON(ocispec.MediaTypeImageIndex, root)
	if err != nil {
		return nil, err
	}
	rootDesc.ArtifactType = artifact.ArtifactTypePackage
	b.plan.Config, b.plan.ConfigData = cfg, cfgData
	b.plan.Root = rootDesc
	b.plan.Index = []ocispec.Descriptor{rootDesc}
	b.plan.IndexJSON, err = artifact.LayoutIndex(rootDesc, cfg.Version, nil)
	if err != nil {
		return nil, err
	}
	return &b.plan, nil
}

func (b *builder) progress(p artifact.Progress) {
	if b.opts.Progress != nil {
		b.opts.Progress(p)
	}
}

// file adds a plain file as a layer; its bytes are read again (and checked)
// when the archive is written.
func (b *builder) file(fd definition.File) (ocispec.Descriptor, error) {
	f, _, err := b.folder.Open(fd.Source)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer f.Close()
	dg := digest.SHA256.Digester()
	n, err := io.Copy(dg.Hash(), f)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%s: %w", fd.Source, err)
	}
	d := ocispec.Descriptor{MediaType: artifact.MediaTypeFile, Digest: dg.Digest(), Size: n}
	src := fd.Source
	b.add(&artifact.Blob{Desc: d, Open: func(context.Context) (io.ReadCloser, error) {
		f, _, err := b.folder.Open(src)
		return f, err
	}})
	return d, nil
}
