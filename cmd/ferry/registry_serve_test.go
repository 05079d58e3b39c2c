package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// serveForTest runs `ferry registry serve` in-process until the test ends
// and returns its URL and a stop function that returns serve's error.
func serveForTest(t *testing.T, o registryServeOptions) (string, func() error) {
	t.Helper()
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
	}
	if o.root == "" && o.storage == "" {
		o.root = t.TempDir()
	}
	o.output, o.shutdownTimeout = "json", 10*time.Second
	return runServerForTest(t, "serve", func(ctx context.Context, out io.Writer) error {
		return runRegistryServe(ctx, out, io.Discard, o)
	})
}

// runServerForTest runs a server command in-process (run, which prints
// one JSON line naming its URL on out, then serves until ctx ends) and
// returns its URL and a function that stops it and returns its error;
// the test's end stops it too.
func runServerForTest(t *testing.T, name string, run func(ctx context.Context, out io.Writer) error) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	br := bufio.NewReader(pr)
	line, err := br.ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("%s: %v", name, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	var info struct{ URL string }
	if err := json.Unmarshal([]byte(line), &info); err != nil {
		t.Fatalf("%s printed %q: %v", name, line, err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop", name)
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return info.URL, stop
}

func TestServeHTPasswd(t *testing.T) {
	url, stop := serveForTest(t, registryServeOptions{htpasswd: registrytest.Htpasswd(t, "bob", "pa55")})
	host := strings.TrimPrefix(url, "http://")

	resp, err := http.Post(url+"/v2/app/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous upload: %s, want 401", resp.Status)
	}

	repo, err := remote.NewRepository(host + "/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	repo.Client = &auth.Client{Credential: auth.StaticCredential(host, auth.Credential{Username: "bob", Password: "pa55"})}
	data := []byte("pushed with credentials")
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := repo.Push(context.Background(), desc, bytes.NewReader(data)); err != nil {
		t.Fatalf("push with credentials: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after cancellation", err)
	}
}

func TestServeRefusesOpenAddressWithoutAuth(t *testing.T) {
	err := runRegistryServe(context.Background(), io.Discard, io.Discard, registryServeOptions{addr: "0.0.0.0:0", storageOptions: storageOptions{root: t.TempDir()}, output: "text"})
	if err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
		t.Fatalf("err = %v, want a refusal naming --insecure-no-auth", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.0.0.2:80": true, "[::1]:5000": true, "localhost:5000": true,
		":5000": false, "0.0.0.0:5000": false, "[::]:5000": false, "10.0.0.1:5000": false, "registry.example:5000": false,
	} {
		got, err := isLoopback(addr)
		if err != nil || got != want {
			t.Errorf("isLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
}

// TestServeFinishesInFlightUpload cancels serve while a chunk upload is
// still streaming: the PATCH must complete (202) and serve return cleanly.
func TestServeFinishesInFlightUpload(t *testing.T) {
	url, stop := serveForTest(t, registryServeOptions{})
	resp, err := http.Post(url+"/v2/app/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPatch, loc.String(), pr)
	req.Header.Set("Content-Type", "application/octet-stream")
	patched := make(chan *http.Response, 1)
	go func() {
		// A connection of its own: Go's server may close a reused
		// keep-alive connection whose next request it has not read yet.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			close(patched)
			return
		}
		resp.Body.Close()
		patched <- resp
	}()
	_, _ = pw.Write(bytes.Repeat([]byte("a"), 1<<20))
	time.Sleep(100 * time.Millisecond) // let the server start handling the PATCH
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	time.Sleep(200 * time.Millisecond) // shutdown has begun; the upload is in flight
	_, _ = pw.Write(bytes.Repeat([]byte("b"), 1<<20))
	_ = pw.Close()
	if r := <-patched; r == nil || r.StatusCode != http.StatusAccepted || r.Header.Get("Range") != "0-2097151" {
		t.Fatalf("in-flight PATCH: %+v", r)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

func TestSplitRegistryRef(t *testing.T) {
	for ref, want := range map[string][2]string{
		"127.0.0.1:5000":               {"http://127.0.0.1:5000", ""},
		"localhost:5000/scratch/x":     {"http://localhost:5000", "scratch/x"},
		"registry.example/pkgs":        {"https://registry.example", "pkgs"},
		"http://registry.example:80/a": {"http://registry.example:80", "a"},
	} {
		base, repo, err := splitRegistryRef(ref, false, false)
		if err != nil || base != want[0] || repo != want[1] {
			t.Errorf("splitRegistryRef(%q) = %q, %q, %v; want %q, %q", ref, base, repo, err, want[0], want[1])
		}
	}
}

func TestRegistryCheckJSON(t *testing.T) {
	host := registrytest.New(t)
	var out bytes.Buffer
	if err := runRegistryCheck(context.Background(), strings.NewReader(""), &out, io.Discard, host+"/checks", registryCheckOptions{output: "json", largeBlob: -1}); err != nil {
		t.Fatalf("check against ferry's registry: %v\n%s", err, out.String())
	}
	var rep conformance.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(conformance.Profile) || rep.Total().Passed != len(conformance.Profile) {
		t.Fatalf("profile run: %s over %d results, want %d passed", rep.Total(), len(rep.Results), len(conformance.Profile))
	}
}

// On S3, serve checks the bucket before serving: wrong credentials or a
// missing bucket fail in one line that names the bucket and never shows the
// secret; `ferry registry gc` collects a bucket two serve processes share
// while they keep serving pulls.
func TestServeS3(t *testing.T) {
	ms := miniotest.Start(t)
	st := ms.Bucket(t)
	url := "s3://" + st.Bucket + "/ferry?endpoint=" + ms.Endpoint + "&path-style=true"
	dir := t.TempDir()
	_, stderr, code := runFerryEnv(t, dir, []string{"AWS_ACCESS_KEY_ID=" + ms.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong-secret-value"},
		"registry", "serve", "--storage", url, "--addr", "127.0.0.1:0")
	if code == 0 || strings.Count(strings.TrimSpace(stderr), "\n") > 0 || !strings.Contains(stderr, st.Bucket) || strings.Contains(stderr, "wrong-secret-value") {
		t.Errorf("wrong secret: exit %d, %q", code, stderr)
	}
	_, stderr, code = runFerryEnv(t, dir, ms.Env(), "registry", "serve", "--storage", strings.Replace(url, st.Bucket, "missing-bucket", 1), "--addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "missing-bucket") || !strings.Contains(stderr, "NoSuchBucket") {
		t.Errorf("missing bucket: exit %d, %q", code, stderr)
	}
	_, stderr, code = runFerry(t, dir, "registry", "serve", "--storage", "s3://AKIA:secret@"+st.Bucket)
	if code == 0 || !strings.Contains(stderr, "credentials do not belong in the URL") || strings.Contains(stderr, "secret@") {
		t.Errorf("credentials in the URL: exit %d, %q", code, stderr)
	}

	for _, kv := range ms.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	a, _ := serveForTest(t, registryServeOptions{storageOptions: storageOptions{storage: url}})
	b, _ := serveForTest(t, registryServeOptions{storageOptions: storageOptions{storage: url}})
	ctx := context.Background()
	repo := func(base, name string) *remote.Repository {
		r, err := remote.NewRepository(strings.TrimPrefix(base, "http://") + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		r.PlainHTTP = true
		return r
	}
	keep := bytes.Repeat([]byte("k"), 1<<20)
	drop := bytes.Repeat([]byte("d"), 1<<20)
	for _, data := range [][]byte{keep, drop} {
		desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
		if err := repo(a, "app").Push(ctx, desc, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	keepDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(keep), Size: 1 << 20}
	cfgDesc := ocispec.DescriptorEmptyJSON
	if err := repo(a, "app").Push(ctx, cfgDesc, bytes.NewReader(cfgDesc.Data)); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specsV2, MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: []ocispec.Descriptor{keepDesc}})
	mDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(m), Size: int64(len(m))}
	if err := repo(a, "app").PushReference(ctx, mDesc, bytes.NewReader(m), "v1"); err != nil {
		t.Fatal(err)
	}

	// A dry run on S3 says so and frees nothing.
	out, stderr, code := runFerryEnv(t, dir, ms.Env(), "registry", "gc", "--dry-run", "--storage", url)
	if code != 0 || !strings.Contains(out, "would free 1.0 MiB in 1 blobs") || !strings.Contains(out, "nothing deleted") {
		t.Fatalf("gc --dry-run: exit %d: %q %s", code, out, stderr)
	}
	if _, err := repo(b, "app").Fetch(ctx, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(drop), Size: 1 << 20}); err != nil {
		t.Fatalf("the unreferenced blob after a dry run: %v", err)
	}
	out, stderr, code = runFerryEnv(t, dir, ms.Env(), "registry", "gc", "--storage", url, "--settle", "3s", "-o", "json")
	if code != 0 {
		t.Fatalf("gc: exit %d: %s", code, stderr)
	}
	var res struct{ Before, After int64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Before-res.After < 1<<20 {
		t.Fatalf("gc printed %q (%v): want at least the 1 MiB unreferenced blob freed", out, err)
	}
	// Both processes serve what a manifest references, and take pushes again.
	for _, base := range []string{a, b} {
		rc, err := repo(base, "app").Fetch(ctx, keepDesc)
		if err != nil {
			t.Fatalf("%s after gc: %v", base, err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, keep) {
			t.Fatalf("%s after gc: the kept layer differs", base)
		}
		if err := repo(base, "other").Push(ctx, keepDesc, bytes.NewReader(keep)); err != nil {
			t.Fatalf("push to %s after gc: %v", base, err)
		}
	}
}

var specsV2 = specs.Versioned{SchemaVersion: 2}

// ferry registry migrate copies a served directory to a bucket, which a
// serve on the bucket then serves.
func TestRegistryMigrateCLI(t *testing.T) {
	ms := miniotest.Start(t)
	st := ms.Bucket(t)
	url := "s3://" + st.Bucket + "/ferry?endpoint=" + ms.Endpoint + "&path-style=true"
	root := t.TempDir()
	base, _ := serveForTest(t, registryServeOptions{storageOptions: storageOptions{root: root}})
	ctx := context.Background()
	r, err := remote.NewRepository(strings.TrimPrefix(base, "http://") + "/app")
	if err != nil {
		t.Fatal(err)
	}
	r.PlainHTTP = true
	data := bytes.Repeat([]byte("m"), 1<<20)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := r.Push(ctx, desc, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runFerryEnv(t, t.TempDir(), ms.Env(), "registry", "migrate", "--from", root, "--to", url, "--settle", "2.5s", "-o", "json")
	if code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, stderr)
	}
	var res struct {
		Result struct{ Objects, Blobs int }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Result.Blobs != 1 {
		t.Fatalf("migrate printed %q (%v)", out, err)
	}
	for _, kv := range ms.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	s3, _ := serveForTest(t, registryServeOptions{storageOptions: storageOptions{storage: url}})
	rs, _ := remote.NewRepository(strings.TrimPrefix(s3, "http://") + "/app")
	rs.PlainHTTP = true
	if ok, err := rs.Exists(ctx, desc); err != nil || !ok {
		t.Fatalf("the migrated blob on S3: %v %v", ok, err)
	}
}
