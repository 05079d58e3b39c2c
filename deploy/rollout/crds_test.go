package rollout

import (
	"context"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
)

// TestRemovableCRDs: a package's releases' created CRDs are removable
// unless another package's chart carries them; CRDs a release found already
// there are never removable.
func TestRemovableCRDs(t *testing.T) {
	rec := &Record{Name: "gk", Releases: []Release{
		{Name: "a", CRDs: []string{"one.x", "two.x", "three.x"}, CreatedCRDs: []string{"one.x", "two.x"}},
		{Name: "b", CRDs: []string{"four.x", "one.x"}, CreatedCRDs: []string{"four.x"}},
	}}
	others := []*Record{{Name: "other", Releases: []Release{{Name: "c", CRDs: []string{"two.x", "three.x"}}}}}
	if got := removableCRDs(rec, others); !slices.Equal(got, []string{"one.x", "four.x"}) {
		t.Errorf("removable %v, want [one.x four.x]", got)
	}
	if got := removableCRDs(rec, nil); !slices.Equal(got, []string{"one.x", "two.x", "four.x"}) {
		t.Errorf("with no other package: %v", got)
	}
	if got := removableCRDs(&Record{Releases: []Release{{CRDs: []string{"one.x"}}}}, nil); len(got) != 0 {
		t.Errorf("a release that created none: %v", got)
	}
}

func testCRD(name, group, plural, kind string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1beta1", Served: true},
				{Name: "v1", Served: true, Storage: true},
			},
		},
	}
}

// TestCRDRemover: an empty CRD is deleted, one with a custom resource left
// (in any namespace) is kept with the reason, one already gone counts as
// deleted.
func TestCRDRemover(t *testing.T) {
	ext := extfake.NewClientset(testCRD("empties.a.x", "a.x", "empties", "Empty"), testCRD("fulls.b.x", "b.x", "fulls", "Full"))
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "b.x/v1", "kind": "Full", "metadata": map[string]any{"name": "left", "namespace": "apps"},
	}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Group: "a.x", Version: "v1", Resource: "empties"}: "EmptyList",
		{Group: "b.x", Version: "v1", Resource: "fulls"}:   "FullList",
	}, cr)
	ctx := context.Background()
	deleted, kept, err := crdRemover{ext: ext, dyn: dyn, timeout: 5 * time.Second}.remove(ctx, []string{"empties.a.x", "fulls.b.x", "gone.c.x"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"empties.a.x", "gone.c.x"}) || !slices.Equal(kept, []string{"fulls.b.x: custom resources left"}) {
		t.Errorf("deleted %v, kept %v", deleted, kept)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Get(ctx, "empties.a.x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("empties.a.x after remove: %v", err)
	}
	if _, err := crds.Get(ctx, "fulls.b.x", metav1.GetOptions{}); err != nil {
		t.Errorf("fulls.b.x after remove: %v", err)
	}
}
