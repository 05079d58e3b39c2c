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

func TestRewriteImages(t *testing.T) {
	var obj map[string]any
	doc := "kind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{image: a}, {name: none}], initContainers: [{image: b}]}}}"
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	rewrite := func(image string) (string, error) {
		if image == "bad" {
			return "", fmt.Errorf("no")
		}
		return "reg/" + image, nil
	}
	for range 2 {
		if changed, err := RewriteImages(obj, rewrite, "pull"); err != nil || !changed {
			t.Fatalf("changed %v, %v", changed, err)
		}
	}
	got, err := yaml.Marshal(Of(obj))
	if err != nil {
		t.Fatal(err)
	}
	want := "containers:\n- image: reg/reg/a\n- name: none\nimagePullSecrets:\n- name: pull\ninitContainers:\n- image: reg/reg/b\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if changed, err := RewriteImages(map[string]any{"kind": "ConfigMap"}, rewrite, "pull"); changed || err != nil {
		t.Errorf("ConfigMap: changed %v, %v", changed, err)
	}
	Containers(Of(obj))[0].Map["image"] = "bad"
	if _, err := RewriteImages(obj, rewrite, ""); err == nil || err.Error() != "Deployment web: initContainers[0]: no" {
		t.Errorf("error %v", err)
	}
}
