package chartrender

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact"
)

// Cluster is how the child reaches a cluster: a kubeconfig file and a
// context in it, as kubectl's flags name them. Empty fields are kubectl's
// defaults: $KUBECONFIG or ~/.kube/config (in a Pod, its service account),
// the current context. The child reads the credentials itself; none pass
// through its arguments or its input.
type Cluster struct {
	Kubeconfig, Context string
}

// Release is a release of a chart that Helm is about to install or upgrade
// in a cluster.
type Release struct {
	Name, Namespace string
	// Values are the values given to the install or upgrade.
	Values map[string]any
	// Upgrade says the release exists and is upgraded (.Release.IsUpgrade,
	// the next revision, the deployed values where Helm reuses them); else
	// it is installed.
	Upgrade bool
}

// RenderRelease renders the chart archive as Helm's install (or upgrade)
// of rel in l.Cluster will, in a child of its own within l.Limits: a dry
// run against the cluster, so that `lookup` reads what the install will
// read and .Capabilities are the cluster's, nothing written to it. Every
// document rendered is parsed too, as Helm and deploy's post-renderer will
// parse it. A nil error says the same install, in this process, renders
// within about what the child needed.
func (l *Limited) RenderRelease(ctx context.Context, archive []byte, rel Release) error {
	if int64(len(archive)) > artifact.MaxChartSize {
		return fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
	}
	values, err := valueOf(rel.Values)
	if err != nil {
		return fmt.Errorf("values: %w", err)
	}
	_, err = l.call(ctx, request{Release: &releaseRequest{
		Cluster: l.Cluster, Name: rel.Name, Namespace: rel.Namespace, Values: values, Upgrade: rel.Upgrade,
	}}, [][]byte{archive}, false)
	return err
}

// renderRelease is RenderRelease in the child. Helm's install (or
// upgrade) runs as deploy runs it, but dry, its Kubernetes client a
// printer to nowhere: the cluster is read (its version and APIs, the
// release's history, `lookup`), never written.
// It reports whether the rendering was more than output bytes (and then
// not parsed).
func renderRelease(archive []byte, r *releaseRequest, output int64) (over bool, err error) {
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return false, err
	}
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig, getter.Context = &r.Cluster.Kubeconfig, &r.Cluster.Context
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, r.Namespace, "secret", func(string, ...any) {}); err != nil {
		return false, fmt.Errorf("helm: %w", err)
	}
	cfg.KubeClient = &kubefake.PrintingKubeClient{Out: io.Discard, LogOutput: io.Discard}
	values := r.Values.tree()
	if values == nil {
		values = map[string]any{}
	}
	var rel *release.Release
	if r.Upgrade {
		up := action.NewUpgrade(cfg)
		up.Namespace = r.Namespace
		up.DryRun, up.DryRunOption = true, "server"
		rel, err = up.Run(r.Name, ch, values)
	} else {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace = r.Name, r.Namespace
		in.DryRun, in.DryRunOption = true, "server"
		rel, err = in.Run(ch, values)
	}
	if err != nil {
		return false, err
	}
	var n int64
	for _, m := range manifestsOf(rel) {
		if n += int64(len(m.Data)); n > output {
			return true, nil
		}
	}
	// What Helm's install and deploy's post-renderer do with each
	// document after rendering: parse it whole.
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return false, err
		}
	}
	return false, nil
}
