package bomscan_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	abomscan "github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/artifact/bomscan/bomscantest"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/bomscan"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bomscantest.Cleanup()
	os.Exit(code)
}

// world is a registry holding package sboms 1.0.0 in repository repo.
type world struct {
	reg  *remote.Registry
	root string
	cfg  *artifact.Config
}

func newWorld(t *testing.T, repo string) world {
	t.Helper()
	ctx := context.Background()
	host := registrytest.New(t)
	// One differs from App's linux/amd64 manifest by a byte of its program.
	images := []bomscantest.Image{{Ref: bomscantest.App, Platforms: []string{"linux/amd64", "linux/arm64"}},
		{Ref: bomscantest.One, Platforms: []string{"linux/amd64"}, Program: append(bomscantest.Binary(t), 0)}}
	r, err := artifact.Open(ctx, bomscantest.Package(t, "sboms", "1.0.0", images...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Push(ctx, r, host+"/"+repo+":1.0.0", artifact.PushOptions{Remote: artifact.RemoteOptions{PlainHTTP: true}}); err != nil {
		t.Fatal(err)
	}
	reg, err := remote.NewRegistry(host)
	if err != nil {
		t.Fatal(err)
	}
	reg.PlainHTTP = true
	return world{reg: reg, root: r.Root().Digest.String(), cfg: r.Config()}
}

// image is the record of the package's image ref.
func (w world) image(t *testing.T, ref string) artifact.Image {
	for _, c := range w.cfg.Components {
		for _, img := range c.Images {
			if img.Ref == ref {
				return img
			}
		}
	}
	t.Fatalf("no image %s", ref)
	return artifact.Image{}
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, fleetv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func pod(ns, name, node, image, imageID string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: image}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ImageID: imageID}}}}
}

func node(name, arch string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: arch}}}
}

func lines(hits []abomscan.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Image+" "+h.Platform+" "+strings.Join(h.Runs, ","))
	}
	return out
}

// TestCluster: a Package's SBOMs, each where it runs: the Package, a Pod
// naming the image's index on an arm64 node (its arm64 SBOM only), a Pod
// naming a platform manifest, a Pod whose status names one; Pods of other
// images not at all; the index saved in the registry and a second scan
// from it.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "sboms")
	app, one := w.image(t, bomscantest.App), w.image(t, bomscantest.One)
	var amd64 string
	for _, s := range app.SBOMs {
		if s.Platform == "linux/amd64" {
			amd64 = s.Subject.String()
		}
	}
	const reg = "127.0.0.1:31999/"
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		&v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "sboms"}, Spec: v1alpha1.PackageSpec{Repository: "sboms"}, Status: v1alpha1.PackageStatus{Digest: w.root}},
		&v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "pending"}, Spec: v1alpha1.PackageSpec{Repository: "pending", Tag: "1.0"}},
		node("n1", "arm64"), node("n2", "amd64"),
		pod("web", "app-arm", "n1", reg+"org/app@"+app.Digest.String(), ""),
		pod("web", "one", "n2", reg+"org/one@"+one.Digest.String(), ""),
		pod("web", "by-id", "n2", "example.com/org/app:1.0", "example.com/org/app@"+amd64),
		pod("web", "other", "n2", reg+"org/other@sha256:"+strings.Repeat("0", 64), ""),
	).Build()
	s := bomscan.Cluster(c, "ferry", w.reg)
	q, err := bom.ParseQuery("libferry1")
	if err != nil {
		t.Fatal(err)
	}
	hits, err := s.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		bomscantest.App + " linux/amd64 ferry/sboms,pod web/by-id",
		bomscantest.App + " linux/arm64 ferry/sboms,pod web/app-arm",
		bomscantest.One + " linux/amd64 ferry/sboms,pod web/one",
	}
	if got := lines(hits); !reflect.DeepEqual(got, want) {
		t.Fatalf("hits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	repo, err := w.reg.Repository(ctx, abomscan.IndexRepository)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := abomscan.RepositoryStore(repo, abomscan.IndexTag).Load(ctx)
	if err != nil || idx.Len() != 3 {
		t.Fatalf("the cluster's index: %v", err)
	}
	// A Pod gone: the next scan says so, from the index.
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "one"}}); err != nil {
		t.Fatal(err)
	}
	hits, err = s.Query(ctx, q)
	if err != nil || lines(hits)[2] != bomscantest.One+" linux/amd64 ferry/sboms" {
		t.Fatalf("%v\n%s", err, strings.Join(lines(hits), "\n"))
	}
}

// TestFleet: the versions on a centre's tracks (a promoted version no
// longer in the registry passed over), each located at the members that
// report running it.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "apps/sboms")
	gone := "sha256:" + strings.Repeat("1", 64)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		&fleetv1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "sboms"},
			Spec:   fleetv1.ReleaseTrackSpec{Repository: "apps/sboms", Channels: []fleetv1.Channel{{Name: "stable", Digest: w.root, Version: "1.0.0"}}},
			Status: fleetv1.ReleaseTrackStatus{Promotions: []fleetv1.Promotion{{Channel: "stable", Digest: w.root}, {Channel: "stable", Digest: gone}}}},
		&fleetv1.Member{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "ship-1"}, Status: fleetv1.MemberStatus{Packages: []fleetv1.MemberPackage{{Name: "sboms", Digest: w.root}}}},
		&fleetv1.Member{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "ship-2"}, Status: fleetv1.MemberStatus{Packages: []fleetv1.MemberPackage{{Name: "sboms", Digest: gone}}}},
	).WithStatusSubresource(&fleetv1.Member{}, &fleetv1.ReleaseTrack{}).Build()
	s := bomscan.Fleet(c, "fleet", w.reg)
	q, err := bom.ParseQuery("libferry1")
	if err != nil {
		t.Fatal(err)
	}
	hits, err := s.Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 3 || !reflect.DeepEqual(hits[0].Runs, []string{"member ship-1"}) || hits[0].Package != "sboms" {
		t.Fatalf("hits:\n%s", strings.Join(lines(hits), "\n"))
	}
	repo, err := w.reg.Repository(ctx, abomscan.FleetIndexRepository)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Resolve(ctx, abomscan.IndexTag); err != nil {
		t.Errorf("the fleet's index: %v", err)
	}
}
