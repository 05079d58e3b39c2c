package v1alpha1

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdFiles are made by controller-gen from the types (make generate).
//
//go:embed crd/*.yaml
var crdFiles embed.FS

// CRDs returns the fleet's CustomResourceDefinitions, which `ferry fleet
// serve` applies to the management cluster.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(crdFiles, "crd/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, n := range names {
		data, err := crdFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			return nil, fmt.Errorf("the fleet CRD %s: %w", n, err)
		}
		out = append(out, &crd)
	}
	return out, nil
}
