package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/registry"
)

// ExampleNew runs an embedded registry (here behind httptest; Serve and
// ListenAndServe run it on a listener) and pushes and fetches a blob with
// oras-go.
func ExampleNew() {
	ctx := context.Background()
	srv, err := registry.New(ctx, registry.Config{}) // in memory, no auth
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	repo, err := remote.NewRepository(strings.TrimPrefix(ts.URL, "http://") + "/example/blobs")
	if err != nil {
		log.Fatal(err)
	}
	repo.PlainHTTP = true
	data := []byte("hello, registry")
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageLayer, data)
	if err := repo.Blobs().Push(ctx, desc, bytes.NewReader(data)); err != nil {
		log.Fatal(err)
	}
	got, err := content.FetchAll(ctx, repo.Blobs(), desc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(got))
	// Output: hello, registry
}

// ExampleGarbageCollect: a blob pushed but referenced by no manifest is
// swept from the storage.
func ExampleGarbageCollect() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "registry")
	defer os.RemoveAll(root)
	cfg := registry.Config{RootDir: root, MaintenancePoll: 100 * time.Millisecond}
	srv, err := registry.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	repo, _ := remote.NewRepository(strings.TrimPrefix(ts.URL, "http://") + "/example/gc")
	repo.PlainHTTP = true
	data := bytes.Repeat([]byte("x"), 1<<20)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(data), Size: int64(len(data))}
	if err := repo.Blobs().Push(ctx, desc, bytes.NewReader(data)); err != nil {
		log.Fatal(err)
	}
	defer ts.Close()

	// The registry turns read-only meanwhile (it looks for the flag every
	// MaintenancePoll): pulls go on, pushes wait for the collection to end.
	res, err := registry.GarbageCollect(ctx, cfg, registry.GCOptions{Settle: 300 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("freed at least 1 MiB:", res.Before-res.After >= 1<<20)
	// Output: freed at least 1 MiB: true
}
