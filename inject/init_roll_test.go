package inject

import (
	"context"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// The registry's Pods say which image they run, pull it with the account
// (from the running registry, when replaced in place) and keep serving
// for drainDelay after SIGTERM, inside their grace period.
func TestRegistryTemplateForRollsAndDrains(t *testing.T) {
	img := "127.0.0.1:31999/ferry/registry@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, s3 := range []*S3Storage{nil, {URL: "s3://b?endpoint=http://x", CredentialsSecret: "c"}} {
		in := &initRun{opts: InitOptions{Replicas: 1, StorageDir: DefaultStorageDir, S3: s3}, ns: "ferry", res: &InitResult{Image: img, Node: "n1"}}
		d := in.registryDeployment()
		spec := d.Spec.Template.Spec
		if got := d.Spec.Template.Labels[cluster.LabelRevision]; got != "0123456789abcdef0123456789abcdef" {
			t.Errorf("s3=%v: revision label %q", s3 != nil, got)
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Errorf("s3=%v: template lacks selector label %s", s3 != nil, k)
			}
		}
		if _, ok := d.Spec.Selector.MatchLabels[cluster.LabelRevision]; ok {
			t.Errorf("s3=%v: the selector (immutable) names the revision", s3 != nil)
		}
		if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != cluster.PullSecretName {
			t.Errorf("s3=%v: pull secrets %v", s3 != nil, spec.ImagePullSecrets)
		}
		args := spec.Containers[0].Args
		found := false
		for i := range args {
			if args[i] == "--drain-delay" && i+1 < len(args) && args[i+1] == drainDelay.String() {
				found = true
			}
		}
		if !found {
			t.Errorf("s3=%v: args %v lack --drain-delay %s", s3 != nil, args, drainDelay)
		}
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g < int64((drainDelay+shutdownGrace).Seconds()) {
			t.Errorf("s3=%v: grace period %v shorter than drain and shutdown", s3 != nil, g)
		}
	}
	if revision("x/y:1.0") != "" {
		t.Error("a reference by tag has a revision")
	}
}

// A roll that cannot narrow the Service to the new Pods says what is in
// the way: an address of another Pod (and its EndpointSlice), not "the old
// Pods" whatever it was; with only new addresses, ready, it goes on.
func TestWaitEndpointsNamesTheBlocker(t *testing.T) {
	ready := true
	slice := func(name string, addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry",
			Labels: map[string]string{discoveryv1.LabelServiceName: cluster.RegistryName}}}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		return s
	}
	newPods := map[string]bool{"10.0.0.7": true}
	cs := fake.NewClientset(slice("ferry-registry-abc", "10.0.0.7"), slice("planted", "10.9.9.9"))
	in := &initRun{cs: cs, ns: "ferry", opts: InitOptions{WaitTimeout: 300 * time.Millisecond}}
	err := in.waitEndpoints(context.Background(), newPods)
	if err == nil || !strings.Contains(err.Error(), "EndpointSlice planted still lists 10.9.9.9") {
		t.Fatalf("a foreign address: %v", err)
	}
	if err := cs.DiscoveryV1().EndpointSlices("ferry").Delete(context.Background(), "planted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := in.waitEndpoints(context.Background(), newPods); err != nil {
		t.Fatalf("the new Pods only: %v", err)
	}
}
