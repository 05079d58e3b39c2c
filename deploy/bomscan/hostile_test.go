package bomscan_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact/bom"
	abomscan "github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/bomscan"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// TestForgedIndex: someone who may push to the registry but not write to
// ferry's namespace plants an index at the index's tag claiming the
// cluster's (or the centre's) SBOMs hold nothing: the next scan still
// finds every component, and the forged index is not what it saves over.
func TestForgedIndex(t *testing.T) {
	ctx := context.Background()
	q, err := bom.ParseQuery("libferry1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, repo string
		scanner    func(w world) *abomscan.Scanner
	}{
		{"cluster", abomscan.IndexRepository, func(w world) *abomscan.Scanner {
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
				&v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "sboms"}, Spec: v1alpha1.PackageSpec{Repository: "sboms"}, Status: v1alpha1.PackageStatus{Digest: w.root}},
			).Build()
			return bomscan.Cluster(c, "ferry", w.reg)
		}},
		{"fleet", abomscan.FleetIndexRepository, func(w world) *abomscan.Scanner {
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
				&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "sboms"},
					Spec: fleetv1.ReleaseTrackSpec{Repository: "sboms", Channels: []fleetv1.Channel{{Name: "stable", Digest: w.root, Version: "1.0.0"}}}},
			).Build()
			return bomscan.Fleet(c, "fleet", w.reg)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, "sboms")
			s := tc.scanner(w)
			first, err := s.Query(ctx, q)
			if err != nil || len(first) != 3 {
				t.Fatalf("%v: %d hits", err, len(first))
			}
			// The forger reads the saved index and pushes one that keeps
			// its SBOM digests but drops every component.
			repo, err := w.reg.Repository(ctx, tc.repo)
			if err != nil {
				t.Fatal(err)
			}
			saved, err := abomscan.RepositoryStore(repo, abomscan.IndexTag).Load(ctx)
			if err != nil || saved.Len() != 3 {
				t.Fatalf("the saved index: %v", err)
			}
			forged := bom.NewIndex()
			saved.Each(func(d digest.Digest, _ []bom.Component) bool {
				forged.Add(d, []bom.Component{{Name: "nothing-here", Version: "1", Type: "deb"}})
				return true
			})
			if err := abomscan.RepositoryStore(repo, abomscan.IndexTag).Save(ctx, forged); err != nil {
				t.Fatal(err)
			}
			again, err := s.Query(ctx, q)
			if err != nil || len(again) != 3 {
				t.Fatalf("after the forged index: %v: %d hits, want 3", err, len(again))
			}
		})
	}
}

// TestTooManyPackages: someone who may create Packages in ferry's
// namespace makes more than a scan reads: the scan and the deployed
// database's search are refused in one line before reading any package.
func TestTooManyPackages(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "sboms")
	b := fake.NewClientBuilder().WithScheme(scheme(t))
	for i := range abomscan.MaxPackages + 1 {
		b = b.WithObjects(&v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: fmt.Sprint("p", i)}, Spec: v1alpha1.PackageSpec{Repository: "sboms"}, Status: v1alpha1.PackageStatus{Digest: w.root}})
	}
	c := b.Build()
	start := time.Now()
	_, _, err := bomscan.ClusterDB(ctx, c, "ferry", w.reg)
	t.Logf("ClusterDB: %v in %v", err, time.Since(start))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(abomscan.MaxPackages)) || time.Since(start) > 10*time.Second {
		t.Errorf("ClusterDB over %d Packages: %v after %v", abomscan.MaxPackages+1, err, time.Since(start))
	}
	start = time.Now()
	_, err = bomscan.Cluster(c, "ferry", w.reg).Source.SBOMs(ctx)
	t.Logf("Cluster: %v in %v", err, time.Since(start))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(abomscan.MaxPackages)) || time.Since(start) > 10*time.Second {
		t.Errorf("a scan over %d Packages: %v after %v", abomscan.MaxPackages+1, err, time.Since(start))
	}
}
