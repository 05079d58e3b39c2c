package controller

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

func reconciler(t *testing.T, objs ...runtime.Object) *Reconciler {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build(), Namespace: "ferry"}
}

func TestValues(t *testing.T) {
	r := reconciler(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "web-values"},
		Data:       map[string]string{"values.yaml": "a: {b: 1, c: 2}\nd: from-file\n"},
	})
	pkg := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "p"}, Spec: v1alpha1.PackageSpec{
		Values: &apiextensionsv1.JSON{Raw: []byte(`{"all": true}`)},
		Charts: []v1alpha1.ChartValues{{
			Name:       "web",
			ValuesFrom: []v1alpha1.KeyReference{{Kind: "ConfigMap", Name: "web-values"}},
			Values:     &apiextensionsv1.JSON{Raw: []byte(`{"a": {"c": 3}}`)},
		}},
	}}
	all, charts, err := r.values(context.Background(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": map[string]any{"b": float64(1), "c": float64(3)}, "d": "from-file"}
	if all["all"] != true || !reflect.DeepEqual(normalize(charts["web"]), want) {
		t.Fatalf("values %v, web %v", all, charts["web"])
	}
	pkg.Spec.Charts[0].ValuesFrom[0].Name = "missing"
	// Not found, and the error names the reference.
	if _, _, err := r.values(context.Background(), pkg); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "ConfigMap/missing/values.yaml") {
		t.Fatalf("missing ConfigMap: %v", err)
	}
}

// normalize turns YAML's ints into JSON's float64s.
func normalize(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch v := v.(type) {
		case map[string]any:
			out[k] = normalize(v)
		case int:
			out[k] = float64(v)
		case int64:
			out[k] = float64(v)
		default:
			out[k] = v
		}
	}
	return out
}

func TestKeys(t *testing.T) {
	kp, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	r := reconciler(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "k"}, Data: map[string][]byte{"cosign.pub": kp.Public}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "private"}, Data: map[string][]byte{"cosign.pub": kp.Private}},
	)
	pkg := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry", Name: "p"}, Spec: v1alpha1.PackageSpec{Keys: []v1alpha1.KeyReference{{Name: "k"}}}}
	keys, fp, err := r.keys(context.Background(), pkg)
	if err != nil || len(keys) != 1 || keys[0].KeyName() != "Secret/k/cosign.pub" || fp == "" {
		t.Fatalf("keys %v %q: %v", keys, fp, err)
	}
	for name, is := range map[string]func(error) bool{
		"missing": apierrors.IsNotFound,
		"private": func(err error) bool { return errors.Is(err, artifact.ErrKey) },
	} {
		pkg.Spec.Keys[0].Name = name
		// The error is typed, and names the key.
		if _, _, err := r.keys(context.Background(), pkg); !is(err) || !strings.Contains(err.Error(), "Secret/"+name+"/cosign.pub") {
			t.Fatalf("key %s: %v", name, err)
		}
	}
	pkg.Spec.Keys = nil
	if _, _, err := r.keys(context.Background(), pkg); err == nil {
		t.Fatal("no keys: no error")
	}
	pkg.Spec.InsecureSkipSignatureVerification = true
	if _, fp, err := r.keys(context.Background(), pkg); err != nil || fp != "insecure" {
		t.Fatalf("insecure: %q %v", fp, err)
	}
}

func TestShort(t *testing.T) {
	if got := short("sha256:0123456789abcdef0123"); got != "0123456789ab" {
		t.Fatal(got)
	}
}
