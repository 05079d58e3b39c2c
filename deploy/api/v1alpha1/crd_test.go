package v1alpha1

import (
	"strings"
	"testing"
)

func TestCRD(t *testing.T) {
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	if crd.Name != CRDName || crd.Spec.Group != GroupVersion.Group || crd.Spec.Names.Kind != Kind || crd.Spec.Scope != "Namespaced" {
		t.Fatalf("CRD %s: group %s kind %s scope %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Scope)
	}
	v := crd.Spec.Versions[0]
	if v.Name != GroupVersion.Version || !v.Served || !v.Storage || v.Subresources == nil || v.Subresources.Status == nil {
		t.Fatalf("version %+v", v)
	}
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		cols = append(cols, c.Name)
	}
	if got := strings.Join(cols, ","); got != "Version,Ready,Digest,Reason,Age" {
		t.Fatalf("printer columns %s", got)
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	if len(spec.XValidations) != 2 || !strings.Contains(spec.Properties["digest"].Pattern, "sha256") || len(spec.Required) != 1 || spec.Required[0] != "repository" {
		t.Fatalf("spec schema: rules %v, digest %q, required %v", spec.XValidations, spec.Properties["digest"].Pattern, spec.Required)
	}
}
