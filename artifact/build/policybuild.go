package build

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// imagePolicies reads the definition's policies that some image uses,
// their key and trusted root files through the definition's folder, into
// what ferry.json carries.
func (b *builder) imagePolicies() ([]imagesig.Policy, error) {
	var out []imagesig.Policy
	for _, d := range b.usedPolicies() {
		pol, err := b.imagePolicy(d)
		if err != nil {
			return nil, b.policyError(d, err)
		}
		out = append(out, pol)
	}
	return out, nil
}

// usedPolicies are the definition's policies that some image uses, in
// the definition's order.
func (b *builder) usedPolicies() []definition.ImagePolicy {
	used := map[string]bool{}
	for _, c := range b.def.Components {
		for _, img := range c.Images {
			if name := b.def.ImagePolicyName(c, img); name != "" {
				used[name] = true
			}
		}
		// Images findImages adds get the component's policy.
		if c.FindImages {
			if name := b.def.ImagePolicyName(c, definition.Image{}); name != "" {
				used[name] = true
			}
		}
	}
	var out []definition.ImagePolicy
	for _, d := range b.def.ImagePolicies {
		if used[d.Name] {
			out = append(out, d)
		}
	}
	return out
}

// policyError locates err, a policy's, in the definition.
func (b *builder) policyError(d definition.ImagePolicy, err error) error {
	return &definition.Error{File: b.def.File, Line: d.Line, Field: "imagePolicies." + d.Name, Msg: err.Error(), Err: err}
}

func (b *builder) imagePolicy(d definition.ImagePolicy) (imagesig.Policy, error) {
	pol := imagesig.Policy{Name: d.Name, Required: d.Required, Attestations: d.Attestations}
	for _, a := range d.Authorities {
		auth := imagesig.Authority{Name: a.Name}
		switch {
		case a.Key != "":
			data, err := b.folder.ReadFile(a.Key, artifact.MaxKeyFileSize)
			if err != nil {
				return pol, fmt.Errorf("key %s: %w", a.Key, err)
			}
			if _, err := artifact.ParsePublicKey(a.Key, data); err != nil {
				return pol, err
			}
			auth.Key = &imagesig.KeyAuthority{PEM: string(data)}
		default:
			data, err := b.folder.ReadFile(a.TrustedRoot, artifact.MaxTrustedRootSize)
			if err != nil {
				return pol, fmt.Errorf("trusted root %s: %w", a.TrustedRoot, err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, data); err != nil {
				return pol, fmt.Errorf("trusted root %s: %w", a.TrustedRoot, err)
			}
			auth.Keyless = &imagesig.KeylessAuthority{Identities: a.Identities, TrustedRoot: compact.Bytes()}
		}
		pol.Authorities = append(pol.Authorities, auth)
	}
	if err := pol.Validate(); err != nil {
		return pol, err
	}
	return pol, nil
}

// checkImagePolicy checks the image create added (rec, stored as stored,
// with its image-signature entries evidence) against the policy the
// definition names for it, if any, and records the policy's name.
func (b *builder) checkImagePolicy(ctx context.Context, c definition.Component, img definition.Image, rec *artifact.Image, stored ocispec.Descriptor, evidence []ocispec.Descriptor) error {
	name := b.def.ImagePolicyName(c, img)
	if name == "" {
		return nil
	}
	pol := artifact.FindPolicy(b.policies, name)
	if pol == nil {
		return fmt.Errorf("policy %q is not defined", name)
	}
	rec.Policy = name
	entries := append([]ocispec.Descriptor{stored}, evidence...)
	_, err := artifact.VerifyImage(ctx, builderFetcher{b}, pol, *rec, entries)
	return err
}
