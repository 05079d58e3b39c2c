package registry_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/internal/diskspace"
	"github.com/ferrypkg/ferry/internal/testsupport/tmpfs"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// The registry's file system fills during pushes: the push that does not
// fit is refused in one line naming the free space, before a byte of it is
// stored; an upload of unknown size that meets the full disk is refused the
// same way and its session removed; nothing half-written is served; pulls
// go on; a removal and a garbage collection free the space, and the next
// push succeeds.
func TestStorageFull(t *testing.T) {
	ctx := context.Background()
	const mib = 1 << 20
	root := filepath.Join(tmpfs.Mount(t, 16*mib), "registry")
	cfg := registry.Config{RootDir: root, MaintenancePoll: 20 * time.Millisecond}
	ts := registrytest.NewServer(t, cfg)
	repo, err := remote.NewRepository(registrytest.Host(ts) + "/app")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	// oras-go's default client retries any 5xx, 507 too (for some 7 s):
	// the same line, later.
	repo.Client = &auth.Client{}
	free := func() int64 {
		u, err := diskspace.Of(root)
		if err != nil {
			t.Fatal(err)
		}
		return u.Free
	}

	// Two images of 6 MiB fill most of the 16 MiB.
	a := pushOneLayer(t, ctx, repo, "a", randomBytes(t, 6*mib))
	pushOneLayer(t, ctx, repo, "b", randomBytes(t, 6*mib))
	t.Logf("free after two images of 6 MiB: %s", diskspace.Bytes(free()))

	// A third is refused before it is stored, in one line.
	c := randomBytes(t, 6*mib)
	cdesc := content.NewDescriptorFromBytes("application/octet-stream", c)
	before := free()
	err = repo.Push(ctx, cdesc, bytes.NewReader(c))
	if err == nil {
		t.Fatal("a push of 6 MiB into 4 MiB succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"507", "registry storage full:", "free of 16.0 MiB", "blob of 6.0 MiB refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("refusal %q is not one line", msg)
	}
	t.Logf("refusal: %s", msg)
	if after := free(); before-after > 64<<10 {
		t.Errorf("the refused push took %d bytes", before-after)
	}
	assertNoBlob(t, ctx, repo, cdesc)

	// An upload of unknown size (chunked, no Content-Length) meets the full
	// disk: the same answer, its session removed, nothing served.
	resp := do(t, http.MethodPost, ts.URL+"/v2/app/blobs/uploads/", "", nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("open upload: %s", resp.Status)
	}
	locURL, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	loc := locURL.String()
	req, _ := http.NewRequest(http.MethodPatch, loc, io.NopCloser(bytes.NewReader(c))) // no length: chunked
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var oci struct {
		Errors []struct{ Code, Message string }
	}
	if resp.StatusCode != http.StatusInsufficientStorage || json.Unmarshal(body, &oci) != nil || len(oci.Errors) != 1 ||
		oci.Errors[0].Code != registry.ErrorCodeStorageFull || !strings.Contains(oci.Errors[0].Message, "the upload was refused and removed") {
		t.Fatalf("chunked PATCH past the free space: %s %s", resp.Status, body)
	}
	t.Logf("chunked upload: %s", oci.Errors[0].Message)
	session := filepath.Join(root, "docker/registry/v2/repositories/app/_uploads", path.Base(locURL.Path))
	if _, err := os.Stat(session); !os.IsNotExist(err) {
		t.Errorf("the refused upload's session %s is still there (%v)", session, err)
	}
	if after := free(); before-after > 64<<10 {
		t.Errorf("the refused upload kept %d bytes", before-after)
	}
	resp = do(t, http.MethodPut, loc+"&digest="+cdesc.Digest.String(), "", nil)
	if resp.StatusCode/100 == 2 {
		t.Fatalf("the removed upload could be committed: %s", resp.Status)
	}
	assertNoBlob(t, ctx, repo, cdesc)

	// Pulls go on while the storage is full.
	if got, err := content.FetchAll(ctx, repo, a.layer); err != nil || digest.FromBytes(got) != a.layer.Digest {
		t.Fatalf("pull while full: %v", err)
	}

	// Removing an image and collecting garbage frees its space.
	if err := repo.Delete(ctx, a.manifest); err != nil {
		t.Fatal(err)
	}
	before = free()
	if _, err := registry.GarbageCollect(ctx, cfg, registry.GCOptions{Settle: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if freed := free() - before; freed < 6*mib {
		t.Fatalf("garbage collection freed %s, want the 6 MiB image", diskspace.Bytes(freed))
	}

	// And the push that was refused now goes through.
	waitWritable(t, ts.URL)
	pushOneLayer(t, ctx, repo, "c", c)
	if got, err := content.FetchAll(ctx, repo, cdesc); err != nil || !bytes.Equal(got, c) {
		t.Fatalf("pull of the image pushed after the collection: %v", err)
	}
}

type pushed struct{ layer, manifest ocispec.Descriptor }

// pushOneLayer pushes one image of one layer, tagged tag.
func pushOneLayer(t *testing.T, ctx context.Context, repo *remote.Repository, tag string, layer []byte) pushed {
	t.Helper()
	ld := content.NewDescriptorFromBytes("application/vnd.oci.image.layer.v1.tar", layer)
	if err := repo.Push(ctx, ld, bytes.NewReader(layer)); err != nil {
		t.Fatalf("push layer of %s: %v", tag, err)
	}
	if err := repo.Push(ctx, ocispec.DescriptorEmptyJSON, bytes.NewReader(ocispec.DescriptorEmptyJSON.Data)); err != nil {
		t.Fatalf("push config of %s: %v", tag, err)
	}
	m, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: ocispec.DescriptorEmptyJSON, Layers: []ocispec.Descriptor{ld}})
	md := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, m)
	if err := repo.PushReference(ctx, md, bytes.NewReader(m), tag); err != nil {
		t.Fatalf("push manifest of %s: %v", tag, err)
	}
	return pushed{layer: ld, manifest: md}
}

// assertNoBlob checks that desc is neither HEAD-able nor GET-able.
func assertNoBlob(t *testing.T, ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor) {
	t.Helper()
	if ok, err := repo.Blobs().Exists(ctx, desc); err != nil || ok {
		t.Fatalf("HEAD of the refused blob: exists %v, %v", ok, err)
	}
	if _, err := content.FetchAll(ctx, repo.Blobs(), desc); err == nil {
		t.Fatal("GET of the refused blob succeeded")
	}
}

// waitWritable waits until the registry takes uploads again after a
// collection's read-only mode.
func waitWritable(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := do(t, http.MethodPost, base+"/v2/probe/blobs/uploads/", "", nil)
		if resp.StatusCode == http.StatusAccepted {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry still refuses uploads: %s", resp.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
