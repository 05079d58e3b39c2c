package podspec

import (
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestContainers(t *testing.T) {
	for kind, doc := range map[string]string{
		"Pod":         "spec: {initContainers: [{image: i}], containers: [{image: c}, 7], ephemeralContainers: [{image: e}]}",
		"Deployment":  "spec: {template: {spec: {initContainers: [{image: i}], containers: [{image: c}, 7], ephemeralContainers: [{image: e}]}}}",
		"PodTemplate": "template: {spec: {initContainers: [{image: i}], containers: [{image: c}, 7], ephemeralContainers: [{image: e}]}}",
		"CronJob":     "spec: {jobTemplate: {spec: {template: {spec: {initContainers: [{image: i}], containers: [{image: c}, 7], ephemeralContainers: [{image: e}]}}}}}",
	} {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte("kind: "+kind+"\n"+doc), &obj); err != nil {
			t.Fatal(err)
		}
		if !IsWorkload(kind) {
			t.Errorf("%s is not a workload", kind)
		}
		var got string
		for _, c := range Containers(Of(obj)) {
			got += fmt.Sprintf("%s[%d]=%s ", c.Field, c.Index, c.Image())
		}
		if want := "initContainers[0]=i containers[0]=c ephemeralContainers[0]=e "; got != want {
			t.Errorf("%s: %q, want %q", kind, got, want)
		}
	}
	for _, obj := range []map[string]any{
		{"kind": "ConfigMap", "spec": map[string]any{"containers": []any{map[string]any{"image": "x"}}}},
		{"kind": "Deployment", "spec": "not a mapping"},
		{"spec": map[string]any{}},
	} {
		if spec := Of(obj); spec != nil {
			t.Errorf("%v: pod spec %v", obj, spec)
		}
	}
}
