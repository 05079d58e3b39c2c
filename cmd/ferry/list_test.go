package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// TestListImagePolicies: ferry list shows the image policies of a
// Package's status, whole in JSON and in one brief cell in text.
func TestListImagePolicies(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	fp := "sha256:" + strings.Repeat("ab", 32)
	policies := []v1alpha1.ImagePolicyStatus{
		{Name: "publisher", Required: true, Authorities: []string{"key " + fp}, Images: []string{"docker.io/library/app:1.0", "docker.io/library/app:1.1"}},
		{Name: "ci", Authorities: []string{"keyless https://issuer.example /https://github.com/org/.*/"}, Images: []string{"ghcr.io/org/tool:v2"}},
	}
	pkg := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ferry"}, Status: v1alpha1.PackageStatus{Version: "1.0.0", ImagePolicies: policies}}
	plain := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ferry"}}
	pc := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pkg, plain).WithStatusSubresource(pkg).Build()
	items, err := listPackages(context.Background(), k8sfake.NewClientset(), pc, "ferry")
	if err != nil || len(items) != 2 {
		t.Fatalf("%+v, %v", items, err)
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(items); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"imagePolicies":[{"name":"publisher","required":true,"authorities":["key `+fp+`"]`) {
		t.Fatalf("JSON: %s", buf.String())
	}
	want := "publisher (required, key abababababab, 2 images); ci (optional, keyless https://issuer.example /https://github.com/org/.*/, 1 images)"
	if got := policySummary(items[0].ImagePolicies); got != want {
		t.Fatalf("text: %s\nwant %s", got, want)
	}
	if got := policySummary(items[1].ImagePolicies); got != "-" {
		t.Fatalf("text of a package without: %s", got)
	}
}
