package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/internal/graph"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// DefaultKubeVersion is the Kubernetes version charts are rendered for when
// none is given: a recent one, since `helm template`'s own default (v1.20)
// is refused by charts with a kubeVersion constraint.
const DefaultKubeVersion = "v1.35.4"

// A ChartRenderer renders a Helm chart as deploy installs it, without a
// cluster, as `helm template` does. Package artifact/chartrender's Renderer is
// Helm's SDK doing it; FindImages needs one for a definition with charts,
// and Create for a component with `findImages: true`.
type ChartRenderer interface {
	// RenderChart renders the chart archive (.tgz) for rel, its hooks and
	// the CRDs of its crds/ folders included. Its errors need not name the
	// chart: the caller does.
	RenderChart(ctx context.Context, archive []byte, rel ChartRelease) ([]RenderedManifest, error)
}

// ChartRelease is what a chart is rendered for: the release deploy would
// install (definition.Chart's release name and namespace, defaults as
// Chart.Release), with Values (nil: the chart's defaults), for a cluster of
// KubeVersion (DefaultKubeVersion if empty).
type ChartRelease struct {
	Name, Namespace string
	Values          map[string]any
	KubeVersion     string
}

// RenderedManifest is rendered YAML, one or more documents. A document
// after a "# Source: <template>" line (as Helm writes them) comes from that
// template; Source names the template of the ones before any such line.
// Test says they are test hooks (`helm.sh/hook: test`), run only by
// `helm test`.
type RenderedManifest struct {
	Source string
	Data   []byte
	Test   bool
}

// FindImagesOptions configures FindImages. A definition with charts in
// folders or .tgz files needs Charts, and one with any chart needs Render.
type FindImagesOptions struct {
	// Charts packages charts as Create does (package artifact/chart's
	// Packager); Render renders them (package artifact/chartrender's
	// Renderer).
	Charts ChartPackager
	Render ChartRenderer
	// Remote says how to reach registries for oci:// charts.
	Remote artifact.RemoteOptions
	// Values are given to every chart, as deploy's --set gives them; nil
	// renders the charts' defaults.
	Values map[string]any
	// KubeVersion is the cluster version charts are rendered for;
	// DefaultKubeVersion if empty.
	KubeVersion string
}

// FoundImages is what FindImages found, per component of the definition,
// in the definition's order.
type FoundImages struct {
	Components []ComponentImages `json:"components"`
}

// ComponentImages compares the images a component's charts and manifests
// use with the images it lists. Missing are found but not listed, Unused
// listed but not found, Present both (as listed); Test are found only in
// test hooks and not listed (deploy never runs them). A listed image
// matches a found one of the same repository and the same digest when
// both have one, else the same tag.
//
// Maybe are image-like strings found outside image fields (container
// arguments, commands and environment values, ConfigMap data,
// annotations), neither images nor listed: images the software may pull
// (cert-manager's ACME solver, given to its controller as an argument;
// Istio's proxy, named in its injector's values), or words that only look
// like one. A listed image that matches one is Present, and in Images
// marked Maybe. Placeholders are
// the known placeholders (see Placeholders) found in image fields: never
// images, never in Missing. MaybeLimited says that the search for
// them stopped early: past MaxMaybe of them, or past 4 MiB of distinct
// image-like words, too many for a person to choose among.
// Each list is sorted.
type ComponentImages struct {
	Name         string        `json:"name"`
	Images       []FoundImage  `json:"images"`
	Missing      []string      `json:"missing"`
	Unused       []string      `json:"unused"`
	Present      []string      `json:"present"`
	Test         []string      `json:"test"`
	Maybe        []FoundImage  `json:"maybe"`
	Placeholders []Placeholder `json:"placeholders"`
	MaybeLimited bool          `json:"maybeLimited,omitempty"`
}

// Placeholder is a known placeholder found where an image goes: its
// reference, normalized, why it is not an image, and where it is written.
type Placeholder struct {
	Ref   string   `json:"ref"`
	Why   string   `json:"why"`
	Where []string `json:"where"`
}

// FoundImage is an image a component's charts or manifests use: its
// reference, normalized as the definition's (docker.io/library/nginx:1.27),
// whether only test hooks use it, whether it is a maybe image (found
// outside image fields; among the images because the component lists it),
// and where it is used, e.g. "chart kyverno: Deployment
// kyverno-admission-controller", sorted.
type FoundImage struct {
	Ref   string   `json:"ref"`
	Test  bool     `json:"test,omitempty"`
	Maybe bool     `json:"maybe,omitempty"`
	Where []string `json:"where"`
}

// FindImages renders every chart of every component of def with Helm, as
// deploy would install it (hooks and CRDs included), reads the manifests
// of its `manifests:` entries, and returns the images they use, compared
// with the images each component lists. Images are those of the
// containers, init containers and ephemeral containers of workloads (Pod,
// Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
// ReplicationController, PodTemplate), and, in any other object but a
// CustomResourceDefinition, a string field named `image` that reads as an
// image reference with a registry, a path, a tag or a digest (a custom
// resource's image). Known placeholders there (Placeholders) are reported
// apart; image-like strings elsewhere (container arguments, commands and
// environment values, ConfigMap data, annotations) are the maybe images,
// reported apart and never missing. Every file is read through the
// definition's Folder, as Create reads it, within Create's limits; the
// search for maybe images stops, saying so, past MaxMaybe of them.
func FindImages(ctx context.Context, def *definition.Definition, opts FindImagesOptions) (*FoundImages, error) {
	folder, err := def.OpenFolder()
	if err != nil {
		return nil, err
	}
	defer folder.Close()
	f := &imageFinder{def: def, folder: folder, opts: opts}
	out := &FoundImages{Components: []ComponentImages{}}
	for ci, cd := range def.Components {
		c, err := f.component(ctx, ci, cd)
		if err != nil {
			return nil, err
		}
		out.Components = append(out.Components, c)
	}
	return out, nil
}

// imageFinder finds the images of a definition's components.
type imageFinder struct {
	def    *definition.Definition
	folder *definition.Folder
	opts   FindImagesOptions
	// problem, when set, is given each chart's and manifest's error,
	// and the finder goes on without them (Check); offline skips charts
	// in registries.
	problem func(error)
	offline bool
}

// component finds the images of one component and compares them with the
// ones it lists.
func (f *imageFinder) component(ctx context.Context, ci int, cd definition.Component) (ComponentImages, error) {
	found := newScan()
	for hi, ch := range cd.Charts {
		if f.offline && ch.URL != "" {
			continue
		}
		if err := f.chart(ctx, ch, found); err != nil {
			field := fmt.Sprintf("components[%d].charts[%d]", ci, hi)
			err = &definition.Error{File: f.def.File, Line: ch.Line, Field: field, Msg: err.Error(), Err: err}
			if f.problem == nil {
				return ComponentImages{}, err
			}
			f.problem(err)
		}
	}
	for mi, md := range cd.Manifests {
		err := func() error {
			data, _, err := manifestBundle(f.folder, md)
			if err != nil {
				return err
			}
			return scanManifests(RenderedManifest{Data: data}, "manifests "+md.Name, found)
		}()
		if err != nil {
			field := fmt.Sprintf("components[%d].manifests[%d]", ci, mi)
			err = &definition.Error{File: f.def.File, Line: md.Line, Field: field, Msg: err.Error(), Err: err}
			if f.problem == nil {
				return ComponentImages{}, err
			}
			f.problem(err)
		}
	}
	listed := make([]string, len(cd.Images))
	for i, img := range cd.Images {
		listed[i] = img.Ref
	}
	return compareImages(cd.Name, listed, found), nil
}

// chart renders one chart and adds the images of what it renders to found.
func (f *imageFinder) chart(ctx context.Context, cd definition.Chart, found *scan) error {
	what := "chart " + cd.URL
	if cd.Path != "" {
		what = "chart " + cd.Path
	}
	if f.opts.Render == nil {
		return fmt.Errorf("%s: finding its images needs a chart renderer (this build of ferry has none)", what)
	}
	archive, name, err := f.chartArchive(ctx, cd)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	ns, rel := artifact.Chart{Name: name, Namespace: cd.Namespace, ReleaseName: cd.ReleaseName}.Release()
	manifests, err := f.opts.Render.RenderChart(ctx, archive, ChartRelease{Name: rel, Namespace: ns, Values: f.opts.Values, KubeVersion: f.opts.KubeVersion})
	if err != nil {
		return fmt.Errorf("%s: render: %w", what, err)
	}
	var size int
	for _, m := range manifests {
		if size += len(m.Data); size > artifact.MaxManifestBundleSize {
			return fmt.Errorf("%s renders more than %d bytes", what, artifact.MaxManifestBundleSize)
		}
	}
	for _, m := range manifests {
		if err := scanManifests(m, "chart "+name, found); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// chartArchive returns a chart's archive, packaged as Create packages it
// or fetched from its registry, and the chart's name.
func (f *imageFinder) chartArchive(ctx context.Context, cd definition.Chart) ([]byte, string, error) {
	var archive, config []byte
	if cd.URL != "" {
		var err error
		if archive, config, err = f.remoteChart(ctx, cd); err != nil {
			return nil, "", err
		}
	} else {
		if f.opts.Charts == nil {
			return nil, "", errors.New("no chart packager given (package artifact/chart has Helm's)")
		}
		name, err := f.folder.CleanPath(cd.Path)
		if err != nil {
			return nil, "", err
		}
		fi, err := f.folder.Stat(cd.Path)
		if err != nil {
			return nil, "", err
		}
		if !fi.IsDir() && fi.Size() > artifact.MaxChartSize {
			return nil, "", fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
		}
		if archive, config, err = f.opts.Charts.PackageChart(ctx, f.folder.FS(), name, time.Unix(0, 0).UTC()); err != nil {
			return nil, "", fmt.Errorf("load: %w", err)
		}
	}
	var meta chartMeta
	if err := json.Unmarshal(config, &meta); err != nil || meta.Name == "" {
		return nil, "", fmt.Errorf("its metadata names no chart (%v)", err)
	}
	return archive, meta.Name, nil
}

// remoteChart fetches a chart's archive and metadata from its OCI
// registry, each checked against its digest, the archive at most
// MaxChartSize bytes.
func (f *imageFinder) remoteChart(ctx context.Context, cd definition.Chart) (archive, config []byte, err error) {
	ref := strings.TrimPrefix(cd.URL, "oci://") + ":" + strings.ReplaceAll(cd.Version, "+", "_")
	repo, err := f.opts.Remote.Repository(ref)
	if err != nil {
		return nil, nil, err
	}
	desc, err := repo.Resolve(ctx, repo.Reference.Reference)
	if err != nil {
		return nil, nil, artifact.WithRef("resolve chart", ref, err)
	}
	data, err := artifact.FetchManifest(ctx, repo, desc)
	if err != nil {
		return nil, nil, err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil || m.Config.MediaType != artifact.MediaTypeHelmConfig {
		return nil, nil, fmt.Errorf("%s is not a Helm chart", ref)
	}
	if config, err = artifact.FetchManifest(ctx, repo, m.Config); err != nil {
		return nil, nil, err
	}
	i := slices.IndexFunc(m.Layers, func(l ocispec.Descriptor) bool { return l.MediaType == artifact.MediaTypeHelmChart })
	if i < 0 {
		return nil, nil, fmt.Errorf("%s has no %s layer", ref, artifact.MediaTypeHelmChart)
	}
	layer := m.Layers[i]
	if err := graph.CheckDescriptor(layer); err != nil {
		return nil, nil, err
	}
	if layer.Size > artifact.MaxChartSize {
		return nil, nil, fmt.Errorf("%s: the chart is larger than %d bytes", ref, artifact.MaxChartSize)
	}
	if archive, err = content.FetchAll(ctx, repo, layer); err != nil {
		return nil, nil, &artifact.BlobError{Op: "fetch", Digest: layer.Digest, Err: err}
	}
	return archive, config, nil
}

// findImages finds the images a component with `findImages: true` uses
// and returns those it does not list, to be added (at the component's
// line), reporting each.
func (b *builder) findImages(ctx context.Context, ci int, cd definition.Component) ([]definition.Image, error) {
	f := &imageFinder{def: b.def, folder: b.folder, opts: FindImagesOptions{Charts: b.opts.Charts, Render: b.opts.Render, Remote: b.opts.Remote}}
	found, err := f.component(ctx, ci, cd)
	if err != nil {
		return nil, err
	}
	b.found = append(b.found, found)
	var added []definition.Image
	for _, ref := range found.Missing {
		added = append(added, definition.Image{Ref: ref, Line: cd.Line})
		b.progress(artifact.Progress{Phase: artifact.PhaseResolve, Item: "found image " + ref})
	}
	return added, nil
}
