package controller

import (
	"github.com/ferrypkg/ferry/artifact"
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
			st.Authorities = append(st.Authorities, a.Trusts()...)
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
