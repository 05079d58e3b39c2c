package definition

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"regexp/syntax"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// Image verification policies in a definition: named once under
// `imagePolicies:`, then named by `verify:` on the whole definition, a
// component or one image (the nearest wins; `verify: none` opts out). The
// language is the Sigstore policy-controller's authorities, offline:
//
//	imagePolicies:
//	  - name: publisher
//	    required: true                  # default: an unsigned image is refused
//	    authorities:
//	      - key: keys/publisher.pub     # PEM, relative to the definition
//	      - keyless:
//	          trustedRoot: trusted_root.json
//	          identities:
//	            - issuer: https://token.actions.githubusercontent.com
//	              subjectRegExp: ^https://github\.com/acme/
//	    attestations:
//	      - predicateType: slsaprovenance1   # cosign's --type names, or a URI
//	verify: publisher

// VerifyNone is the `verify:` value that says no policy applies.
const VerifyNone = "none"

// ImagePolicy is an entry of the definition's `imagePolicies:`; create
// reads its files into an imagesig.Policy.
type ImagePolicy struct {
	Name     string
	Required bool
	// Authorities: a signature must verify against one of them.
	Authorities  []Authority
	Attestations []imagesig.Attestation
	Line         int
}

// Authority is one authority of a policy: a public key file (Key) or,
// keyless, a Sigstore trusted root file and the certificate identities
// allowed.
type Authority struct {
	Name        string
	Key         string
	TrustedRoot string
	Identities  []imagesig.Identity
	Line        int
}

// predicateTypes are cosign's `--type` names and the predicate types they
// stand for (cosign's options.PredicateTypeMap).
var predicateTypes = map[string]string{
	"custom":           "https://cosign.sigstore.dev/attestation/v1",
	"slsaprovenance":   "https://slsa.dev/provenance/v0.2",
	"slsaprovenance02": "https://slsa.dev/provenance/v0.2",
	"slsaprovenance1":  "https://slsa.dev/provenance/v1",
	"spdx":             "https://spdx.dev/Document",
	"spdxjson":         "https://spdx.dev/Document",
	"cyclonedx":        "https://cyclonedx.org/bom",
	"link":             "https://in-toto.io/Link/v1",
	"vuln":             "https://cosign.sigstore.dev/attestation/vuln/v1",
	"openvex":          "https://openvex.dev/ns",
}

// policyNameRE is the form of a policy name: a DNS label.
var policyNameRE = labelRE

func (p *defParser) imagePolicies(n *yaml.Node, field string, dst *[]ImagePolicy) error {
	seen := map[string]int{}
	return p.seq(n, field, func(item *yaml.Node, f string) error {
		pol, err := p.imagePolicy(item, f)
		if err != nil {
			return err
		}
		if prev, dup := seen[pol.Name]; dup {
			return p.errf(item.Line, join(f, "name"), "duplicate policy name %.64q (also %s[%d])", pol.Name, field, prev)
		}
		seen[pol.Name] = len(*dst)
		*dst = append(*dst, pol)
		return nil
	})
}

func (p *defParser) imagePolicy(n *yaml.Node, field string) (ImagePolicy, error) {
	pol := ImagePolicy{Required: true, Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":     func(v *yaml.Node, f string) error { return p.str(v, f, &pol.Name) },
		"required": func(v *yaml.Node, f string) error { return p.boolean(v, f, &pol.Required) },
		"authorities": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				a, err := p.authority(item, f)
				pol.Authorities = append(pol.Authorities, a)
				return err
			})
		},
		"attestations": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				a, err := p.attestation(item, f)
				pol.Attestations = append(pol.Attestations, a)
				return err
			})
		},
	})
	if err != nil {
		return pol, err
	}
	switch {
	case pol.Name == "":
		return pol, p.errf(n.Line, join(field, "name"), "missing")
	case pol.Name == VerifyNone || !policyNameRE.MatchString(pol.Name):
		return pol, p.errf(p.lineOf(n, "name"), join(field, "name"), "%.64q is not a valid policy name (lowercase letters, digits and '-'; not %q)", pol.Name, VerifyNone)
	case len(pol.Authorities) == 0:
		return pol, p.errf(p.lineOf(n, "authorities"), join(field, "authorities"), "missing: a key or a keyless authority the images' signatures must verify against")
	}
	return pol, nil
}

func (p *defParser) authority(n *yaml.Node, field string) (Authority, error) {
	a := Authority{Line: n.Line}
	keyless := false
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name": func(v *yaml.Node, f string) error { return p.str(v, f, &a.Name) },
		"key":  func(v *yaml.Node, f string) error { return p.path(v, f, &a.Key) },
		"keyless": func(v *yaml.Node, f string) error {
			keyless = true
			return p.keyless(v, f, &a)
		},
	})
	if err != nil {
		return a, err
	}
	if (a.Key != "") == keyless {
		return a, p.errf(n.Line, field, "must have exactly one of key and keyless")
	}
	return a, nil
}

func (p *defParser) keyless(n *yaml.Node, field string, a *Authority) error {
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"trustedRoot": func(v *yaml.Node, f string) error { return p.path(v, f, &a.TrustedRoot) },
		"identities": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				id, err := p.identity(item, f)
				a.Identities = append(a.Identities, id)
				return err
			})
		},
	})
	switch {
	case err != nil:
		return err
	case a.TrustedRoot == "":
		return p.errf(n.Line, join(field, "trustedRoot"), "missing: a Sigstore trusted_root.json (certificate authorities, transparency logs, timestamp authorities)")
	case len(a.Identities) == 0:
		return p.errf(n.Line, join(field, "identities"), "missing: at least one issuer and subject a certificate must match")
	}
	return nil
}

func (p *defParser) identity(n *yaml.Node, field string) (imagesig.Identity, error) {
	var id imagesig.Identity
	re := func(dst *string) func(*yaml.Node, string) error {
		return func(v *yaml.Node, f string) error {
			if err := p.str(v, f, dst); err != nil {
				return err
			}
			if _, err := regexp.Compile(*dst); err != nil {
				// regexp's error quotes the whole expression; name its part in short.
				var se *syntax.Error
				if errors.As(err, &se) {
					return p.errf(v.Line, f, "invalid regular expression: %s: %.64q", se.Code, se.Expr)
				}
				return p.errf(v.Line, f, "invalid regular expression: %v", err)
			}
			return nil
		}
	}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"issuer":        func(v *yaml.Node, f string) error { return p.str(v, f, &id.Issuer) },
		"subject":       func(v *yaml.Node, f string) error { return p.str(v, f, &id.Subject) },
		"issuerRegExp":  re(&id.IssuerRegExp),
		"subjectRegExp": re(&id.SubjectRegExp),
	})
	switch {
	case err != nil:
		return id, err
	case (id.Issuer == "") == (id.IssuerRegExp == ""):
		return id, p.errf(n.Line, field, "must have exactly one of issuer and issuerRegExp")
	case (id.Subject == "") == (id.SubjectRegExp == ""):
		return id, p.errf(n.Line, field, "must have exactly one of subject and subjectRegExp")
	}
	return id, nil
}

func (p *defParser) attestation(n *yaml.Node, field string) (imagesig.Attestation, error) {
	var a imagesig.Attestation
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":          func(v *yaml.Node, f string) error { return p.str(v, f, &a.Name) },
		"predicateType": func(v *yaml.Node, f string) error { return p.str(v, f, &a.PredicateType) },
	})
	if err != nil {
		return a, err
	}
	if a.PredicateType == "" {
		return a, p.errf(n.Line, join(field, "predicateType"), "missing")
	}
	if uri, ok := predicateTypes[a.PredicateType]; ok {
		a.PredicateType = uri
	} else if u, err := url.Parse(a.PredicateType); err != nil || u.Scheme == "" || u.Host == "" {
		return a, p.errf(p.lineOf(n, "predicateType"), join(field, "predicateType"), "%.64q is neither one of cosign's --type names (slsaprovenance1, spdxjson, cyclonedx, vuln, openvex, …) nor a URI", a.PredicateType)
	}
	return a, nil
}

// checkVerifyNames checks that every `verify:` of def names a policy of
// imagePolicies (or none).
func (p *defParser) checkVerifyNames(def *Definition) error {
	known := map[string]bool{VerifyNone: true}
	for _, pol := range def.ImagePolicies {
		known[pol.Name] = true
	}
	check := func(name string, line int, field string) error {
		if name != "" && !known[name] {
			return p.errf(line, field, "names policy %.64q, which imagePolicies does not define", name)
		}
		return nil
	}
	if err := check(def.Verify, def.verifyLine, "verify"); err != nil {
		return err
	}
	for ci, c := range def.Components {
		if err := check(c.Verify, c.Line, fmt.Sprintf("components[%d].verify", ci)); err != nil {
			return err
		}
		for ii, img := range c.Images {
			if err := check(img.Verify, img.Line, fmt.Sprintf("components[%d].images[%d].verify", ci, ii)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImagePolicyName is the name of the policy that applies to image img of
// component c: the image's, else the component's, else the definition's;
// "" for none.
func (d *Definition) ImagePolicyName(c Component, img Image) string {
	name := d.Verify
	if c.Verify != "" {
		name = c.Verify
	}
	if img.Verify != "" {
		name = img.Verify
	}
	if name == VerifyNone {
		return ""
	}
	return name
}
