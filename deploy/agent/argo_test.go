package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/cluster"
)

const chartRepo = "10.96.0.20:5000/org/charts"

// argoSources is testSources with charts carried at two versions, one of
// them on Docker Hub.
func argoSources(t testing.TB) *SourceRewriter {
	t.Helper()
	s := testSources()
	if err := s.Images.Add(&artifact.Config{Components: []artifact.Component{{Images: []artifact.Image{
		{Ref: "ghcr.io/org/charts/web:1.1.0", Digest: digest.FromString("chart 1.1")},
		{Ref: "ghcr.io/org/charts/web:2.0.0_build.1", Digest: digest.FromString("chart 2.0")},
		{Ref: "docker.io/bitnamicharts/redis:20.0.0", Digest: digest.FromString("redis")},
		{Ref: "registry-1.docker.io/bitnamicharts/kafka:30.0.0", Digest: digest.FromString("kafka")},
	}}}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Argo CD Applications and ApplicationSets: git sources follow the
// carried ref on the git server; chart sources a package carries point at
// the in-cluster registry and need a repository Secret for it; multiple
// sources with ref/$values keep their names; templated values and what
// no package carries pass unchanged; what the packages do not carry of a
// carried repository or chart is refused, naming what they carry.
func TestArgoSources(t *testing.T) {
	s := argoSources(t)
	values := `{"repoURL":"https://github.com/org/fleet.git","targetRevision":"main","ref":"values"}`
	valuesOut := `{"ref":"values","repoURL":"` + fleetURL + `","targetRevision":"main"}`
	for _, tt := range []struct {
		name, kind, obj, want, err string
		helm                       []string
	}{
		{name: "oci chart", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"1.1.0"}}}`,
			want: `{"spec":{"source":{"chart":"web","repoURL":"` + chartRepo + `","targetRevision":"1.1.0"}}}`, helm: []string{chartRepo}},
		{name: "oci:// chart, version with build", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"oci://ghcr.io/org/charts/","chart":"web","targetRevision":"2.0.0+build.1"}}}`,
			want: `{"spec":{"source":{"chart":"web","repoURL":"` + chartRepo + `","targetRevision":"2.0.0+build.1"}}}`, helm: []string{chartRepo}},
		{name: "chart range", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"^1.0"}}}`,
			want: `{"spec":{"source":{"chart":"web","repoURL":"` + chartRepo + `","targetRevision":"^1.0"}}}`, helm: []string{chartRepo}},
		{name: "docker hub chart", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"registry-1.docker.io/bitnamicharts","chart":"redis","targetRevision":"20.0.0"}}}`,
			want: `{"spec":{"source":{"chart":"redis","repoURL":"10.96.0.20:5000/bitnamicharts","targetRevision":"20.0.0"}}}`, helm: []string{"10.96.0.20:5000/bitnamicharts"}},
		{name: "docker hub chart carried by its other name", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"docker.io/bitnamicharts","chart":"kafka","targetRevision":"30.0.0"}}}`,
			want: `{"spec":{"source":{"chart":"kafka","repoURL":"10.96.0.20:5000/bitnamicharts","targetRevision":"30.0.0"}}}`, helm: []string{"10.96.0.20:5000/bitnamicharts"}},
		{name: "chart rewritten already", kind: "Application",
			obj:  `{"spec":{"source":{"repoURL":"` + chartRepo + `","chart":"web","targetRevision":"1.1.0"}}}`,
			want: `{"spec":{"source":{"chart":"web","repoURL":"` + chartRepo + `","targetRevision":"1.1.0"}}}`, helm: []string{chartRepo}},
		{name: "chart version not carried", kind: "Application",
			obj: `{"spec":{"source":{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"1.0.9"}}}`,
			err: `chart web: targetRevision "1.0.9" names a revision the package does not carry: it carries 1.0.0, 1.1.0, 2.0.0_build.1`},
		{name: "chart not carried", kind: "Application",
			obj: `{"spec":{"source":{"repoURL":"ghcr.io/org/charts","chart":"api","targetRevision":"1.1.0"}}}`},
		{name: "http helm repository not carried", kind: "Application",
			obj: `{"spec":{"source":{"repoURL":"https://charts.example.com","chart":"web","targetRevision":"1.1.0"}}}`},
		{name: "chart with values from git", kind: "Application",
			obj:  `{"spec":{"sources":[{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"1.1.0","helm":{"valueFiles":["$values/web/values.yaml"]}},` + values + `]}}`,
			want: `{"spec":{"sources":[{"chart":"web","helm":{"valueFiles":["$values/web/values.yaml"]},"repoURL":"` + chartRepo + `","targetRevision":"1.1.0"},` + valuesOut + `]}}`,
			helm: []string{chartRepo}},
		{name: "other chart with values from git", kind: "Application",
			obj:  `{"spec":{"sources":[{"repoURL":"https://charts.example.com","chart":"x","targetRevision":"1.0.0","helm":{"valueFiles":["$values/x.yaml"]}},` + values + `]}}`,
			want: `{"spec":{"sources":[{"chart":"x","helm":{"valueFiles":["$values/x.yaml"]},"repoURL":"https://charts.example.com","targetRevision":"1.0.0"},` + valuesOut + `]}}`},
		{name: "list generator", kind: "ApplicationSet",
			obj:  `{"spec":{"generators":[{"list":{"elements":[{"env":"a"},{"env":"b"}]}}],"template":{"metadata":{"name":"{{env}}"},"spec":{"source":{"repoURL":"https://github.com/org/fleet","path":"envs/{{env}}"}}}}}`,
			want: `{"spec":{"generators":[{"list":{"elements":[{"env":"a"},{"env":"b"}]}}],"template":{"metadata":{"name":"{{env}}"},"spec":{"source":{"path":"envs/{{env}}","repoURL":"` + fleetURL + `","targetRevision":"main"}}}}}`},
		{name: "templated revision", kind: "ApplicationSet",
			obj:  `{"spec":{"template":{"spec":{"sources":[{"repoURL":"https://github.com/org/fleet","targetRevision":"{{rev}}"},{"repoURL":"{{url}}"},{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"{{v}}"}]}}}}`,
			want: `{"spec":{"template":{"spec":{"sources":[{"repoURL":"` + fleetURL + `","targetRevision":"{{rev}}"},{"repoURL":"{{url}}"},{"chart":"web","repoURL":"` + chartRepo + `","targetRevision":"{{v}}"}]}}}}`,
			helm: []string{chartRepo}},
		{name: "git generator in a matrix", kind: "ApplicationSet",
			obj:  `{"spec":{"generators":[{"matrix":{"generators":[{"git":{"repoURL":"git@github.com:org/fleet.git","revision":"HEAD","directories":[{"path":"apps/*"}]}},{"list":{"elements":[]}}]}}],"template":{"spec":{}}}}`,
			want: `{"spec":{"generators":[{"matrix":{"generators":[{"git":{"directories":[{"path":"apps/*"}],"repoURL":"` + fleetURL + `","revision":"main"}},{"list":{"elements":[]}}]}}],"template":{"spec":{}}}}`},
		{name: "appset at another branch", kind: "ApplicationSet",
			obj: `{"spec":{"template":{"spec":{"source":{"repoURL":"https://github.com/org/fleet","targetRevision":"dev"}}}}}`,
			err: `ApplicationSet template: Application source https://github.com/org/fleet: targetRevision "dev" names a revision`},
		{name: "project", kind: "AppProject",
			obj:  `{"spec":{"sourceRepos":["https://github.com/org/fleet.git","ghcr.io/org/charts","oci://docker.io/bitnamicharts/","https://github.com/org/*","https://github.com/org/other"]}}`,
			want: `{"spec":{"sourceRepos":["https://github.com/org/fleet.git","ghcr.io/org/charts","oci://docker.io/bitnamicharts/","https://github.com/org/*","https://github.com/org/other","` + fleetURL + `","` + chartRepo + `","10.96.0.20:5000/bitnamicharts"]}}`},
		{name: "project of everything", kind: "AppProject",
			obj: `{"spec":{"sourceRepos":["*"]}}`},
		{name: "appset of nothing carried", kind: "ApplicationSet",
			obj: `{"spec":{"template":{"spec":{"source":{"repoURL":"https://github.com/org/other"}}}}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj := spec(t, tt.obj)
			res, err := s.Rewrite(tt.kind, obj)
			switch {
			case tt.err != "":
				if !errors.Is(err, ErrSourceRef) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("%v, want %q", err, tt.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tt.want == "":
				if res.Changed {
					t.Fatalf("changed to %v", obj)
				}
				return
			}
			got, _ := json.Marshal(obj)
			if !res.Changed || string(got) != tt.want {
				t.Fatalf("\n got %s\nwant %s", got, tt.want)
			}
			if strings.Join(res.HelmRepositories, " ") != strings.Join(tt.helm, " ") {
				t.Errorf("helm repositories %v, want %v", res.HelmRepositories, tt.helm)
			}
			// Admitting the result again changes nothing.
			again := spec(t, string(got))
			if _, err := s.Rewrite(tt.kind, again); err != nil {
				t.Fatal(err)
			}
			if twice, _ := json.Marshal(again); string(twice) != string(got) {
				t.Errorf("not idempotent:\n got %s\nthen %s", got, twice)
			}
		})
	}
}

// A repository carried at a bare commit is followed through HEAD, which
// the git server points at the carried commit.
func TestArgoSourceBareCommit(t *testing.T) {
	s := testSources()
	g := s.Repositories["github.com/org/fleet"]
	g.Ref = ""
	s.Repositories["github.com/org/fleet"] = g
	obj := spec(t, `{"spec":{"source":{"repoURL":"https://github.com/org/fleet"}}}`)
	if _, err := s.Rewrite("Application", obj); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(obj); string(got) != `{"spec":{"source":{"repoURL":"`+fleetURL+`","targetRevision":"HEAD"}}}` {
		t.Fatalf("got %s", got)
	}
}

// HelmRepositories.Ensure writes the Argo CD repository Secret for a
// rewritten chart repository once, with the registry's account, and
// leaves one that exists alone.
func TestHelmRepositoriesEnsure(t *testing.T) {
	ctx := t.Context()
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.StateName, Namespace: "ferry"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cluster.AuthSecretName, Namespace: "ferry"}, Data: cluster.Account{Username: "ferry", Password: "s3cret"}.Data()},
	)
	h := &HelmRepositories{Client: cs, Namespace: "ferry"}
	for range 2 {
		if err := h.Ensure(ctx, "argocd", chartRepo); err != nil {
			t.Fatal(err)
		}
	}
	name := HelmRepositoryName(chartRepo)
	got, err := cs.CoreV1().Secrets("argocd").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := HelmRepositorySecret("argocd", chartRepo, cluster.Account{Username: "ferry", Password: "s3cret"})
	if got.Labels["argocd.argoproj.io/secret-type"] != "repository" || got.Labels[cluster.LabelManagedBy] != cluster.ManagedBy {
		t.Errorf("labels %v", got.Labels)
	}
	for k, v := range want.Data {
		if string(got.Data[k]) != string(v) {
			t.Errorf("%s = %q, want %q", k, got.Data[k], v)
		}
	}
	if string(got.Data["url"]) != chartRepo || string(got.Data["enableOCI"]) != "true" || string(got.Data["insecureOCIForceHttp"]) != "true" || string(got.Data["type"]) != "helm" {
		t.Errorf("data %q", got.Data)
	}
	if !strings.HasPrefix(name, HelmRepositoryPrefix) || len(name) != len(HelmRepositoryPrefix)+16 || name == HelmRepositoryName(chartRepo+"x") {
		t.Errorf("name %s", name)
	}
	if err := (&HelmRepositories{Client: fake.NewClientset(), Namespace: "ferry"}).Ensure(ctx, "argocd", chartRepo); err == nil {
		t.Error("made a Secret without the registry's account")
	}
}

// An Application of as many chart sources as an admission review holds,
// over many carried images, costs one pass over the images: a guard
// against a lookup per source and image (seconds), far above the normal
// figure (milliseconds).
func TestArgoSourcesManyCharts(t *testing.T) {
	s := testSources()
	var imgs []artifact.Image
	for i := range 5000 {
		imgs = append(imgs, artifact.Image{Ref: fmt.Sprintf("ghcr.io/org%d/charts/web:1.0.%d", i%50, i), Digest: digest.FromString(fmt.Sprint(i))})
	}
	if err := s.Images.Add(&artifact.Config{Components: []artifact.Component{{Images: imgs}}}); err != nil {
		t.Fatal(err)
	}
	var sources []any
	for i := range 30000 {
		sources = append(sources, map[string]any{"repoURL": fmt.Sprintf("ghcr.io/org%d/charts", i%60), "chart": "web", "targetRevision": "^1.0"})
	}
	obj := map[string]any{"spec": map[string]any{"sources": sources}}
	if raw, _ := json.Marshal(obj); len(raw) > maxReviewSize {
		t.Fatalf("%d bytes: more than a review holds", len(raw))
	}
	start := time.Now()
	res, err := s.Rewrite("Application", obj)
	if err != nil || !res.Changed || len(res.HelmRepositories) != 50 {
		t.Fatalf("%v, %d repositories", err, len(res.HelmRepositories))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("%s for %d sources", d, len(sources))
	}
}

// Whatever an Argo CD or Flux object holds, Rewrite returns (never
// panics), and admitting its result again changes nothing more.
func FuzzRewrite(f *testing.F) {
	for _, seed := range []string{
		`{"spec":{"sources":[{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"1.0.0"},{"repoURL":"https://github.com/org/fleet","ref":"v"}]}}`,
		`{"spec":{"generators":[{"matrix":{"generators":[{"git":{"repoURL":"git@github.com:org/fleet.git"}}]}}],"template":{"spec":{"source":{"repoURL":"{{u}}"}}}}}`,
		`{"spec":{"sourceRepos":["https://github.com/org/fleet","oci://docker.io/bitnamicharts",7,null]}}`,
		`{"spec":{"source":{"repoURL":5,"chart":["x"]},"sources":"no"}}`,
		`{"spec":{"url":"https://github.com/org/fleet","ref":{"commit":3}}}`,
	} {
		for _, kind := range []string{"Application", "ApplicationSet", "AppProject", "GitRepository", "HelmRepository", "OCIRepository"} {
			f.Add(kind, seed)
		}
	}
	s := argoSources(f)
	f.Fuzz(func(t *testing.T, kind, in string) {
		var obj map[string]any
		if json.Unmarshal([]byte(in), &obj) != nil {
			return
		}
		if _, err := s.Rewrite(kind, obj); err != nil {
			return
		}
		once, _ := json.Marshal(obj)
		if _, err := s.Rewrite(kind, obj); err != nil {
			t.Fatalf("its own result refused: %v\n%s", err, once)
		}
		if twice, _ := json.Marshal(obj); string(twice) != string(once) {
			t.Fatalf("not idempotent:\n%s\n%s", once, twice)
		}
	})
}

// A refusal does not repeat the password a source's URL carries: the
// agent's answer goes to the API server, its audit log and Argo CD's
// events, not only to the one who wrote it.
func TestArgoRefusalRedactsURL(t *testing.T) {
	s := argoSources(t)
	for _, src := range []string{
		`{"repoURL":"https://user:s3cret@github.com/org/fleet.git","targetRevision":"nope"}`,
		`{"repoURL":"oci://user:s3cret@ghcr.io/org/charts","chart":"web","targetRevision":"9.9.9"}`,
		`{"repoURL":"user:s3cret@ghcr.io/org/charts","chart":"web","targetRevision":"9.9.9"}`,
	} {
		_, err := s.Rewrite("Application", spec(t, `{"spec":{"source":`+src+`}}`))
		if err == nil {
			t.Logf("%s: admitted", src)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("refusal repeats the password: %v", err)
		}
	}
}

// TestArgoRefusalNamesLongRevisionInShort: a targetRevision of 1 MiB is
// refused in at most 512 bytes that still name it.
func TestArgoRefusalNamesLongRevisionInShort(t *testing.T) {
	s := argoSources(t)
	long := strings.Repeat("a", 1<<20)
	_, err := s.Rewrite("Application", spec(t, `{"spec":{"source":{"repoURL":"https://github.com/org/fleet.git","targetRevision":"`+long+`"}}}`))
	if !errors.Is(err, ErrSourceRef) || len(err.Error()) > 512 || !strings.Contains(err.Error(), `targetRevision "aaaa`) {
		t.Errorf("%.200v (%d bytes), want at most 512 naming the targetRevision", err, len(fmt.Sprint(err)))
	}
}
