package deploy_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestRemovePackages: Remove deletes the Packages named and answers in the
// order of the names; a name no Package holds is removed by this process
// (rollout.Uninstall), which needs a kubeconfig.
func TestRemovePackages(t *testing.T) {
	ctx := context.Background()
	cs, _ := fakeCluster(t, "127.0.0.1:1")
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pc := crfake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&v1alpha1.Package{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
	for _, name := range []string{"a", "b"} {
		pkg := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.DefaultNamespace, Name: name}}
		if err := pc.Create(ctx, pkg); err != nil {
			t.Fatal(err)
		}
	}
	rm := &deploy.Remove{Client: cs, Packages: pc}
	res, err := rm.Run(ctx, []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Name != "b" || res[1].Name != "a" {
		t.Fatalf("results %+v, want b then a", res)
	}
	var left v1alpha1.PackageList
	if err := pc.List(ctx, &left); err != nil || len(left.Items) != 0 {
		t.Fatalf("Packages left: %d, %v", len(left.Items), err)
	}
	if _, err := rm.Run(ctx, []string{"c"}); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Fatalf("a package no Package holds, without a kubeconfig: %v", err)
	}
}
