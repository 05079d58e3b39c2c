package artifact_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/registry"
	"oras.land/oras-go/v2/content/oci"
)

// exampleDefinition is a small package: a manifest and a file, no images,
// so that the examples need no image source.
const exampleDefinition = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: hello
  version: 1.0.0
components:
  - name: app
    manifests:
      - name: hello
        files: [hello.yaml]
    files:
      - source: motd.txt
        target: /etc/motd
`

// examplePackage writes the definition and its sources into dir and
// creates the package there, reproducibly; it returns the archive's path.
func examplePackage(dir string) string {
	files := map[string]string{
		"ferry.yaml": exampleDefinition,
		"hello.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\ndata:\n  greeting: hello\n",
		"motd.txt":   "Welcome aboard.\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	def, err := definition.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	epoch := time.Unix(1700000000, 0)
	res, err := build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(dir, "hello.tar.zst"), Epoch: &epoch, Charts: chart.Packager{}})
	if err != nil {
		log.Fatal(err)
	}
	return res.Path
}

// exampleRegistry runs an in-memory registry on loopback and returns its
// host and a function that stops it.
func exampleRegistry() (string, func()) {
	srv, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	return strings.TrimPrefix(ts.URL, "http://"), ts.Close
}

func ExampleCreate() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	def, err := definition.Parse(filepath.Join(dir, "ferry.yaml"), []byte(exampleDefinition))
	if err != nil {
		log.Fatal(err)
	}
	_, err = build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(dir, "hello.tar.zst")})
	fmt.Println(err != nil) // the sources are not there yet

	path := examplePackage(dir)
	fmt.Println(filepath.Base(path))
	// Output:
	// true
	// hello.tar.zst
}

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	r, err := artifact.Open(context.Background(), examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Config().Name, r.Config().Version, r.Root().ArtifactType)
	// Output: hello 1.0.0 application/vnd.ferry.package.v1+json
}

func ExampleInspect() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	r, err := artifact.Open(context.Background(), examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	rep, err := artifact.Inspect(context.Background(), r, "", nil) // every blob verified
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Name, rep.Blobs, "blobs, signed:", rep.Signed)
	// Output: hello 5 blobs, signed: false
}

// exampleKeys makes a cosign key pair in dir: the signer and the verifier.
func exampleKeys(dir string) (artifact.Signer, artifact.Verifier) {
	pair, err := key.Generate([]byte("secret"))
	if err != nil {
		log.Fatal(err)
	}
	priv, pub := filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	if err := pair.WriteFiles(priv, pub); err != nil {
		log.Fatal(err)
	}
	signer, err := key.LoadPrivate(priv, []byte("secret"))
	if err != nil {
		log.Fatal(err)
	}
	verifier, err := artifact.LoadPublicKey(pub)
	if err != nil {
		log.Fatal(err)
	}
	return signer, verifier
}

func ExampleSign() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := examplePackage(dir)
	signer, _ := exampleKeys(dir)
	r, _ := artifact.Open(context.Background(), path)
	res, err := artifact.Sign(context.Background(), r, "", signer, artifact.SignOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("signatures:", res.Signatures, "added:", res.Added)
	// Output: signatures: 1 added: true
}

func ExampleVerify() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	signer, verifier := exampleKeys(dir)
	epoch := time.Unix(1700000000, 0)
	def, _ := definition.Parse(filepath.Join(dir, "ferry.yaml"), []byte(exampleDefinition))
	examplePackage(dir) // the sources
	res, err := build.Create(ctx, def, build.CreateOptions{Output: filepath.Join(dir, "signed.tar"), Epoch: &epoch, SignKey: signer})
	if err != nil {
		log.Fatal(err)
	}
	r, _ := artifact.Open(ctx, res.Path)
	v, err := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{verifier}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("verified:", v.Report.Name, len(v.Signatures), "signature")

	otherDir := filepath.Join(dir, "other")
	os.Mkdir(otherDir, 0o755)
	_, other := exampleKeys(otherDir)
	_, err = artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{other}})
	fmt.Println(errors.Is(err, artifact.ErrSignature))
	// Output:
	// verified: hello 1 signature
	// true
}

func ExamplePush() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	host, stop := exampleRegistry()
	defer stop()
	ctx := context.Background()
	r, err := artifact.Open(ctx, examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	ref := host + "/packages/hello:1.0.0"
	res, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed", res.Pushed, "blobs")
	// Pushed again, to where it is: nothing is read or uploaded.
	again, _ := artifact.Push(ctx, r, ref, artifact.PushOptions{})
	fmt.Println("again: unchanged", again.Unchanged)
	// Output:
	// pushed 5 blobs
	// again: unchanged true
}

// examplePushed is the example package, pushed to a new registry: its
// reference, its root digest and a function that stops the registry.
func examplePushed(dir string) (string, string, func()) {
	host, stop := exampleRegistry()
	r, err := artifact.Open(context.Background(), examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	ref := host + "/packages/hello:1.0.0"
	if _, err := artifact.Push(context.Background(), r, ref, artifact.PushOptions{}); err != nil {
		log.Fatal(err)
	}
	return ref, r.Root().Digest.String(), stop
}

func ExamplePull() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ref, root, stop := examplePushed(dir)
	defer stop()
	repo, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		log.Fatal(err)
	}
	pulled, err := artifact.Pull(context.Background(), repo, "1.0.0", filepath.Join(dir, "pulled.tar.zst"), artifact.PullOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pulled", pulled.Blobs, "blobs, same root:", pulled.Root.Digest.String() == root)
	// Output: pulled 5 blobs, same root: true
}

// ExampleInspect_registry reports on a package in a registry: Inspect,
// Verify and Sign take any oras target, a registry repository as well as a
// package on disk.
func ExampleInspect_registry() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ref, root, stop := examplePushed(dir)
	defer stop()
	repo, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		log.Fatal(err)
	}
	rep, err := artifact.Inspect(context.Background(), repo, repo.Reference.Reference, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Name, rep.Version, rep.Root.String() == root)
	// Output: hello 1.0.0 true
}

// ExampleSign_registry signs a package in its registry, where cosign looks
// for the signature too, and verifies it there.
func ExampleSign_registry() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ref, _, stop := examplePushed(dir)
	defer stop()
	signer, verifier := exampleKeys(dir)
	ctx := context.Background()
	repo, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		log.Fatal(err)
	}
	res, err := artifact.Sign(ctx, repo, "1.0.0", signer, artifact.SignOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("signatures:", res.Signatures)
	v, err := artifact.Verify(ctx, repo, "1.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{verifier}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("verified:", v.Report.Name, len(v.Signatures), "signature")
	// Output:
	// signatures: 1
	// verified: hello 1 signature
}

// ExampleVerify_unsigned: a package pushed without a signature does not
// verify; the error says where the signature was looked for.
func ExampleVerify_unsigned() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ref, _, stop := examplePushed(dir)
	defer stop()
	_, verifier := exampleKeys(dir)
	repo, err := artifact.RemoteOptions{}.Repository(ref)
	if err != nil {
		log.Fatal(err)
	}
	_, err = artifact.Verify(context.Background(), repo, "1.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{verifier}})
	fmt.Println(errors.Is(err, artifact.ErrNoSignature))
	// Output: true
}

// ExampleCopy copies a package from its archive into an OCI layout store
// (any oras target: a registry, memory), its signature and tags with it.
func ExampleCopy() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	r, err := artifact.Open(ctx, examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	store, err := oci.New(filepath.Join(dir, "layout"))
	if err != nil {
		log.Fatal(err)
	}
	res, err := artifact.Copy(ctx, r, "", store, "1.0.0", artifact.CopyOptions{})
	if err != nil {
		log.Fatal(err)
	}
	d, _ := store.Resolve(ctx, "1.0.0")
	fmt.Println(d.Digest == res.Root.Digest, res.Root.ArtifactType)
	// Output: true application/vnd.ferry.package.v1+json
}
