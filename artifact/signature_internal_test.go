package artifact

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/cosign/v2/pkg/oci"
	"github.com/sigstore/cosign/v2/pkg/oci/empty"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
)

// TestSignatureManifestIsCosigns: the signature manifest and config ferry
// writes are byte for byte those cosign's library makes for the same
// signatures (plus the OCI 1.1 subject and artifact type), so that either
// tool appends to the other's, and a package signed again keeps its bytes.
func TestSignatureManifestIsCosigns(t *testing.T) {
	root := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("root"), Size: 4}
	sigs := []signature{
		{payload: []byte(`{"critical":{}}`), layer: ocispec.Descriptor{MediaType: MediaTypeSimpleSigning, Annotations: map[string]string{AnnotationCosignSignature: "c2lnMQ=="}}},
		{payload: []byte(`{"critical":{"x":1}}`), layer: ocispec.Descriptor{MediaType: MediaTypeSimpleSigning, Annotations: map[string]string{AnnotationCosignSignature: "c2lnMg==", "dev.sigstore.cosign/bundle": "{}"}}},
	}
	var theirs []oci.Signature
	for _, s := range sigs {
		cs, err := static.NewSignature(s.payload, s.layer.Annotations[AnnotationCosignSignature],
			static.WithLayerMediaType(types.MediaType(s.layer.MediaType)), static.WithAnnotations(s.layer.Annotations))
		if err != nil {
			t.Fatal(err)
		}
		theirs = append(theirs, cs)
	}
	img, err := mutate.AppendSignatures(empty.Signatures(), false, theirs...)
	if err != nil {
		t.Fatal(err)
	}
	wantConfig, _ := img.RawConfigFile()
	raw, _ := img.RawManifest()
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	subject := rootDescriptor(root)
	m.Subject, m.ArtifactType = &subject, ArtifactTypeSignature
	wantManifest, _ := json.Marshal(m)

	si, err := newSignatureImage(root, sigs)
	if err != nil {
		t.Fatal(err)
	}
	got := si.blobs[si.desc.Digest]
	if !bytes.Equal(got, wantManifest) {
		t.Errorf("manifest:\n got %s\nwant %s", got, wantManifest)
	}
	var gm ocispec.Manifest
	_ = json.Unmarshal(got, &gm)
	if c := si.blobs[gm.Config.Digest]; !bytes.Equal(c, wantConfig) {
		t.Errorf("config:\n got %s\nwant %s", c, wantConfig)
	}
	for _, l := range gm.Layers {
		if _, ok := si.blobs[l.Digest]; !ok {
			t.Errorf("layer %s not among the blobs", l.Digest)
		}
	}
}
