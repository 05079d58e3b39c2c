package centre_test

import (
	"bytes"
	"crypto/x509"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	extfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestEnsureCA: the CA is made once and kept; each serving certificate
// chains to it, names the hosts, and carries it for the pin.
func TestEnsureCA(t *testing.T) {
	w := newWorld(t)
	again := &centre.Centre{Client: w.kc}
	caPEM, cert, err := again.EnsureCA(t.Context(), []string{"centre.example", "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	pin, err := wire.CAPin(caPEM)
	if err != nil || pin != w.pin {
		t.Fatalf("a second start made another CA: %s, %v", pin, err)
	}
	if len(cert.Certificate) != 2 || wire.CAHash(cert.Certificate[1]) != pin {
		t.Fatalf("the serving chain does not carry the CA")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "centre.example"}); err != nil {
		t.Error(err)
	}
	if len(cert.Leaf.IPAddresses) != 1 || !bytes.Equal(cert.Leaf.IPAddresses[0].To4(), []byte{10, 0, 0, 1}) {
		t.Errorf("IP addresses: %v", cert.Leaf.IPAddresses)
	}
	tok, err := again.CreateToken(t.Context(), centre.TokenOptions{})
	if err != nil || tok.CA != pin {
		t.Errorf("a token pins %s, want the CA's %s (%v)", tok.CA, pin, err)
	}
}

// TestEnsureCRDs: the fleet's four CRDs are applied, again without
// change, and waited for until established.
func TestEnsureCRDs(t *testing.T) {
	ext := extfake.NewClientset()
	ext.PrependReactor("create", "customresourcedefinitions", func(a k8stesting.Action) (bool, runtime.Object, error) {
		crd := a.(k8stesting.CreateAction).GetObject().(*apiextensionsv1.CustomResourceDefinition)
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
		return false, nil, nil
	})
	c := &centre.Centre{}
	for range 2 {
		if err := c.EnsureCRDs(t.Context(), ext); err != nil {
			t.Fatal(err)
		}
	}
	list, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := v1alpha1.CRDs()
	if len(list.Items) != len(want) || len(want) != 4 {
		t.Errorf("%d CRDs applied, want %d", len(list.Items), len(want))
	}
}
