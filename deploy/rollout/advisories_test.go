package rollout

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// TestApplyIgnoresAdvisories: a package whose only component carries a
// vulnerability database deploys (no kubeconfig needed, nothing fetched
// from the registry) and is recorded; the layer is installed nowhere.
func TestApplyIgnoresAdvisories(t *testing.T) {
	ns := cluster.DefaultNamespace
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	}
	cs := fake.NewClientset(
		secret(cluster.StateName, cluster.State{Registry: "127.0.0.1:1"}.Data()),
		secret(cluster.AuthSecretName, cluster.Account{Username: "u", Password: "p"}.Data()),
	)
	cfg := &artifact.Config{Name: "govulndb", Version: "1.0.0", Components: []artifact.Component{{
		Name: "vulns", Required: true,
		Advisories: []artifact.Advisories{{Source: "osv", Digest: digest.FromString("zip"), Size: 3, Records: 1}},
	}}}
	rec, err := Apply(context.Background(), cs, cfg, digest.FromString("root"), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(rec.Releases) != 0 || len(rec.Components) != 1 {
		t.Errorf("record: %d releases, components %v", len(rec.Releases), rec.Components)
	}
	got, err := (&State{Client: cs, Namespace: ns}).Get(context.Background(), "govulndb")
	if err != nil || got == nil || got.Config.Components[0].Advisories[0].Records != 1 {
		t.Fatalf("recorded: %+v, %v", got, err)
	}
}
