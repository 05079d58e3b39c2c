package standin

// Rendering a chart as the planner reads it: its objects, hooks and CRDs.

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// An Object is a rendered object, as its apiVersion, kind, namespace and
// name.
type Object struct {
	APIVersion, Kind, Namespace, Name string
}

// Render renders the chart in dir as `helm template --include-crds` does,
// with its hooks (tests included), for release name in namespace ns and
// Kubernetes kubeVersion, and returns the YAML stream.
func Render(dir, name, ns string, values map[string]any, kubeVersion string) ([]byte, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(new(action.Configuration))
	in.ClientOnly, in.DryRun, in.IncludeCRDs, in.Replace = true, true, true, true
	in.ReleaseName, in.Namespace, in.KubeVersion = name, ns, kv
	in.DisableOpenAPIValidation = true
	if values == nil {
		values = map[string]any{}
	}
	rel, err := in.Run(ch, values)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", ch.Name(), err)
	}
	var out bytes.Buffer
	out.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&out, "\n---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return out.Bytes(), nil
}

// Objects lists the objects of a YAML stream, defaulting their namespace
// to ns when namespaced is true for their kind (namespaced tells whether a
// kind is).
func Objects(stream []byte, ns string, namespaced func(apiVersion, kind string) bool) ([]Object, error) {
	docs, err := decode(stream)
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, d := range docs {
		o := Object{APIVersion: str(d, "apiVersion"), Kind: str(d, "kind"), Namespace: str(d, "metadata", "namespace"), Name: str(d, "metadata", "name")}
		if namespaced(o.APIVersion, o.Kind) {
			if o.Namespace == "" {
				o.Namespace = ns
			}
		} else {
			o.Namespace = ""
		}
		out = append(out, o)
	}
	return out, nil
}

// decode splits a YAML stream into its objects, skipping empty documents.
func decode(stream []byte) ([]map[string]any, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	var out []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(d) > 0 {
			out = append(out, d)
		}
	}
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := dig(v, keys...).(string)
	return s
}
