// Package chartrender renders Helm charts with Helm's SDK as deploy would
// install them. Limited is what `ferry package find-images`, create and the
// Package controller use: it loads, packages and renders charts in a child
// process bounded in memory, time and output (a chart is a program: a
// template can loop, allocate or emit without end), and refuses a chart
// past a limit in one line. Renderer does the same work in this process,
// unbounded, for tests and for the child itself. The package lives apart
// from package artifact/chart because Helm's install action links client-go
// and the Kubernetes API types, whose initialisation every importer pays
// for.
package chartrender

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
)

// Renderer renders charts with Helm's SDK as `helm template` does, in
// this process and without limits: a client-only install, dry run, that
// reaches no cluster (`lookup` finds nothing). The zero value is ready.
// Limited is the bounded one.
type Renderer struct{}

var _ build.ChartRenderer = Renderer{}

// RenderChart renders the chart archive for rel, hooks and the CRDs of
// crds/ folders included, and returns the release's manifest (every
// template's documents, each after a "# Source: <template>" line) then
// each hook, test hooks marked. Errors are Helm's, unprefixed: the caller
// names the chart.
func (Renderer) RenderChart(_ context.Context, archive []byte, rel build.ChartRelease) ([]build.RenderedManifest, error) {
	return render(archive, rel)
}

func render(archive []byte, rel build.ChartRelease) ([]build.RenderedManifest, error) {
	if int64(len(archive)) > artifact.MaxChartSize {
		return nil, fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, err
	}
	kv := rel.KubeVersion
	if kv == "" {
		kv = build.DefaultKubeVersion
	}
	kubeVersion, err := chartutil.ParseKubeVersion(kv)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", kv, err)
	}
	in := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	in.DryRun, in.DryRunOption, in.ClientOnly, in.Replace = true, "client", true, true
	in.IncludeCRDs = true
	in.KubeVersion = kubeVersion
	in.ReleaseName, in.Namespace = rel.Name, rel.Namespace
	values := rel.Values
	if values == nil {
		values = map[string]any{}
	}
	out, err := in.Run(ch, values)
	if err != nil {
		return nil, oneLine(err)
	}
	return manifestsOf(out), nil
}

// manifestsOf is a rendered release's manifest, then each hook, test hooks
// marked.
func manifestsOf(out *release.Release) []build.RenderedManifest {
	manifests := []build.RenderedManifest{{Data: []byte(out.Manifest)}}
	for _, h := range out.Hooks {
		test := len(h.Events) > 0 && !slices.ContainsFunc(h.Events, func(e release.HookEvent) bool { return e != release.HookTest })
		manifests = append(manifests, build.RenderedManifest{
			Source: h.Path, Data: []byte("# Source: " + h.Path + "\n" + h.Manifest + "\n"), Test: test,
		})
	}
	return manifests
}

// oneLine folds Helm's multi-line errors (a template's stack of calls)
// onto one line.
func oneLine(err error) error {
	return fmt.Errorf("%s", strings.Join(strings.Fields(err.Error()), " "))
}
