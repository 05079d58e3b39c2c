package rollout

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferrypkg/ferry/internal/cluster"
)

var clusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}

func testClusterRole(name string, uid types.UID) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("rbac.authorization.k8s.io/v1")
	u.SetKind("ClusterRole")
	u.SetName(name)
	u.SetUID(uid)
	return u
}

// TestAwaitGoneDeletesAgain: an object deleted and created again under a
// new UID (as the clusterrole-aggregation controller does to an
// aggregated ClusterRole) is deleted again; awaitGone returns once every
// object has stayed gone.
func TestAwaitGoneDeletesAgain(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{clusterRoles: "ClusterRoleList"},
		testClusterRole("agg", "uid-1"), testClusterRole("part", "uid-2"))
	var mu sync.Mutex
	var deleted []string
	dyn.PrependReactor("delete", "clusterroles", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		mu.Lock()
		deleted = append(deleted, d.GetName())
		mu.Unlock()
		if uid := d.GetDeleteOptions().Preconditions; uid == nil || uid.UID == nil || *uid.UID != "uid-3" {
			t.Errorf("delete of %s without the UID it saw as precondition: %+v", d.GetName(), d.GetDeleteOptions())
		}
		return false, nil, nil
	})
	objs := []*liveObject{
		{res: clusterRoles, kind: "ClusterRole", name: "agg"},
		{res: clusterRoles, kind: "ClusterRole", name: "part"},
	}
	ctx := context.Background()
	for _, o := range objs {
		if err := o.observe(ctx, dyn); err != nil {
			t.Fatal(err)
		}
	}
	if objs[0].uid != "uid-1" {
		t.Fatalf("observed %q", objs[0].uid)
	}
	// Helm's delete, then the aggregation controller's apply.
	tracker := dyn.Tracker()
	for _, n := range []string{"agg", "part"} {
		if err := tracker.Delete(clusterRoles, "", n); err != nil {
			t.Fatal(err)
		}
	}
	if err := tracker.Create(clusterRoles, testClusterRole("agg", "uid-3"), ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := awaitGone(ctx, dyn, objs, 10*time.Second, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"agg"}) {
		t.Errorf("deleted %v, want [agg]", deleted)
	}
	if _, err := dyn.Resource(clusterRoles).Get(ctx, "agg", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("agg after awaitGone: %v", err)
	}
	if took := time.Since(start); took < settle {
		t.Errorf("returned after %s, before the objects stayed gone for %s", took, settle)
	}
}

// TestAwaitGoneTimeout: an object that stays (its UID unchanged: a
// finalizer holds it) is not deleted again; the error names it.
func TestAwaitGoneTimeout(t *testing.T) {
	cr := testClusterRole("held", "uid-1")
	cr.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{clusterRoles: "ClusterRoleList"}, cr)
	dyn.PrependReactor("delete", "clusterroles", func(a k8stesting.Action) (bool, runtime.Object, error) {
		t.Errorf("deleted %s again", a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	objs := []*liveObject{{res: clusterRoles, kind: "ClusterRole", name: "held"}, {res: clusterRoles, kind: "ClusterRole", name: "gone"}}
	ctx := context.Background()
	for _, o := range objs {
		if err := o.observe(ctx, dyn); err != nil {
			t.Fatal(err)
		}
	}
	err := awaitGone(ctx, dyn, objs, 50*time.Millisecond, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 objects of the release are still there: ClusterRole held (terminating)") {
		t.Fatalf("error %v", err)
	}
}

// TestRemovePullSecrets: ferry's copies go from the namespaces only the
// removed package installs into; ferry's namespace, a namespace another
// package installs into and someone's own Secret of that name stay.
func TestRemovePullSecrets(t *testing.T) {
	secret := func(ns string, ours bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.PullSecretName, Namespace: ns, UID: types.UID("uid-" + ns)}}
		if ours {
			s.Labels = map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}
		}
		return s
	}
	cs := fake.NewClientset(secret("ferry", true), secret("a", true), secret("b", true), secret("shared", true), secret("own", false), secret("other", true))
	rec := &Record{Name: "p",
		Releases: []Release{{Namespace: "a", Name: "r"}, {Namespace: "shared", Name: "s"}, {Namespace: "own", Name: "o"}, {Namespace: "ferry", Name: "f"}},
		Objects:  []Object{{Kind: "ConfigMap", Namespace: "b", Name: "c"}, {Kind: "ClusterRole", Name: "cr"}, {Kind: "ConfigMap", Namespace: "none", Name: "c"}},
	}
	others := []*Record{{Name: "q", Objects: []Object{{Kind: "ConfigMap", Namespace: "shared", Name: "c"}, {Kind: "ConfigMap", Namespace: "other", Name: "c"}}}}
	got, err := removePullSecrets(context.Background(), cs, "ferry", rec, others)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("deleted from %v, want [a b]", got)
	}
	for ns, want := range map[string]bool{"ferry": true, "a": false, "b": false, "shared": true, "own": true, "other": true} {
		_, err := cs.CoreV1().Secrets(ns).Get(context.Background(), cluster.PullSecretName, metav1.GetOptions{})
		if there := err == nil; there != want {
			t.Errorf("namespace %s: pull secret there %v, want %v (%v)", ns, there, want, err)
		}
	}
}
