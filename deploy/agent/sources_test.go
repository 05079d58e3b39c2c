package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/cluster"
)

const (
	fleetCommit = "0123456789abcdef0123456789abcdef01234567"
	fleetBase   = "http://10.96.0.40"
	fleetURL    = fleetBase + "/github.com/org/fleet.git"
	oldCommit   = "89abcdef0123456789abcdef0123456789abcdef"
)

var fleetDigest = digest.FromString("fleet artifact")

func testSources() *SourceRewriter {
	repos := Repositories{}
	repos.Add(&artifact.Config{Components: []artifact.Component{{Repositories: []artifact.Repository{{
		URL: "https://github.com/org/fleet.git", Key: "github.com/org/fleet", Path: "org/fleet",
		Ref: "refs/heads/main", Commit: fleetCommit, Revision: "main@sha1:" + fleetCommit, Digest: fleetDigest,
	}}}}})
	images := Images{}
	if err := images.Add(&artifact.Config{Components: []artifact.Component{{Images: []artifact.Image{
		{Ref: "ghcr.io/org/charts/web:1.0.0", Digest: digest.FromString("chart")},
		{Ref: "nginx:1.27", Digest: digest.FromString("nginx")},
	}}}}); err != nil {
		panic(err)
	}
	return &SourceRewriter{GitBase: fleetBase, Registry: "10.96.0.20:5000", GitSecret: "git-auth", ArgoSecret: "git-creds", PullSecret: "pull", Repositories: repos, Images: images}
}

// spec decodes a JSON object literal.
func spec(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every spelling of a carried repository's URL, in each kind of source,
// is pointed at the in-cluster copy and pinned to the carried commit;
// doing it again changes nothing; another ref is refused; an unknown
// repository passes unchanged.
func TestSourceRewriter(t *testing.T) {
	s := testSources()
	for _, tt := range []struct {
		kind, obj, want, secret, err string
	}{
		{"GitRepository", `{"spec":{"url":"https://github.com/org/fleet","interval":"1m"}}`,
			`{"spec":{"interval":"1m","ref":{"branch":"main"},"secretRef":{"name":"git-auth"},"url":"` + fleetURL + `"}}`, "git-auth", ""},
		{"GitRepository", `{"spec":{"url":"ssh://git@github.com/org/fleet.git","ref":{"branch":"main"},"provider":"github","secretRef":{"name":"deploy-key"}}}`,
			`{"spec":{"ref":{"branch":"main"},"secretRef":{"name":"git-auth"},"url":"` + fleetURL + `"}}`, "git-auth", ""},
		{"GitRepository", `{"spec":{"url":"https://github.com/org/fleet","ref":{"commit":"` + fleetCommit + `"}}}`,
			`{"spec":{"ref":{"branch":"main","commit":"` + fleetCommit + `"},"secretRef":{"name":"git-auth"},"url":"` + fleetURL + `"}}`, "git-auth", ""},
		{"GitRepository", `{"spec":{"url":"` + fleetURL + `","ref":{"branch":"main","commit":"` + fleetCommit + `"},"secretRef":{"name":"git-auth"}}}`,
			`{"spec":{"ref":{"branch":"main","commit":"` + fleetCommit + `"},"secretRef":{"name":"git-auth"},"url":"` + fleetURL + `"}}`, "git-auth", ""},
		// Pinned by an older package version: follows the branch again.
		{"GitRepository", `{"spec":{"url":"` + fleetURL + `","ref":{"branch":"main","commit":"` + oldCommit + `"},"secretRef":{"name":"git-auth"}}}`,
			`{"spec":{"ref":{"branch":"main"},"secretRef":{"name":"git-auth"},"url":"` + fleetURL + `"}}`, "git-auth", ""},
		{"GitRepository", `{"spec":{"url":"https://github.com/org/fleet","ref":{"commit":"` + oldCommit + `"}}}`, "", "", `ref commit "` + oldCommit + `" names a revision`},
		{"GitRepository", `{"spec":{"url":"git@github.com:org/fleet.git","ref":{"branch":"dev"}}}`, "", "", `ref branch "dev" names a revision`},
		{"GitRepository", `{"spec":{"url":"https://github.com/org/fleet","ref":{"semver":">=1.0"}}}`, "", "", `ref semver ">=1.0" names a revision`},
		{"GitRepository", `{"spec":{"url":"https://github.com/org/other"}}`, "", "", ""},
		{"OCIRepository", `{"spec":{"url":"oci://github.com/org/fleet","interval":"5m"}}`,
			`{"spec":{"insecure":true,"interval":"5m","provider":"generic","ref":{"digest":"` + fleetDigest.String() + `"},"secretRef":{"name":"pull"},"url":"oci://10.96.0.20:5000/org/fleet"}}`, "pull", ""},
		{"OCIRepository", `{"spec":{"url":"oci://10.96.0.20:5000/org/fleet","ref":{"digest":"` + fleetDigest.String() + `"}}}`,
			`{"spec":{"insecure":true,"provider":"generic","ref":{"digest":"` + fleetDigest.String() + `"},"secretRef":{"name":"pull"},"url":"oci://10.96.0.20:5000/org/fleet"}}`, "pull", ""},
		{"OCIRepository", `{"spec":{"url":"oci://github.com/org/fleet","ref":{"tag":"latest"}}}`, "", "", `ref tag "latest" names a revision`},
		{"Application", `{"spec":{"source":{"repoURL":"https://github.com/org/fleet.git","path":"apps","targetRevision":"main"},"destination":{"namespace":"web"}}}`,
			`{"spec":{"destination":{"namespace":"web"},"source":{"path":"apps","repoURL":"` + fleetURL + `","targetRevision":"main"}}}`, "git-creds", ""},
		{"Application", `{"spec":{"sources":[{"repoURL":"https://charts.example","chart":"x","targetRevision":"1.0"},{"repoURL":"git@github.com:org/fleet","targetRevision":"HEAD"}]}}`,
			`{"spec":{"sources":[{"chart":"x","repoURL":"https://charts.example","targetRevision":"1.0"},{"repoURL":"` + fleetURL + `","targetRevision":"main"}]}}`, "git-creds", ""},
		{"Application", `{"spec":{"source":{"repoURL":"https://github.com/org/fleet","targetRevision":"` + fleetCommit + `"}}}`,
			`{"spec":{"source":{"repoURL":"` + fleetURL + `","targetRevision":"` + fleetCommit + `"}}}`, "git-creds", ""},
		{"Application", `{"spec":{"source":{"repoURL":"` + fleetURL + `","targetRevision":"` + oldCommit + `"}}}`,
			`{"spec":{"source":{"repoURL":"` + fleetURL + `","targetRevision":"main"}}}`, "git-creds", ""},
		{"Application", `{"spec":{"source":{"repoURL":"https://github.com/org/fleet","targetRevision":"` + oldCommit + `"}}}`, "", "", `targetRevision "` + oldCommit + `" names a revision`},
		{"Application", `{"spec":{"source":{"repoURL":"https://github.com/org/fleet","targetRevision":"v2"}}}`, "", "", `targetRevision "v2" names a revision`},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://ghcr.io/org/charts","interval":"10m","certSecretRef":{"name":"ca"}}}`,
			`{"spec":{"insecure":true,"interval":"10m","provider":"generic","secretRef":{"name":"pull"},"type":"oci","url":"oci://10.96.0.20:5000/org/charts"}}`, "pull", ""},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://ghcr.io/org/charts/","secretRef":{"name":"ghcr"}}}`,
			`{"spec":{"insecure":true,"provider":"generic","secretRef":{"name":"pull"},"type":"oci","url":"oci://10.96.0.20:5000/org/charts"}}`, "pull", ""},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://10.96.0.20:5000/org/charts","insecure":true,"provider":"generic","secretRef":{"name":"pull"}}}`,
			`{"spec":{"insecure":true,"provider":"generic","secretRef":{"name":"pull"},"type":"oci","url":"oci://10.96.0.20:5000/org/charts"}}`, "pull", ""},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://docker.io/library"}}`,
			`{"spec":{"insecure":true,"provider":"generic","secretRef":{"name":"pull"},"type":"oci","url":"oci://10.96.0.20:5000/library"}}`, "pull", ""},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://ghcr.io/org/char"}}`, "", "", ""},
		{"HelmRepository", `{"spec":{"type":"oci","url":"oci://ghcr.io/other/charts"}}`, "", "", ""},
		{"HelmRepository", `{"spec":{"url":"https://ghcr.io/org/charts"}}`, "", "", ""},
		{"HelmChart", `{"spec":{"chart":"web","version":"1.0.0","sourceRef":{"kind":"HelmRepository","name":"charts"}}}`, "", "", ""},
	} {
		obj := spec(t, tt.obj)
		res, err := s.Rewrite(tt.kind, obj)
		changed, secrets := res.Changed, res.Secrets
		switch {
		case tt.err != "":
			if !errors.Is(err, ErrSourceRef) || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "main@sha1:"+fleetCommit) {
				t.Errorf("%s %s: %v, want %q and the carried revision", tt.kind, tt.obj, err, tt.err)
			}
			continue
		case err != nil:
			t.Errorf("%s %s: %v", tt.kind, tt.obj, err)
			continue
		case tt.want == "":
			if changed {
				t.Errorf("%s %s: changed to %v", tt.kind, tt.obj, obj)
			}
			continue
		}
		got, _ := json.Marshal(obj)
		if !changed || string(got) != tt.want || len(secrets) != 1 || secrets[0] != tt.secret {
			t.Errorf("%s %s:\n got %s (changed %v, secrets %v)\nwant %s (%s)", tt.kind, tt.obj, got, changed, secrets, tt.want, tt.secret)
		}
	}
}

// The webhook sends Flux and Argo CD objects to the source rewriter: a
// JSON patch of the spec and the Secret made to exist; a refusal is a 403
// with the reason.
func TestWebhookSources(t *testing.T) {
	var ensured []string
	wh := &Webhook{
		Rewriter: func(context.Context) (*Rewriter, error) { return nil, errors.New("not for sources") },
		Sources:  func(context.Context) (*SourceRewriter, error) { return testSources(), nil },
		EnsureSecret: func(_ context.Context, ns, name string) error {
			ensured = append(ensured, ns+"/"+name)
			return nil
		},
		EnsureHelmRepository: func(_ context.Context, ns, url string) error {
			ensured = append(ensured, ns+"/helm "+url)
			return nil
		},
	}
	srv := httptest.NewServer(wh)
	defer srv.Close()
	review := func(group, kind, obj string) *admissionv1.AdmissionResponse {
		t.Helper()
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: "1", Kind: metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind}, Namespace: "flux-system",
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(obj)},
			},
		})
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out.Response
	}
	r := review(cluster.FluxGroup, "GitRepository", `{"spec":{"url":"https://github.com/org/fleet"}}`)
	if !r.Allowed || !strings.Contains(string(r.Patch), `"path":"/spec"`) || !strings.Contains(string(r.Patch), fleetURL) {
		t.Fatalf("GitRepository: allowed %v, patch %s", r.Allowed, r.Patch)
	}
	if len(ensured) != 1 || ensured[0] != "flux-system/git-auth" {
		t.Errorf("secrets made: %v", ensured)
	}
	r = review(cluster.ArgoGroup, "Application", `{"spec":{"source":{"repoURL":"https://github.com/org/fleet","targetRevision":"v9"}}}`)
	if r.Allowed || r.Result.Code != http.StatusForbidden || !strings.Contains(r.Result.Message, `targetRevision "v9"`) {
		t.Fatalf("Application at another revision: %+v", r.Result)
	}
	ensured = nil
	r = review(cluster.ArgoGroup, "ApplicationSet", `{"spec":{"template":{"spec":{"sources":[{"repoURL":"ghcr.io/org/charts","chart":"web","targetRevision":"1.0.0","helm":{"valueFiles":["$values/v.yaml"]}},{"repoURL":"https://github.com/org/fleet","ref":"values"}]}}}}`)
	if !r.Allowed || !strings.Contains(string(r.Patch), `"repoURL":"10.96.0.20:5000/org/charts"`) || !strings.Contains(string(r.Patch), fleetURL) {
		t.Fatalf("ApplicationSet: allowed %v, patch %s", r.Allowed, r.Patch)
	}
	if strings.Join(ensured, ",") != "flux-system/git-creds,flux-system/helm 10.96.0.20:5000/org/charts" {
		t.Errorf("secrets made for the ApplicationSet: %v", ensured)
	}
	r = review(cluster.FluxGroup, "Bucket", `{"spec":{"bucketName":"x"}}`)
	if !r.Allowed || r.Patch != nil {
		t.Fatalf("a Bucket: %+v", r)
	}
}

func TestGitBaseURL(t *testing.T) {
	for host, want := range map[string]string{
		"10.96.0.40:80": "http://10.96.0.40", "10.96.0.40:8080": "http://10.96.0.40:8080", "[fd00::28]:80": "http://[fd00::28]",
	} {
		if got := cluster.GitBaseURL(host); got != want {
			t.Errorf("cluster.GitBaseURL(%q) = %q, want %q", host, got, want)
		}
	}
}
