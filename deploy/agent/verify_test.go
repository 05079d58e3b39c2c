package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore" // Verify's engine
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
)

// signedRegistry is an in-process registry holding images as deploy
// leaves them: signed by the real cosign CLI (tag scheme, no
// transparency log), the signature next to the image.
type signedRegistry struct {
	host     string
	requests atomic.Int64
	cosign   string
	home     string
}

func newSignedRegistry(t *testing.T) *signedRegistry {
	t.Helper()
	r := &signedRegistry{cosign: peertool.Require(t, "cosign"), home: t.TempDir()}
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		srv.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		ts.Close()
		_ = srv.Shutdown(context.Background())
	})
	r.host = ts.Listener.Addr().String()
	return r
}

// remote is how the agent reads the registry (plain HTTP, no account).
func (r *signedRegistry) remote() artifact.RemoteOptions {
	return artifact.RemoteOptions{PlainHTTP: true, Credential: func(context.Context, string) (auth.Credential, error) { return auth.EmptyCredential, nil }}
}

// cosignRun runs the real cosign offline, with a private HOME.
func (r *signedRegistry) cosignRun(t *testing.T, password string, args ...string) string {
	t.Helper()
	cmd := exec.Command(r.cosign, args...)
	cmd.Dir = r.home
	cmd.Env = append(os.Environ(), "HOME="+r.home, "COSIGN_PASSWORD="+password, "DOCKER_CONFIG="+filepath.Join(r.home, ".docker"),
		"TUF_ROOT="+filepath.Join(r.home, ".sigstore"), "COSIGN_EXPERIMENTAL=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keyPair makes a cosign key pair and returns the private key's file and
// the public key's PEM.
func (r *signedRegistry) keyPair(t *testing.T, name string) (string, string) {
	t.Helper()
	prefix := filepath.Join(r.home, name)
	r.cosignRun(t, "pw-"+name, "generate-key-pair", "--output-key-prefix", prefix)
	pub, err := os.ReadFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return prefix + ".key", string(pub)
}

// push pushes a small image to path and returns its descriptor.
func (r *signedRegistry) push(t *testing.T, path string, seed uint64) ocispec.Descriptor {
	t.Helper()
	repo, err := r.remote().Repository(r.host + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := fixture.PushImage(context.Background(), repo, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(seed), 512)})
	if err != nil {
		t.Fatal(err)
	}
	return desc
}

// pushFiltered pushes a two-platform index to path, and the index
// create would store when keeping one platform.
func (r *signedRegistry) pushFiltered(t *testing.T, path string) (original, filtered ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	repo, err := r.remote().Repository(r.host + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	var ms []ocispec.Descriptor
	for i, arch := range []string{"amd64", "arm64"} {
		pl := fixture.Platform("linux", arch, "")
		m, err := fixture.PushImage(ctx, repo, pl, []fixture.Layer{fixture.NewLayer(fixture.Rand(uint64(10+i)), 256)})
		if err != nil {
			t.Fatal(err)
		}
		m.Platform = &pl
		ms = append(ms, m)
	}
	if original, err = fixture.PushIndex(ctx, repo, ms); err != nil {
		t.Fatal(err)
	}
	if filtered, err = fixture.PushIndex(ctx, repo, ms[:1]); err != nil {
		t.Fatal(err)
	}
	// The signed-index carrier deploy copies: a referrer of the stored
	// index whose one layer is the original index.
	origData, err := content.FetchAll(ctx, repo, original)
	if err != nil {
		t.Fatal(err)
	}
	layer := ocispec.Descriptor{MediaType: artifact.MediaTypeSignedIndex, Digest: original.Digest, Size: original.Size}
	if err := repo.Push(ctx, layer, bytes.NewReader(origData)); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, artifact.ArtifactTypeSignedIndex,
		oras.PackManifestOptions{Layers: []ocispec.Descriptor{layer}, Subject: &filtered}); err != nil {
		t.Fatal(err)
	}
	return original, filtered
}

// sign signs path@d with the key and returns the evidence as a package
// records it (artifact.ImageSignature).
func (r *signedRegistry) sign(t *testing.T, path string, d digest.Digest, keyFile, password string) artifact.ImageSignature {
	t.Helper()
	r.cosignRun(t, password, "sign", "--key", keyFile, "--tlog-upload=false", "--allow-http-registry", "-y", r.host+"/"+path+"@"+d.String())
	tag := strings.Replace(d.String(), ":", "-", 1) + ".sig"
	repo, err := r.remote().Repository(r.host + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := repo.Resolve(context.Background(), tag)
	if err != nil {
		t.Fatalf("cosign's signature %s: %v", tag, err)
	}
	return artifact.ImageSignature{Kind: imagesig.KindSignature, Subject: d, Digest: desc.Digest, Tag: tag, Size: desc.Size}
}

// attest attests path@d (SLSA provenance) with the key and returns the
// evidence as a package records it.
func (r *signedRegistry) attest(t *testing.T, path string, d digest.Digest, keyFile, password string) artifact.ImageSignature {
	t.Helper()
	predicate := filepath.Join(r.home, "provenance.json")
	if err := os.WriteFile(predicate, []byte(`{"builder":{"id":"https://ci.example/builder"},"buildType":"https://example/build"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cosignRun(t, password, "attest", "--key", keyFile, "--predicate", predicate, "--type", "slsaprovenance", "--tlog-upload=false", "--allow-http-registry", "-y", r.host+"/"+path+"@"+d.String())
	tag := strings.Replace(d.String(), ":", "-", 1) + ".att"
	repo, err := r.remote().Repository(r.host + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := repo.Resolve(context.Background(), tag)
	if err != nil {
		t.Fatalf("cosign's attestation %s: %v", tag, err)
	}
	return artifact.ImageSignature{Kind: imagesig.KindAttestation, Subject: d, Digest: desc.Digest, Tag: tag, Size: desc.Size}
}

// verifier reads host's registry.
func verifierFor(opts artifact.RemoteOptions, host string) *Verifier {
	return &Verifier{Repository: func(_ context.Context, path string) (Repository, error) {
		return opts.Repository(host + "/" + path)
	}}
}

// TestWebhookImagePolicy: with the real cosign CLI signing images in a
// real registry, a Pod whose image is signed by the policy's key is
// admitted (and the verdict kept: a second Pod costs no registry request;
// 20 Pods at once share one reading), and so are an index stored filtered
// to one platform whose original index cosign signed, and an image signed
// and attested (`cosign attest`) under a policy requiring that
// attestation; signed by another key, unsigned, lacking the attestation,
// or with its package naming a policy it lacks → refused in one line
// naming image, policy and cause; an optional policy admits an unsigned
// image; the registry unreachable → refused, fail closed.
func TestWebhookImagePolicy(t *testing.T) {
	reg := newSignedRegistry(t)
	publisherKey, publisherPub := reg.keyPair(t, "publisher")
	otherKey, otherPub := reg.keyPair(t, "other")

	signed := reg.push(t, "library/app", 1)
	unsigned := reg.push(t, "library/plain", 2)
	foreign := reg.push(t, "org/foreign", 3)
	other := reg.push(t, "library/app", 4) // signed too, by the same key
	sig := reg.sign(t, "library/app", signed.Digest, publisherKey, "pw-publisher")
	otherSig := reg.sign(t, "library/app", other.Digest, publisherKey, "pw-publisher")
	foreignSig := reg.sign(t, "org/foreign", foreign.Digest, otherKey, "pw-other")
	attested := reg.push(t, "library/attested", 5)
	attestedEvidence := []artifact.ImageSignature{
		reg.sign(t, "library/attested", attested.Digest, publisherKey, "pw-publisher"),
		reg.attest(t, "library/attested", attested.Digest, publisherKey, "pw-publisher"),
	}
	const slsa02 = "https://slsa.dev/provenance/v0.2"
	// A multi-platform index signed upstream, stored filtered to one
	// platform: the signature names the original index.
	original, filtered := reg.pushFiltered(t, "library/multi")
	multiSig := reg.sign(t, "library/multi", original.Digest, publisherKey, "pw-publisher")
	unattested := reg.push(t, "library/unattested", 6)
	unattestedSig := reg.sign(t, "library/unattested", unattested.Digest, publisherKey, "pw-publisher")

	key := func(name, pem string, required bool) imagesig.Policy {
		return imagesig.Policy{Name: name, Required: required, Authorities: []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: pem}}}}
	}
	provenance := key("provenance", publisherPub, true)
	provenance.Attestations = []imagesig.Attestation{{PredicateType: slsa02}}
	src := &countingSource{}
	src.add(&artifact.Config{Name: "demo", Version: "1",
		ImagePolicies: []imagesig.Policy{key("publisher", publisherPub, true), key("optional", publisherPub, false), key("wrong", otherPub, true), provenance},
		Components: []artifact.Component{{Name: "web", Images: []artifact.Image{
			{Ref: "docker.io/library/app:1.0", Digest: signed.Digest, Signatures: []artifact.ImageSignature{sig}, Policy: "publisher"},
			{Ref: "docker.io/library/plain:1.0", Digest: unsigned.Digest, Policy: "publisher"},
			{Ref: "docker.io/library/plain:optional", Digest: unsigned.Digest, Policy: "optional"},
			{Ref: "ghcr.io/org/foreign:1", Digest: foreign.Digest, Signatures: []artifact.ImageSignature{foreignSig}, Policy: "publisher"},
			{Ref: "docker.io/library/app:wrong", Digest: other.Digest, Signatures: []artifact.ImageSignature{otherSig}, Policy: "wrong"},
			{Ref: "docker.io/library/multi:1", OriginalDigest: original.Digest, Digest: filtered.Digest, Signatures: []artifact.ImageSignature{multiSig}, Policy: "publisher"},
			{Ref: "docker.io/library/attested:1", Digest: attested.Digest, Signatures: attestedEvidence, Policy: "provenance"},
			{Ref: "docker.io/library/unattested:1", Digest: unattested.Digest, Signatures: []artifact.ImageSignature{unattestedSig}, Policy: "provenance"},
			{Ref: "docker.io/library/app:lost", Digest: other.Digest, Signatures: []artifact.ImageSignature{otherSig}, Policy: "nowhere"},
		}}},
	})
	cache := &Cache{Source: src, Registry: reg.host, RequireKnown: true}
	var logs bytes.Buffer
	v := verifierFor(reg.remote(), reg.host)
	wh := &Webhook{Rewriter: cache.Rewriter, Verifier: v, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
	srv := httptest.NewServer(wh)
	defer srv.Close()
	pod := func(image string) *corev1.Pod {
		p := testPod()
		p.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}
		return p
	}

	before := reg.requests.Load()
	start := time.Now()
	r, p := admit(t, srv.URL, pod("app:1.0"))
	took := time.Since(start)
	if want := reg.host + "/library/app@" + signed.Digest.String(); !r.Allowed || p.Spec.Containers[0].Image != want {
		t.Fatalf("signed by the policy's key: allowed %v (%+v), image %s", r.Allowed, r.Result, p.Spec.Containers[0].Image)
	}
	first := reg.requests.Load() - before
	t.Logf("first decision: %d registry requests, %s", first, took)
	if !strings.Contains(logs.String(), `"msg":"verified"`) || !strings.Contains(logs.String(), `"policy":"publisher"`) {
		t.Fatalf("no record of the verification:\n%s", logs.String())
	}
	before = reg.requests.Load()
	// Again, and by the rewritten reference: the verdict is kept.
	start = time.Now()
	if r, _ := admit(t, srv.URL, p); !r.Allowed {
		t.Fatalf("the rewritten Pod: %+v", r.Result)
	}
	if n := reg.requests.Load() - before; n != 0 || v.Len() != 1 {
		t.Fatalf("a kept verdict cost %d registry requests; %d verdicts kept", n, v.Len())
	}
	t.Logf("kept verdict: %s", time.Since(start))
	// The Pods of a ReplicaSet at once, on an agent that has not decided
	// yet: one reading of the registry between them.
	wh.Verifier = verifierFor(reg.remote(), reg.host)
	before = reg.requests.Load()
	var wg sync.WaitGroup
	var refused atomic.Int32
	for range 20 {
		wg.Go(func() {
			if r, _ := admit(t, srv.URL, pod("app:1.0")); !r.Allowed {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if n := reg.requests.Load() - before; refused.Load() != 0 || n > first {
		t.Fatalf("20 Pods at once: %d refused, %d registry requests (one decision: %d)", refused.Load(), n, first)
	} else {
		t.Logf("20 Pods at once: %d registry requests", n)
	}
	wh.Verifier = v
	if r, p := admit(t, srv.URL, pod("multi:1")); !r.Allowed || p.Spec.Containers[0].Image != reg.host+"/library/multi@"+filtered.Digest.String() {
		t.Fatalf("stored filtered, the original index signed: %+v", r.Result)
	}
	if r, _ := admit(t, srv.URL, pod("attested:1")); !r.Allowed {
		t.Fatalf("signed and attested (cosign attest), under a policy requiring the attestation: %+v", r.Result)
	}
	if r, _ := admit(t, srv.URL, pod("plain:optional")); !r.Allowed {
		t.Fatalf("unsigned under an optional policy: %+v", r.Result)
	}

	app := "docker.io/library/app@" + signed.Digest.String()
	appOther := "docker.io/library/app@" + other.Digest.String()
	for _, c := range []struct{ image, want string }{
		{"plain:1.0", `image docker.io/library/plain@` + unsigned.Digest.String() + ` does not satisfy policy "publisher": ` + imagesig.ErrNoSignature.Error()},
		{"ghcr.io/org/foreign:1", `image ghcr.io/org/foreign@` + foreign.Digest.String() + ` does not satisfy policy "publisher": ` + imagesig.ErrUnverified.Error()},
		{"unattested:1", `image docker.io/library/unattested@` + unattested.Digest.String() + ` does not satisfy policy "provenance": ` + imagesig.ErrUnverified.Error()},
		{"app:wrong", `image ` + appOther + ` does not satisfy policy "wrong": ` + imagesig.ErrUnverified.Error()},
		// In the registry by digest, content two entries record: both policies apply.
		{reg.host + "/library/app@" + other.Digest.String(), `policy "`},
		{"app:lost", `policy "nowhere" is not in its package`},
		// Into the registry by a digest no package recorded, in a covered repository.
		{reg.host + "/library/app@" + unsigned.Digest.String(), "a policy covers repository library/app"},
	} {
		r, _ := admit(t, srv.URL, pod(c.image))
		if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, c.want) || strings.Contains(r.Result.Message, "\n") {
			t.Errorf("%s: allowed %v, %+v; want a one-line refusal with %q", c.image, r.Allowed, r.Result, c.want)
			continue
		}
		t.Logf("%s: %s", c.image, r.Result.Message)
	}

	// The registry unreachable: refused, and no verdict kept.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	wh.Verifier = verifierFor(reg.remote(), gone)
	r, _ = admit(t, srv.URL, pod("app:1.0"))
	if r.Allowed || !strings.Contains(r.Result.Message, `image `+app+`: policy "publisher" not checked: `+OpRegistry) {
		t.Fatalf("registry unreachable: allowed %v, %+v", r.Allowed, r.Result)
	}
	t.Logf("unreachable: %s", r.Result.Message)
	if wh.Verifier.Len() != 0 {
		t.Fatal("a registry error was kept as a verdict")
	}
	// No verifier at all: refused.
	wh.Verifier = nil
	if r, _ := admit(t, srv.URL, pod("app:1.0")); r.Allowed {
		t.Fatal("admitted with no verifier")
	}
}

// TestVerifierCacheBound: the verdicts kept never exceed CacheSize, the
// least recently used going first.
func TestVerifierCacheBound(t *testing.T) {
	v := &Verifier{CacheSize: 2}
	for _, k := range []string{"a", "b", "a", "c"} {
		v.keep(&verdict{key: k})
	}
	if v.Len() != 2 || v.cached("b") != nil || v.cached("a") == nil || v.cached("c") == nil {
		t.Fatalf("kept %d; b %v", v.Len(), v.cached("b"))
	}
	// A refusal is kept RefusalMaxAge, an admission until evicted.
	v.keep(&verdict{key: "old refusal", err: imagesig.ErrUnverified, at: time.Now().Add(-time.Hour)})
	v.keep(&verdict{key: "new refusal", err: imagesig.ErrUnverified, at: time.Now()})
	if v.cached("old refusal") != nil || v.cached("new refusal") == nil {
		t.Fatal("refusals kept wrongly")
	}
	none := &Verifier{CacheSize: -1}
	none.keep(&verdict{key: "a"})
	if none.Len() != 0 {
		t.Fatal("CacheSize < 0 kept a verdict")
	}
}

// BenchmarkChecks: the policy lookup of a Pod whose image is already in
// the registry by digest (as deploy renders workloads), among 2000
// recorded images.
func BenchmarkChecks(b *testing.B) {
	cfg := &artifact.Config{Name: "many", ImagePolicies: []imagesig.Policy{{Name: "p", Required: true}}}
	var imgs []artifact.Image
	for i := range 2000 {
		imgs = append(imgs, artifact.Image{Ref: fmt.Sprintf("docker.io/org/app%d:1", i), Digest: digest.FromString(fmt.Sprint(i)), Policy: "p"})
	}
	cfg.Components = []artifact.Component{{Name: "c", Images: imgs}}
	rw := &Rewriter{Registry: host, Images: Images{}, Policies: Policies{}}
	if err := rw.Images.Add(cfg); err != nil {
		b.Fatal(err)
	}
	if err := rw.Policies.Add(cfg); err != nil {
		b.Fatal(err)
	}
	pod := testPod()
	pod.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: host + "/org/app1999@" + digest.FromString("1999").String()}}}
	for b.Loop() {
		if cs, err := rw.Checks(pod); err != nil || len(cs) != 1 {
			b.Fatalf("%d checks, %v", len(cs), err)
		}
	}
}
