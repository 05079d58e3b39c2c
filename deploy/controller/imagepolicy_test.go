package controller

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"reflect"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
)

// TestImagePolicyStatus: an install puts the package's image signature
// policies in the Package status — name, required, each authority (a key
// by the SHA-256 of its DER form, a keyless identity by issuer and
// subject), the attestations, and the images each covers.
func TestImagePolicyStatus(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	sum := sha256.Sum256(der)
	fingerprint := "sha256:" + hex.EncodeToString(sum[:])

	cfg := &artifact.Config{Name: "demo", Version: "1.0.0",
		ImagePolicies: []imagesig.Policy{
			{Name: "publisher", Required: true,
				Authorities:  []imagesig.Authority{{Key: &imagesig.KeyAuthority{PEM: pemKey}}},
				Attestations: []imagesig.Attestation{{PredicateType: "https://slsa.dev/provenance/v1"}}},
			{Name: "ci", Authorities: []imagesig.Authority{{Keyless: &imagesig.KeylessAuthority{Identities: []imagesig.Identity{
				{Issuer: "https://token.actions.githubusercontent.com", SubjectRegExp: "https://github.com/org/.*"},
			}}}}},
		},
		Components: []artifact.Component{{Name: "web", Images: []artifact.Image{
			{Ref: "docker.io/library/app:1.0", Policy: "publisher"},
			{Ref: "ghcr.io/org/tool:v2", Policy: "ci"},
			{Ref: "docker.io/library/plain:1.0"},
			{Ref: "docker.io/library/app:1.1", Policy: "publisher"},
		}}},
	}
	pkg := &v1alpha1.Package{}
	r := reconciler(t)
	r.installed(pkg, &rollout.Record{Name: "demo", Version: "1.0.0", Config: cfg}, false)
	want := []v1alpha1.ImagePolicyStatus{
		{Name: "publisher", Required: true, Authorities: []string{"key " + fingerprint},
			Attestations: []string{"https://slsa.dev/provenance/v1"}, Images: []string{"docker.io/library/app:1.0", "docker.io/library/app:1.1"}},
		{Name: "ci", Authorities: []string{"keyless https://token.actions.githubusercontent.com /https://github.com/org/.*/"}, Images: []string{"ghcr.io/org/tool:v2"}},
	}
	if got := pkg.Status.ImagePolicies; !reflect.DeepEqual(got, want) {
		t.Fatalf("status\n%+v\nwant\n%+v", got, want)
	}
	// A package without policies shows none.
	pkg = &v1alpha1.Package{}
	r.installed(pkg, &rollout.Record{Name: "plain", Config: &artifact.Config{Name: "plain"}}, false)
	if pkg.Status.ImagePolicies != nil {
		t.Fatalf("policies of a package without: %+v", pkg.Status.ImagePolicies)
	}
	if got := imagesig.KeyFingerprint("not a key"); got != "(unreadable)" {
		t.Fatalf("fingerprint of garbage: %s", got)
	}
}
