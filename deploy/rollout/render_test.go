package rollout

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/agent"
)

func testRenderer(t *testing.T, requireKnown bool) (*imageRenderer, digest.Digest) {
	t.Helper()
	d := digest.FromString("app")
	images := agent.Images{}
	if err := images.Add(&artifact.Config{Name: "p", Version: "1", Components: []artifact.Component{{
		Name: "c", Images: []artifact.Image{{Ref: "docker.io/library/app:1.0", Digest: d}},
	}}}); err != nil {
		t.Fatal(err)
	}
	return &imageRenderer{rw: &agent.Rewriter{Registry: "127.0.0.1:31999", Images: images, RequireKnown: requireKnown}, pullSecret: "pull"}, d
}

// Every workload kind's pod spec is rewritten, with the pull secret;
// documents without images, comments and unknown images stay as they are.
func TestImageRendererWorkloads(t *testing.T) {
	r, d := testRenderer(t, false)
	in := `# Source: chart/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {image: "app:1.0"}
---
# Source: only a comment
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      initContainers: [{name: init, image: "app:1.0"}]
      containers: [{name: web, image: docker.io/library/app:1.0}, {name: side, image: "busybox:1"}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cron}
spec: {jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: "app:1.0"}], imagePullSecrets: [{name: pull}]}}}}}
---
apiVersion: v1
kind: Pod
metadata: {name: pod}
spec: {containers: [{name: c, image: "busybox:1"}]}
`
	out, err := r.Run(bytes.NewBufferString(in))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := splitYAML(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 4 {
		t.Fatalf("%d documents:\n%s", len(docs), out)
	}
	want := "127.0.0.1:31999/library/app@" + d.String()
	var dep, cron, pod struct {
		Spec struct {
			Template    struct{ Spec podSpec } `json:"template"`
			JobTemplate struct {
				Spec struct {
					Template struct{ Spec podSpec } `json:"template"`
				} `json:"spec"`
			} `json:"jobTemplate"`
			podSpec `json:",inline"`
		} `json:"spec"`
	}
	for i, v := range []any{&dep, &cron, &pod} {
		if err := yaml.Unmarshal(docs[i+1], v); err != nil {
			t.Fatal(err)
		}
	}
	ds := dep.Spec.Template.Spec
	if ds.InitContainers[0].Image != want || ds.Containers[0].Image != want || ds.Containers[1].Image != "busybox:1" {
		t.Errorf("Deployment: %+v", ds)
	}
	if len(ds.ImagePullSecrets) != 1 || ds.ImagePullSecrets[0].Name != "pull" {
		t.Errorf("Deployment pull secrets: %+v", ds.ImagePullSecrets)
	}
	cs := cron.Spec.JobTemplate.Spec.Template.Spec
	if cs.Containers[0].Image != want || len(cs.ImagePullSecrets) != 1 {
		t.Errorf("CronJob: %+v", cs)
	}
	if !bytes.Contains(docs[0], []byte("# Source: chart/templates/cm.yaml")) || !strings.Contains(string(docs[3]), "busybox:1") || strings.Contains(string(docs[3]), "imagePullSecrets") {
		t.Errorf("untouched documents changed:\n%s\n%s", docs[0], docs[3])
	}
	// Idempotent: a second pass changes nothing.
	again, err := r.Run(bytes.NewBuffer(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if again.String() != out.String() {
		t.Errorf("second pass changed the output:\n%q\n---\n%q", out, again)
	}
}

type podSpec struct {
	InitContainers   []struct{ Image string } `json:"initContainers"`
	Containers       []struct{ Image string } `json:"containers"`
	ImagePullSecrets []struct{ Name string }  `json:"imagePullSecrets"`
}

// With RequireKnown an image in no package fails the render, naming the
// object and container; malformed YAML fails with the parser's reason.
func TestImageRendererErrors(t *testing.T) {
	r, _ := testRenderer(t, true)
	_, err := r.Run(bytes.NewBufferString("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: 'busybox:1'}]}\n"))
	if !errors.Is(err, agent.ErrUnknownImage) || !strings.Contains(err.Error(), "Pod p: containers[0]") {
		t.Errorf("unknown image: %v", err)
	}
	if _, err := r.Run(bytes.NewBufferString("kind: Pod\nspec: [\n")); err == nil || !strings.Contains(err.Error(), "parse manifest") {
		t.Errorf("malformed: %v", err)
	}
}

func TestSelectComponents(t *testing.T) {
	cfg := &artifact.Config{Name: "p", Components: []artifact.Component{{Name: "base", Required: true}, {Name: "a"}, {Name: "b"}}}
	names := func(cs []artifact.Component) string {
		var n []string
		for _, c := range cs {
			n = append(n, c.Name)
		}
		return strings.Join(n, ",")
	}
	for _, tc := range []struct {
		sel  []string
		want string
	}{{nil, "base,a,b"}, {[]string{"b"}, "base,b"}, {[]string{"a", "base"}, "base,a"}} {
		got, err := SelectComponents(cfg, tc.sel)
		if err != nil || names(got) != tc.want {
			t.Errorf("%v: %s, %v; want %s", tc.sel, names(got), err, tc.want)
		}
	}
	if _, err := SelectComponents(cfg, []string{"c"}); err == nil || !strings.Contains(err.Error(), `no component "c" (it has base, a, b)`) {
		t.Errorf("unknown component: %v", err)
	}
}

func TestEarlierImages(t *testing.T) {
	cfg := func(digests ...string) *artifact.Config {
		var imgs []artifact.Image
		for _, d := range digests {
			imgs = append(imgs, artifact.Image{Ref: "app:1.0", Digest: digest.FromString(d)})
		}
		return &artifact.Config{Components: []artifact.Component{{Images: imgs}}}
	}
	ref := func(d string) string { return "library/app@" + digest.FromString(d).String() }
	prev := &Record{Config: cfg("v2"), Earlier: []string{ref("v1"), ref("v3")}}
	got, err := earlierImages(prev, cfg("v3"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != ref("v1")+" "+ref("v2") {
		t.Errorf("earlier: %v", got)
	}
}
