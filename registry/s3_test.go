package registry_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry"
)

// forEachStorage runs f on a new filesystem storage and on a new bucket of
// a real S3 store (MinIO; the subtest is skipped without it unless
// FERRY_REQUIRE_TOOLS=1).
func forEachStorage(t *testing.T, f func(t *testing.T, cfg registry.Config)) {
	t.Run("filesystem", func(t *testing.T) { f(t, registry.Config{RootDir: t.TempDir()}) })
	t.Run("s3", func(t *testing.T) { f(t, registry.Config{S3: miniotest.Start(t).Bucket(t)}) })
}

// Two registries on one bucket are one registry: what is pushed to one,
// the other serves — blobs, tags, sha512 aliases, referrers — and an upload
// started on one is finished on the other.
func TestSharedS3Storage(t *testing.T) {
	st := miniotest.Start(t).Bucket(t)
	a, stopA := startOn(t, registry.Config{S3: st})
	defer stopA()
	b, stopB := startOn(t, registry.Config{S3: st})
	defer stopB()
	ctx := context.Background()

	m, layer := pushImage(t, a, "team/app", "1")
	rb := mustRepo(t, b, "team/app")
	if _, err := content.FetchAll(ctx, rb.Blobs(), layer); err != nil {
		t.Fatalf("layer pushed to one, pulled from the other: %v", err)
	}
	if d, err := rb.Resolve(ctx, "1"); err != nil || d.Digest != m.Digest {
		t.Fatalf("tag: %v %v", d.Digest, err)
	}
	sig, _ := pushReferrer(t, a, "team/app", m, "application/vnd.example.sig")
	sbom, _ := pushReferrer(t, b, "team/app", m, "application/vnd.example.sbom")
	for _, base := range []string{a, b} {
		if idx, _ := listReferrers(t, base, "team/app", m.Digest, ""); len(idx.Manifests) != 2 {
			t.Fatalf("referrers at %s: %+v", base, idx.Manifests)
		}
	}
	if resp := do(t, http.MethodDelete, b+"/v2/team/app/manifests/"+sig.Digest.String(), "", nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE referrer: %s", resp.Status)
	}
	if idx, _ := listReferrers(t, a, "team/app", m.Digest, ""); len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sbom.Digest {
		t.Fatalf("referrers after a delete on the other: %+v", idx.Manifests)
	}

	// A manifest PUT by its sha512 digest on one is found by it on the other.
	d512, raw := putSHA512Manifest(t, a, "team/app")
	resp, body := getManifest(t, b+"/v2/team/app/manifests/"+d512.String())
	if resp.StatusCode != http.StatusOK || string(body) != string(raw) || resp.Header.Get("Docker-Content-Digest") != d512.String() {
		t.Fatalf("GET by sha512 on the other: %s %q", resp.Status, resp.Header.Get("Docker-Content-Digest"))
	}

	// A chunked upload: POST and PATCH on one, PUT on the other (the
	// upload state is signed with the secret both read from the bucket).
	data := []byte(strings.Repeat("chunk", 1000))
	resp = do(t, http.MethodPost, a+"/v2/team/app/blobs/uploads/", "", nil)
	loc, err := resp.Location()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST: %s %v", resp.Status, err)
	}
	resp = do(t, http.MethodPatch, loc.String(), "application/octet-stream", data)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH: %s", resp.Status)
	}
	loc, _ = resp.Location()
	q := loc.Query()
	q.Set("digest", digest.FromBytes(data).String())
	loc.RawQuery = q.Encode()
	other := strings.Replace(loc.String(), strings.TrimPrefix(a, "http://"), strings.TrimPrefix(b, "http://"), 1)
	if resp := do(t, http.MethodPut, other, "", nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT on the other registry: %s", resp.Status)
	}
}

// CheckStorage proves a storage usable, and says clearly what is wrong
// with one that is not.
func TestCheckStorage(t *testing.T) {
	ctx := context.Background()
	ms := miniotest.Start(t)
	st := ms.Bucket(t)
	if err := registry.CheckStorage(ctx, registry.Config{S3: st}); err != nil {
		t.Fatal(err)
	}
	wrongKey := *st
	wrongKey.SecretKey = "not-the-secret"
	err := registry.CheckStorage(ctx, registry.Config{S3: &wrongKey})
	if err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") || strings.Contains(err.Error(), "not-the-secret") {
		t.Errorf("wrong secret key: %v", err)
	}
	noBucket := *st
	noBucket.Bucket = "no-such-bucket"
	if err := registry.CheckStorage(ctx, registry.Config{S3: &noBucket}); err == nil || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Errorf("missing bucket: %v", err)
	}
	if err := registry.CheckStorage(ctx, registry.Config{RootDir: t.TempDir()}); err != nil {
		t.Errorf("filesystem: %v", err)
	}
}

func TestParseS3URL(t *testing.T) {
	s, err := registry.ParseS3URL("s3://bkt/some/prefix?endpoint=http://127.0.0.1:9000&region=eu-west-1&path-style=true")
	if err != nil {
		t.Fatal(err)
	}
	want := registry.S3{Bucket: "bkt", Prefix: "some/prefix", Endpoint: "http://127.0.0.1:9000", Region: "eu-west-1", PathStyle: true}
	if *s != want {
		t.Fatalf("got %+v, want %+v", *s, want)
	}
	if back, err := registry.ParseS3URL(s.String()); err != nil || *back != want {
		t.Fatalf("round trip through %s: %+v %v", s, back, err)
	}
	for in, msg := range map[string]string{
		"s3://key:secret@bkt":        "credentials do not belong in the URL",
		"s3:///prefix":               "no bucket",
		"http://bkt":                 "want s3://bucket",
		"s3://bkt?endpoint=ftp://x":  "endpoint",
		"s3://bkt?path-style=maybe":  "path-style",
		"s3://bkt?accesskey=AKIA123": "unknown parameter",
	} {
		_, err := registry.ParseS3URL(in)
		if err == nil || !strings.Contains(err.Error(), msg) || strings.Contains(err.Error(), "secret@") {
			t.Errorf("%s: %v, want an error with %q", in, err, msg)
		}
	}
}

// A filesystem storage written by an older ferry kept its side records as
// files of its own; the registry moves them onto the storage and serves
// them.
func TestLegacySideFilesMoved(t *testing.T) {
	root := t.TempDir()
	base, stop := startAt(t, root)
	subject, _ := pushImage(t, base, "team/app", "1")
	stop()
	ref := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.example.sig", Digest: digest.FromString("sig"), Size: 3}
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	alias := digest.SHA512.FromString("manifest")
	write(filepath.Join(root, "ferry", "digests", "team%2Fapp", "sha512", alias.Encoded()), subject.Digest.String()+"\n")
	write(filepath.Join(root, "ferry", "referrers", "team%2Fapp", "sha256", subject.Digest.Encoded(), "sha256-"+ref.Digest.Encoded()+".json"),
		`{"mediaType":"`+ref.MediaType+`","artifactType":"`+ref.ArtifactType+`","digest":"`+ref.Digest.String()+`","size":3}`)

	base, stop = startAt(t, root)
	defer stop()
	if idx, _ := listReferrers(t, base, "team/app", subject.Digest, ""); len(idx.Manifests) != 1 || idx.Manifests[0].Digest != ref.Digest {
		t.Fatalf("referrers: %+v", idx.Manifests)
	}
	resp, _ := getManifest(t, base+"/v2/team/app/manifests/"+alias.String())
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != alias.String() {
		t.Fatalf("GET by the old alias: %s", resp.Status)
	}
	for _, old := range []string{"digests", "referrers"} {
		if _, err := os.Stat(filepath.Join(root, "ferry", old)); !os.IsNotExist(err) {
			t.Errorf("old folder %s left: %v", old, err)
		}
	}
}

// Migrate copies a registry from the filesystem to S3 while it serves
// pulls: a registry on the bucket then serves its tags, referrers and
// sha512 aliases, every blob read back verified.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	from := registry.Config{RootDir: t.TempDir(), MaintenancePoll: 50 * time.Millisecond}
	base, stop := startOn(t, from)
	defer stop()
	m, layer := pushImage(t, base, "team/app", "1")
	sig, _ := pushReferrer(t, base, "team/app", m, "application/vnd.example.sig")
	d512, _ := putSHA512Manifest(t, base, "team/app")

	to := registry.Config{S3: miniotest.Start(t).Bucket(t)}
	res, err := registry.Migrate(ctx, from, to, registry.GCOptions{Settle: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrated %d objects, %d bytes, %d blobs verified", res.Objects, res.Bytes, res.Blobs)
	if res.Blobs < 4 || res.Bytes < 1<<20 {
		t.Fatalf("migrate: %+v", res)
	}
	// The source serves pulls and takes pushes again.
	if _, err := content.FetchAll(ctx, mustRepo(t, base, "team/app").Blobs(), layer); err != nil {
		t.Fatal(err)
	}
	pushImage(t, base, "team/app", "2")

	s3, stopS3 := startOn(t, to)
	defer stopS3()
	r := mustRepo(t, s3, "team/app")
	if d, err := r.Resolve(ctx, "1"); err != nil || d.Digest != m.Digest {
		t.Fatalf("tag on S3: %v %v", d.Digest, err)
	}
	if _, err := content.FetchAll(ctx, r.Blobs(), layer); err != nil {
		t.Fatal(err)
	}
	if idx, _ := listReferrers(t, s3, "team/app", m.Digest, ""); len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sig.Digest {
		t.Fatalf("referrers on S3: %+v", idx.Manifests)
	}
	if resp, _ := getManifest(t, s3+"/v2/team/app/manifests/"+d512.String()); resp.StatusCode != http.StatusOK {
		t.Fatalf("sha512 alias on S3: %s", resp.Status)
	}
	// What was pushed to the source after the copy is not on S3.
	if _, err := r.Resolve(ctx, "2"); err == nil {
		t.Fatal("tag 2, pushed after the migration, is on S3")
	}
}

// putSHA512Manifest PUTs an artifact manifest (and its empty config) to repo
// by its sha512 digest, and returns the digest and the manifest.
func putSHA512Manifest(t *testing.T, base, repo string) (digest.Digest, []byte) {
	t.Helper()
	putBlob(t, base, repo, ocispec.DescriptorEmptyJSON.Data)
	raw := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.example","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"` +
		ocispec.DescriptorEmptyJSON.Digest.String() + `","size":2},"layers":[]}`)
	d512 := digest.SHA512.FromBytes(raw)
	if resp := do(t, http.MethodPut, base+"/v2/"+repo+"/manifests/"+d512.String(), ocispec.MediaTypeImageManifest, raw); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT by sha512: %s", resp.Status)
	}
	return d512, raw
}
