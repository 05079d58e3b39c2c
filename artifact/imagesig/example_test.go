package imagesig_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact/imagesig"
	_ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore" // links the verification engine
)

// A cosign signature, as `cosign sign --key` pushes it to the
// sha256-<hex>.sig tag, checked against a key policy.
func ExamplePolicy_Verify() {
	ctx := context.Background()
	store := memory.New()
	push := func(mt string, data []byte, ann map[string]string) ocispec.Descriptor {
		d := content.NewDescriptorFromBytes(mt, data)
		if err := store.Push(ctx, d, bytes.NewReader(data)); err != nil {
			log.Fatal(err)
		}
		d.Annotations = ann
		return d
	}
	image := digest.FromString("an image manifest")

	// The publisher's key and its signature over the simple-signing payload.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	payload := []byte(`{"critical":{"identity":{"docker-reference":"registry.example/app"},"image":{"docker-manifest-digest":"` +
		image.String() + `"},"type":"cosign container image signature"},"optional":null}`)
	sum := sha256.Sum256(payload)
	sig, _ := ecdsa.SignASN1(rand.Reader, key, sum[:])
	layer := push(imagesig.MediaTypeSimpleSigning, payload, map[string]string{imagesig.AnnotationSignature: base64.StdEncoding.EncodeToString(sig)})
	manifest, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: push("application/vnd.oci.empty.v1+json", []byte("{}"), nil), Layers: []ocispec.Descriptor{layer}})
	evidence := push(ocispec.MediaTypeImageManifest, manifest, nil)

	policy := &imagesig.Policy{Name: "publisher", Required: true, Authorities: []imagesig.Authority{
		{Name: "publisher", Key: &imagesig.KeyAuthority{PEM: string(pub)}},
	}}
	res, err := policy.Verify(ctx, store, image, []ocispec.Descriptor{evidence})
	fmt.Println(res.Signers, err)

	_, err = policy.Verify(ctx, store, digest.FromString("another image"), []ocispec.Descriptor{evidence})
	fmt.Println(errors.Is(err, imagesig.ErrNoSignature))
	// Output:
	// [publisher] <nil>
	// true
}
