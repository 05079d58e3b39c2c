package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chartrender"
)

// Release is a Helm release deploy installed from a chart of a package.
type Release struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Chart is the chart's name-version; Digest its manifest's digest.
	Chart  string        `json:"chart"`
	Digest digest.Digest `json:"digest"`
	// Values is the digest of the values deploy passed (--set), Images
	// that of the package's image digests its post-renderer wrote in: the
	// same chart renders differently when either changes.
	Values   digest.Digest `json:"values"`
	Images   digest.Digest `json:"images"`
	Revision int           `json:"revision"`
	// CRDs are the CustomResourceDefinitions of the chart's crds/ folders
	// (Helm creates the missing ones before the first install and never
	// updates nor deletes them); CreatedCRDs those of them this release's
	// install created, which Uninstall deletes (see crds.go).
	CRDs        []string `json:"crds,omitempty"`
	CreatedCRDs []string `json:"createdCRDs,omitempty"`
}

func (r Release) String() string { return r.Namespace + "/" + r.Name }

// helmConfig gives a Helm action configuration for namespace, whose
// releases are stored as Secrets there (as the helm CLI does).
func helmConfig(getter genericclioptions.RESTClientGetter, namespace string) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	if err := cfg.Init(getter, namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	// Objects a chart leaves without a namespace go to the release's.
	cfg.KubeClient.(*kube.Client).Namespace = namespace
	return cfg, nil
}

// ReleaseValues are the values a release's deployed revision was given.
func ReleaseValues(kube genericclioptions.RESTClientGetter, r Release) (map[string]any, error) {
	cfg, err := helmConfig(kube, r.Namespace)
	if err != nil {
		return nil, err
	}
	get := action.NewGetValues(cfg)
	get.Version = r.Revision
	values, err := get.Run(r.Name)
	if err != nil {
		return nil, fmt.Errorf("values of release %s: %w", r, err)
	}
	return values, nil
}

// fetchChart reads a chart the package stored — its Helm OCI manifest, then
// the chart layer, at most artifact.MaxChartSize bytes — from the
// package's repository in the in-cluster registry, each checked against
// its digest. It returns the chart's archive, not yet parsed.
func fetchChart(ctx context.Context, repo *remote.Repository, c artifact.Chart) ([]byte, error) {
	_, data, err := oras.FetchBytes(ctx, repo, c.Digest.String(), oras.DefaultFetchBytesOptions)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("chart %s: manifest %s: %w", c.Name, c.Digest, err)
	}
	for _, l := range m.Layers {
		if l.MediaType != artifact.MediaTypeHelmChart {
			continue
		}
		if l.Size > artifact.MaxChartSize {
			return nil, fmt.Errorf("chart %s: larger than %d bytes", c.Name, artifact.MaxChartSize)
		}
		tgz, err := content.FetchAll(ctx, repo.Blobs(), l)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.Name, err)
		}
		return tgz, nil
	}
	return nil, fmt.Errorf("chart %s: manifest %s has no %s layer", c.Name, c.Digest, artifact.MediaTypeHelmChart)
}

// releaseSpec is what one chart of a deploy asks of Helm.
type releaseSpec struct {
	archive []byte // the chart's
	rec     Release
	values  map[string]any
}

// A ReleaseRenderer renders a chart's release before Helm installs or
// upgrades it in this process, as that install or upgrade will render it,
// where its cost is bounded: a chart it refuses is not installed.
// chartrender.Limited is one (a child process under limits).
type ReleaseRenderer interface {
	RenderRelease(ctx context.Context, archive []byte, rel chartrender.Release) error
}

// installRelease installs the release, or upgrades it when it exists,
// waiting until its resources are ready; a failure rolls it back (an
// install is uninstalled, an upgrade returns to the previous revision) and
// is returned with Helm's reason. An upgrade to the chart and values the
// deployed revision already has is skipped: prev is what the last deploy
// recorded for this release. With a bounded renderer, the chart is
// rendered there first, as the install or upgrade will render it, and
// parsed here only if it passed.
func installRelease(ctx context.Context, cfg *action.Configuration, spec releaseSpec, bounded ReleaseRenderer, render *imageRenderer, prev *Release, timeout time.Duration) (Release, error) {
	rec := spec.rec
	hist := action.NewHistory(cfg)
	hist.Max = 1
	last, err := hist.Run(rec.Name)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return rec, fmt.Errorf("release %s: %w", rec, err)
	}
	var cur *release.Release
	for _, r := range last {
		if cur == nil || r.Version > cur.Version {
			cur = r
		}
	}
	if cur != nil && cur.Info.Status.IsPending() {
		// An install, upgrade or rollback that never finished: its process
		// died (a controller restarted). Helm refuses any other operation
		// until the release leaves that state.
		if cur, err = settlePending(ctx, cfg, cur, timeout); err != nil {
			return rec, fmt.Errorf("release %s: %w", rec, err)
		}
	}
	var rel *release.Release
	fresh := cur == nil || cur.Info.Status == release.StatusUninstalled
	if bounded != nil {
		r := chartrender.Release{Name: rec.Name, Namespace: rec.Namespace, Values: spec.values, Upgrade: !fresh}
		if err := bounded.RenderRelease(ctx, spec.archive, r); err != nil {
			return rec, fmt.Errorf("release %s (chart %s): render: %w", rec, rec.Chart, err)
		}
	}
	ch, err := loader.LoadArchive(bytes.NewReader(spec.archive))
	if err != nil {
		return rec, fmt.Errorf("release %s (chart %s): %w", rec, rec.Chart, err)
	}
	crds, absent, err := chartCRDs(cfg, ch, fresh)
	if err != nil {
		return rec, fmt.Errorf("release %s: %w", rec, err)
	}
	rec.CRDs = crds
	if prev != nil {
		rec.CreatedCRDs = prev.CreatedCRDs
	}
	switch {
	case fresh:
		// Helm creates the absent CRDs first; it fails if it cannot.
		rec.CreatedCRDs = absent
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace = rec.Name, rec.Namespace
		in.Wait, in.Timeout, in.Atomic = true, timeout, true
		in.PostRenderer = render
		if rel, err = in.RunWithContext(ctx, ch, spec.values); err != nil {
			return rec, fmt.Errorf("install release %s (chart %s): %w", rec, rec.Chart, err)
		}
	case prev != nil && cur.Info.Status == release.StatusDeployed && cur.Version == prev.Revision &&
		prev.Digest == rec.Digest && prev.Values == rec.Values && prev.Images == rec.Images && complete(cfg, cur):
		rec.Revision = cur.Version
		return rec, nil
	default:
		up := action.NewUpgrade(cfg)
		up.Namespace = rec.Namespace
		up.Wait, up.Timeout, up.Atomic, up.MaxHistory = true, timeout, true, 10
		up.PostRenderer = render
		if rel, err = up.RunWithContext(ctx, rec.Name, ch, spec.values); err != nil {
			return rec, fmt.Errorf("upgrade release %s to chart %s: %w", rec, rec.Chart, err)
		}
	}
	rec.Revision = rel.Version
	return rec, nil
}

// settlePending ends a release left pending by an interrupted operation: a
// first install is uninstalled (then installed again), an upgrade or
// rollback is marked failed (then upgraded again, from the last deployed
// revision). It returns the release's state after.
func settlePending(ctx context.Context, cfg *action.Configuration, cur *release.Release, timeout time.Duration) (*release.Release, error) {
	if cur.Info.Status == release.StatusPendingInstall {
		// As remove uninstalls: waiting itself, objects created again
		// deleted again (uninstallRelease).
		if err := uninstall(ctx, cfg, Release{Namespace: cur.Namespace, Name: cur.Name}, timeout); err != nil {
			return nil, fmt.Errorf("undo the interrupted install: %w", err)
		}
		return nil, nil
	}
	cur.SetStatus(release.StatusFailed, "interrupted: "+string(cur.Info.Status))
	if err := cfg.Releases.Update(cur); err != nil {
		return nil, fmt.Errorf("mark the interrupted %s failed: %w", cur.Info.Status, err)
	}
	return cur, nil
}

// complete tells whether every object of the deployed release is still in
// the cluster; one deleted by hand makes the release be upgraded again,
// which creates it.
func complete(cfg *action.Configuration, cur *release.Release) bool {
	res, err := cfg.KubeClient.Build(strings.NewReader(cur.Manifest), false)
	if err != nil {
		return false
	}
	for _, info := range res {
		if err := info.Get(); apierrors.IsNotFound(err) {
			return false
		}
	}
	return true
}

// jsonDigest identifies values or images (JSON, map keys sorted).
func jsonDigest(v any) (digest.Digest, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return digest.FromBytes(b), nil
}
