package registrytest_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/registry/registrytest"
)

func TestNewPushPull(t *testing.T) {
	host := registrytest.New(t)
	repo, err := remote.NewRepository(host + "/test/blob")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	ctx := context.Background()
	data := []byte("hello ferry")
	desc := ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := repo.Push(ctx, desc, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	rc, err := repo.Fetch(ctx, desc)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	if !bytes.Equal(got, data) {
		t.Fatalf("fetched %q, want %q", got, data)
	}
}
