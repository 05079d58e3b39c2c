package install

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// formatMigration brings the stored formats of a cluster in namespace ns
// to one generation from the one before; it must be idempotent (an init
// that fails after it runs it again).
type formatMigration func(ctx context.Context, in *Init, ns string) error

// formatMigrations are the migrations of stored formats, by the
// generation they bring a cluster to: init runs, in order, those above
// the generation the cluster records, once the agent, the controller and
// the CRDs are this ferry's, then records itself. Generation 1 changed no
// format (it added the record, cluster.VersionName; a cluster without it
// is generation 0), so it has none; every later generation has one
// (TestEveryGenerationHasAMigration).
var formatMigrations = map[int]formatMigration{}

// formats is what init found of the cluster's formats before it changed
// anything.
type formats struct {
	// setup is the VersionName ConfigMap's record, if recorded.
	setup    cluster.Setup
	recorded bool
	// setUp: ferry's state Secret was there, so a ferry set the cluster
	// up, before the record if it is not recorded.
	setUp bool
}

// running is the ferry running init, with the generation it writes.
func (in *Init) running() cluster.Ferry {
	return cluster.Ferry{Version: in.Version.Version, Commit: in.Version.Commit, Generation: cluster.FormatGeneration}
}

// readFormats reads the cluster's record of its formats and refuses a
// cluster whose formats are newer than this ferry's (a
// *cluster.DowngradeError), unless AllowDowngrade.
func (in *Init) readFormats(ctx context.Context, ns string) (formats, error) {
	var f formats
	cm, err := in.Client.CoreV1().ConfigMaps(ns).Get(ctx, cluster.VersionName, metav1.GetOptions{})
	switch {
	case err == nil:
		if f.setup, err = cluster.SetupFromData(cm.Data); err != nil && !in.AllowDowngrade {
			return f, err
		}
		// Unreadable and allowed: its formats unknown, who set the
		// cluster up too; init records itself over it.
		f.recorded = true
	case !apierrors.IsNotFound(err):
		return f, fmt.Errorf("read ConfigMap %s: %w", cluster.VersionName, err)
	}
	switch _, err := in.Client.CoreV1().Secrets(ns).Get(ctx, cluster.StateName, metav1.GetOptions{}); {
	case err == nil:
		f.setUp = true
	case !apierrors.IsNotFound(err):
		return f, fmt.Errorf("read Secret %s: %w", cluster.StateName, err)
	}
	if in.AllowDowngrade {
		return f, nil
	}
	return f, cluster.CheckGeneration(f.setup, in.running())
}

// migrateFormats runs the migrations above the cluster's generation.
func (in *Init) migrateFormats(ctx context.Context, ns string, f formats) ([]int, error) {
	var ran []int
	for g := f.setup.Generation() + 1; g <= cluster.FormatGeneration; g++ {
		m := formatMigrations[g]
		if m == nil {
			continue
		}
		if err := m(ctx, in, ns); err != nil {
			return ran, fmt.Errorf("formats of generation %d: %w", g, err)
		}
		ran = append(ran, g)
	}
	return ran, nil
}

// recordFormats records this ferry as the last to run init, and as the
// one that set the cluster up when nothing did before it (a cluster an
// earlier ferry set up records an unknown ferry of generation 0).
func (in *Init) recordFormats(ctx context.Context, ns string, f formats) (cluster.Setup, error) {
	s := f.setup
	if !f.recorded && !f.setUp {
		s.SetUpBy = in.running()
	}
	s.LastInit = in.running()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.VersionName, Namespace: ns, Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}},
		Data:       s.Data(),
	}
	err := kube.Upsert(ctx, in.Client.CoreV1().ConfigMaps(ns), cm, func(cur, want *corev1.ConfigMap) { cur.Labels, cur.Data = want.Labels, want.Data })
	if err != nil {
		return s, fmt.Errorf("record this ferry: %w", err)
	}
	return s, nil
}

// formatsDetail says what init found and did: "generation 1, set up by
// ferry …", with the generations migrated from.
func formatsDetail(found formats, s cluster.Setup, upgraded []int) string {
	d := fmt.Sprintf("generation %d, set up by ferry %s", s.LastInit.Generation, s.SetUpBy)
	switch {
	case len(upgraded) > 0:
		d += fmt.Sprintf(", migrated from generation %d", found.setup.Generation())
	case found.recorded && found.setup.Generation() > s.LastInit.Generation:
		d += fmt.Sprintf(", downgraded from generation %d", found.setup.Generation())
	}
	return d
}
