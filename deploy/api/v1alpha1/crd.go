package v1alpha1

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdYAML is made by controller-gen from the types (make generate).
//
//go:embed crd/ferry.dev_packages.yaml
var crdYAML []byte

// CRDName is the Package CustomResourceDefinition's name.
const CRDName = Resource + ".ferry.dev"

// CRD returns the Package CustomResourceDefinition that ferry init applies.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return nil, fmt.Errorf("the Package CRD: %w", err)
	}
	return &crd, nil
}
