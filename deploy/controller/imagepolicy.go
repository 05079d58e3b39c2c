package controller

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// ImagePolicyStatus describes, for the Package status, the image
// signature policies of a package's config and the images each covers.
func ImagePolicyStatus(cfg *artifact.Config) []v1alpha1.ImagePolicyStatus {
	if cfg == nil || len(cfg.ImagePolicies) == 0 {
		return nil
	}
	out := make([]v1alpha1.ImagePolicyStatus, len(cfg.ImagePolicies))
	for i, p := range cfg.ImagePolicies {
		st := v1alpha1.ImagePolicyStatus{Name: p.Name, Required: p.Required, Authorities: []string{}}
		for _, a := range p.Authorities {
			st.Authorities = append(st.Authorities, authorities(a)...)
		}
		for _, at := range p.Attestations {
			st.Attestations = append(st.Attestations, at.PredicateType)
		}
		for _, c := range cfg.Components {
			for _, img := range c.Images {
				if img.Policy == p.Name {
					st.Images = append(st.Images, img.Ref)
				}
			}
		}
		out[i] = st
	}
	return out
}

// authorities names who an authority trusts: its key by fingerprint, or
// each keyless identity.
func authorities(a imagesig.Authority) []string {
	var out []string
	if a.Key != nil {
		out = append(out, "key "+KeyFingerprint(a.Key.PEM))
	}
	if a.Keyless != nil {
		for _, id := range a.Keyless.Identities {
			out = append(out, "keyless "+either(id.Issuer, id.IssuerRegExp)+" "+either(id.Subject, id.SubjectRegExp))
		}
	}
	return out
}

func either(exact, re string) string {
	if exact != "" || re == "" {
		return exact
	}
	return "/" + re + "/"
}

// KeyFingerprint is sha256:<hex> of a PEM public key's DER (PKIX) form,
// or "(unreadable)" when it does not parse.
func KeyFingerprint(pemKey string) string {
	block, _ := pem.Decode([]byte(pemKey))
	if block == nil {
		return "(unreadable)"
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return "(unreadable)"
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "(unreadable)"
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}
