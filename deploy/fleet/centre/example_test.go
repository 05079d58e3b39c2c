package centre_test

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
)

// A placement puts the stable channel of a track on the members labelled
// region=east, with values; a pass of the rollout engine gives the
// east member that version (the placement's first rollout goes to
// everyone at once) and the west member nothing.
func ExampleCentre_Desired() {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	stable := "sha256:" + strings.Repeat("5", 64)
	member := func(name, region string) *v1alpha1.Member {
		return &v1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Namespace: centre.DefaultNamespace, Name: name, Labels: map[string]string{"region": region}},
			Spec: v1alpha1.MemberSpec{Mode: v1alpha1.Connected}, Status: v1alpha1.MemberStatus{Credential: "sha256:…"}}
	}
	kc := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&v1alpha1.Member{}, &v1alpha1.MemberGroup{}, &v1alpha1.ReleaseTrack{}, &v1alpha1.Placement{}).
		WithObjects(
			&v1alpha1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: centre.DefaultNamespace, Name: "web"},
				Spec: v1alpha1.ReleaseTrackSpec{Repository: "apps/web", Channels: []v1alpha1.Channel{{Name: "stable", Digest: stable, Version: "1.4.0"}}}},
			&v1alpha1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Namespace: centre.DefaultNamespace, Name: "east"},
				Spec: v1alpha1.MemberGroupSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"region": "east"}}}},
			&v1alpha1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: centre.DefaultNamespace, Name: "web-east"},
				Spec: v1alpha1.PlacementSpec{Track: "web", Channel: "stable",
					Targets: []v1alpha1.PlacementTarget{{Group: "east", Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":3}`)}}}}},
			member("site-a", "east"), member("site-b", "west"),
		).Build()

	c := &centre.Centre{Client: kc}
	if err := c.Reconcile(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range []string{"site-a", "site-b"} {
		d, err := c.Desired(ctx, name)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %d package(s)\n", name, len(d.Packages))
		for _, p := range d.Packages {
			fmt.Printf("  %s %s from %s, values %s\n", p.Name, p.Version, p.Repository, p.Values)
		}
	}
	var p v1alpha1.Placement
	_ = kc.Get(ctx, client.ObjectKey{Namespace: centre.DefaultNamespace, Name: "web-east"}, &p)
	fmt.Println("placement:", p.Status.Phase, p.Status.Version)
	// Output:
	// site-a: 1 package(s)
	//   web 1.4.0 from apps/web, values {"replicas":3}
	// site-b: 0 package(s)
	// placement: Progressing 1.4.0
}
