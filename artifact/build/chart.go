package build

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// A ChartPackager turns a Helm chart on disk into what a Helm OCI artifact
// holds. Package artifact/chart's Packager is Helm's SDK doing it; Create
// needs one for a definition with charts in folders or .tgz files
// (CreateOptions.Charts).
type ChartPackager interface {
	// PackageChart packages the chart at name in fsys (slash-separated), a
	// folder or a .tgz archive (kept as it is): the chart archive, the same
	// bytes for the same chart (entries' times set to mtime), and its
	// metadata as Helm stores it in an OCI config (Chart.yaml as JSON). It
	// reads nothing but fsys (Create passes the definition's folder,
	// confined: see Folder). Its errors need not name the chart: Create
	// adds "load chart <path>".
	PackageChart(ctx context.Context, fsys fs.FS, name string, mtime time.Time) (archive, config []byte, err error)
}

// chartMeta is what a package records of a chart's metadata.
type chartMeta struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
}

// chart adds a Helm chart as a Helm OCI artifact and returns its manifest's
// descriptor and record.
func (b *builder) chart(ctx context.Context, cd definition.Chart) (ocispec.Descriptor, artifact.Chart, error) {
	if cd.URL != "" {
		return b.remoteChart(ctx, cd)
	}
	name, err := b.folder.CleanPath(cd.Path)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	fi, err := b.folder.Stat(cd.Path)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	if b.opts.Charts == nil {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("chart %s: no chart packager given (CreateOptions.Charts; package artifact/chart has Helm's)", cd.Path)
	}
	if !fi.IsDir() && fi.Size() > artifact.MaxChartSize {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("chart %s is larger than %d bytes", cd.Path, artifact.MaxChartSize)
	}
	tgz, config, err := b.opts.Charts.PackageChart(ctx, b.folder.FS(), name, b.plan.Mtime)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("load chart %s: %w", cd.Path, err)
	}
	var meta chartMeta
	if err := json.Unmarshal(config, &meta); err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("chart %s: its metadata: %w", cd.Path, err)
	}
	cfgDesc := b.addData(artifact.MediaTypeHelmConfig, config)
	layer := b.addData(artifact.MediaTypeHelmChart, tgz)
	ann := map[string]string{ocispec.AnnotationTitle: meta.Name, ocispec.AnnotationVersion: meta.Version}
	if meta.Description != "" {
		ann[ocispec.AnnotationDescription] = meta.Description
	}
	if b.opts.Epoch != nil {
		ann[ocispec.AnnotationCreated] = b.opts.Epoch.UTC().Format(time.RFC3339)
	}
	m := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   ocispec.MediaTypeImageManifest,
		Config:      cfgDesc,
		Layers:      []ocispec.Descriptor{layer},
		Annotations: ann,
	}
	mdesc, _, err := b.addJSON(ocispec.MediaTypeImageManifest, m)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	rec := artifact.Chart{Name: meta.Name, Version: meta.Version, AppVersion: meta.AppVersion, Source: filepath.ToSlash(cd.Path),
		Digest: mdesc.Digest, Size: mdesc.Size + cfgDesc.Size + layer.Size, Namespace: cd.Namespace, ReleaseName: cd.ReleaseName}
	return mdesc, rec, nil
}

// remoteChart copies a chart stored in an OCI registry as it is, so its
// digest stays the publisher's.
func (b *builder) remoteChart(ctx context.Context, cd definition.Chart) (ocispec.Descriptor, artifact.Chart, error) {
	ref := strings.TrimPrefix(cd.URL, "oci://") + ":" + strings.ReplaceAll(cd.Version, "+", "_")
	repo, err := b.opts.Remote.Repository(ref)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	desc, err := repo.Resolve(ctx, repo.Reference.Reference)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, artifact.WithRef("resolve chart", ref, err)
	}
	if !graph.IsManifest(desc.MediaType) {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("%s is not a Helm chart (media type %s)", ref, desc.MediaType)
	}
	data, err := artifact.FetchManifest(ctx, repo, desc)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("%s: parse manifest: %w", ref, err)
	}
	if m.Config.MediaType != artifact.MediaTypeHelmConfig {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("%s is not a Helm chart (config media type %s)", ref, m.Config.MediaType)
	}
	cfgData, err := artifact.FetchManifest(ctx, repo, m.Config)
	if err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	var meta chartMeta
	if err := json.Unmarshal(cfgData, &meta); err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, fmt.Errorf("%s: parse chart metadata: %w", ref, err)
	}
	size := desc.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	if err := b.node(ctx, repo, desc, data, map[digest.Digest]bool{}); err != nil {
		return ocispec.Descriptor{}, artifact.Chart{}, err
	}
	rec := artifact.Chart{Name: meta.Name, Version: meta.Version, AppVersion: meta.AppVersion, Source: cd.URL,
		Digest: desc.Digest, Size: size + m.Config.Size, Namespace: cd.Namespace, ReleaseName: cd.ReleaseName}
	return ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}, rec, nil
}
