package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// chartLimit bounds a chart archive held in memory.
const chartLimit = 64 << 20

// chart adds a Helm chart as a Helm OCI artifact and returns its manifest's
// descriptor and record.
func (b *builder) chart(ctx context.Context, cd ChartDef) (ocispec.Descriptor, Chart, error) {
	if cd.URL != "" {
		return b.remoteChart(ctx, cd)
	}
	full, err := b.def.Resolve(cd.Path)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	fi, err := os.Stat(full)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	var tgz []byte
	var ch *chart.Chart
	if fi.IsDir() {
		if ch, err = loader.LoadDir(full); err != nil {
			return ocispec.Descriptor{}, Chart{}, fmt.Errorf("load chart %s: %w", cd.Path, err)
		}
		if tgz, err = packageChart(ch, b.plan.mtime); err != nil {
			return ocispec.Descriptor{}, Chart{}, fmt.Errorf("package chart %s: %w", cd.Path, err)
		}
	} else {
		if fi.Size() > chartLimit {
			return ocispec.Descriptor{}, Chart{}, fmt.Errorf("chart %s is larger than %d bytes", cd.Path, chartLimit)
		}
		if tgz, err = os.ReadFile(full); err != nil {
			return ocispec.Descriptor{}, Chart{}, err
		}
		if ch, err = loader.LoadArchive(bytes.NewReader(tgz)); err != nil {
			return ocispec.Descriptor{}, Chart{}, fmt.Errorf("load chart %s: %w", cd.Path, err)
		}
	}
	meta := ch.Metadata
	cfgDesc, _, err := b.addJSON(MediaTypeHelmConfig, meta)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	layer := b.addData(MediaTypeHelmChart, tgz)
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
		return ocispec.Descriptor{}, Chart{}, err
	}
	rec := Chart{Name: meta.Name, Version: meta.Version, AppVersion: meta.AppVersion, Source: filepath.ToSlash(cd.Path),
		Digest: mdesc.Digest, Size: mdesc.Size + cfgDesc.Size + layer.Size, Namespace: cd.Namespace, ReleaseName: cd.ReleaseName}
	return mdesc, rec, nil
}

// remoteChart copies a chart stored in an OCI registry as it is, so its
// digest stays the publisher's.
func (b *builder) remoteChart(ctx context.Context, cd ChartDef) (ocispec.Descriptor, Chart, error) {
	ref := strings.TrimPrefix(cd.URL, "oci://") + ":" + strings.ReplaceAll(cd.Version, "+", "_")
	repo, err := b.opts.Remote.Repository(ref)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	desc, err := repo.Resolve(ctx, repo.Reference.Reference)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, fmt.Errorf("resolve chart %s: %w", ref, err)
	}
	if !isManifest(desc.MediaType) {
		return ocispec.Descriptor{}, Chart{}, fmt.Errorf("%s is not a Helm chart (media type %s)", ref, desc.MediaType)
	}
	data, err := fetchSmall(ctx, repo, desc)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return ocispec.Descriptor{}, Chart{}, fmt.Errorf("%s: parse manifest: %w", ref, err)
	}
	if m.Config.MediaType != MediaTypeHelmConfig {
		return ocispec.Descriptor{}, Chart{}, fmt.Errorf("%s is not a Helm chart (config media type %s)", ref, m.Config.MediaType)
	}
	cfgData, err := fetchSmall(ctx, repo, m.Config)
	if err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	var meta chart.Metadata
	if err := json.Unmarshal(cfgData, &meta); err != nil {
		return ocispec.Descriptor{}, Chart{}, fmt.Errorf("%s: parse chart metadata: %w", ref, err)
	}
	size := desc.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	if err := b.node(ctx, repo, desc, data, map[digest.Digest]bool{}); err != nil {
		return ocispec.Descriptor{}, Chart{}, err
	}
	rec := Chart{Name: meta.Name, Version: meta.Version, AppVersion: meta.AppVersion, Source: cd.URL,
		Digest: desc.Digest, Size: size + m.Config.Size, Namespace: cd.Namespace, ReleaseName: cd.ReleaseName}
	return ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}, rec, nil
}

// packageChart packages a loaded chart with the Helm SDK and rewrites the
// archive with fixed times and ownership, and its entries in one order —
// Chart.yaml first, then by path — so the same chart gives the same bytes.
// The order matters: Helm's loader keeps subcharts (folders or .tgz files
// under charts/) in map order, and chartutil.Save writes them in that order.
func packageChart(ch *chart.Chart, mtime time.Time) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "ferry-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path, err := chartutil.Save(ch, tmp)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	type entry struct {
		h    *tar.Header
		data []byte
	}
	var entries []entry
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		nh := &tar.Header{Typeflag: h.Typeflag, Name: h.Name, Mode: h.Mode, Size: h.Size, ModTime: mtime, Format: tar.FormatPAX}
		entries = append(entries, entry{nh, data})
	}
	chartYAML := ch.Name() + "/" + chartutil.ChartfileName
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i].h.Name, entries[j].h.Name
		if (a == chartYAML) != (b == chartYAML) {
			return a == chartYAML
		}
		if a != b {
			return a < b
		}
		return bytes.Compare(entries[i].data, entries[j].data) < 0
	})
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(e.h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
