package rollout

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"

	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// recordingRenderer records the releases it is asked to render and refuses
// them with refuse, if set.
type recordingRenderer struct {
	got    []chartrender.Release
	refuse error
}

func (r *recordingRenderer) RenderRelease(_ context.Context, archive []byte, rel chartrender.Release) error {
	if len(archive) == 0 {
		return errors.New("no archive")
	}
	r.got = append(r.got, rel)
	return r.refuse
}

// TestInstallReleaseRendersFirst: before Helm installs or upgrades a
// release here, the bounded renderer renders it as that install or upgrade
// will; a chart it refuses is neither parsed nor installed, and the error
// names the release, the chart and the limit.
func TestInstallReleaseRendersFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := fixture.Chart(dir, "app", "1.0.0", "nginx:1.27"); err != nil {
		t.Fatal(err)
	}
	archive, _, err := chart.Packager{}.PackageChart(ctx, os.DirFS(dir), "app", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartutil.DefaultCapabilities,
		Log:          func(string, ...any) {},
	}
	spec := releaseSpec{archive: archive, values: map[string]any{"replicas": 2}, rec: Release{Namespace: "shop", Name: "app", Chart: "app-1.0.0"}}
	render, _ := testRenderer(t, false)

	refusing := &recordingRenderer{refuse: &chartrender.LimitError{Resource: "memory", Limit: "512 MiB of memory"}}
	_, err = installRelease(ctx, cfg, spec, refusing, render, nil, time.Minute)
	if want := "release shop/app (chart app-1.0.0): render: passed its limit of 512 MiB of memory"; err == nil || err.Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
	if rels, _ := cfg.Releases.ListReleases(); len(rels) != 0 {
		t.Fatalf("a refused chart was installed: %d releases", len(rels))
	}

	passing := &recordingRenderer{}
	for i, upgrade := range []bool{false, true} {
		spec.values = map[string]any{"replicas": i + 1}
		if _, err := installRelease(ctx, cfg, spec, passing, render, nil, time.Minute); err != nil {
			t.Fatalf("install %d: %v", i, err)
		}
		got := passing.got[i]
		if got.Name != "app" || got.Namespace != "shop" || got.Upgrade != upgrade || got.Values["replicas"] != i+1 {
			t.Errorf("install %d rendered %+v first, want an upgrade: %v", i, got, upgrade)
		}
	}
	if rels, _ := cfg.Releases.ListReleases(); len(rels) != 2 || !strings.HasPrefix(rels[0].Chart.Name(), "app") {
		t.Errorf("releases after an install and an upgrade: %d", len(rels))
	}
}
