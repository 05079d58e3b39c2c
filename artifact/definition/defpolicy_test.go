package definition_test

import (
	"github.com/ferrypkg/ferry/artifact/definition"

	"strings"
	"testing"
)

const policyHead = "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: demo\n  version: 1.0.0\n"

func TestParseImagePolicies(t *testing.T) {
	def, err := definition.Parse("ferry.yaml", []byte(policyHead+`imagePolicies:
  - name: publisher
    authorities:
      - key: keys/pub.pem
      - name: ci
        keyless:
          trustedRoot: trusted_root.json
          identities:
            - issuer: https://token.actions.githubusercontent.com
              subjectRegExp: ^https://github\.com/acme/
    attestations:
      - predicateType: slsaprovenance1
      - predicateType: https://example.com/custom/v1
  - name: lax
    required: false
    authorities: [{key: lax.pub}]
verify: publisher
components:
  - name: a
    verify: lax
    images:
      - ref: nginx:1.27
        verify: none
      - ref: redis:7
  - name: b
    images: [busybox:1.36]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(def.ImagePolicies) != 2 {
		t.Fatalf("policies: %+v", def.ImagePolicies)
	}
	pub := def.ImagePolicies[0]
	if !pub.Required || len(pub.Authorities) != 2 || pub.Authorities[0].Key != "keys/pub.pem" ||
		pub.Authorities[1].TrustedRoot != "trusted_root.json" || pub.Authorities[1].Identities[0].SubjectRegExp != `^https://github\.com/acme/` {
		t.Errorf("publisher: %+v", pub)
	}
	if got := pub.Attestations[0].PredicateType; got != "https://slsa.dev/provenance/v1" {
		t.Errorf("slsaprovenance1 is %q", got)
	}
	if def.ImagePolicies[1].Required {
		t.Error("required: false read as true")
	}
	if def.Verify != "publisher" || def.Components[0].Verify != "lax" || def.Components[0].Images[0].Verify != "none" || def.Components[0].Images[1].Verify != "" {
		t.Errorf("verify: %q %q %q", def.Verify, def.Components[0].Verify, def.Components[0].Images[0].Verify)
	}
}

func TestParseImagePolicyErrors(t *testing.T) {
	comp := "components:\n  - name: a\n    images:\n      - ref: nginx:1\n        verify: ghost\n"
	tests := []struct{ name, yaml, want string }{
		{"unknown policy", policyHead + comp, "ferry.yaml:9: components[0].images[0].verify: names policy \"ghost\", which imagePolicies does not define"},
		{"unknown top verify", policyHead + "verify: ghost\n", "ferry.yaml:6: verify: names policy \"ghost\""},
		{"no authorities", policyHead + "imagePolicies:\n  - name: p\n", "imagePolicies[0].authorities: missing"},
		{"both key and keyless", policyHead + "imagePolicies:\n  - name: p\n    authorities:\n      - key: k.pub\n        keyless: {trustedRoot: r.json, identities: [{issuer: i, subject: s}]}\n", "imagePolicies[0].authorities[0]: must have exactly one of key and keyless"},
		{"key escapes", policyHead + "imagePolicies:\n  - name: p\n    authorities: [{key: ../k.pub}]\n", "imagePolicies[0].authorities[0].key: path \"../k.pub\" escapes"},
		{"keyless without root", policyHead + "imagePolicies:\n  - name: p\n    authorities:\n      - keyless: {identities: [{issuer: i, subject: s}]}\n", "keyless.trustedRoot: missing"},
		{"keyless without identity", policyHead + "imagePolicies:\n  - name: p\n    authorities:\n      - keyless: {trustedRoot: r.json}\n", "keyless.identities: missing"},
		{"identity without subject", policyHead + "imagePolicies:\n  - name: p\n    authorities:\n      - keyless: {trustedRoot: r.json, identities: [{issuer: i}]}\n", "must have exactly one of subject and subjectRegExp"},
		{"bad regexp", policyHead + "imagePolicies:\n  - name: p\n    authorities:\n      - keyless: {trustedRoot: r.json, identities: [{issuer: i, subjectRegExp: \"a(\"}]}\n", "subjectRegExp: invalid regular expression"},
		{"bad predicate", policyHead + "imagePolicies:\n  - name: p\n    authorities: [{key: k.pub}]\n    attestations: [{predicateType: provenance}]\n", "predicateType: \"provenance\" is neither"},
		{"duplicate policy", policyHead + "imagePolicies:\n  - {name: p, authorities: [{key: k.pub}]}\n  - {name: p, authorities: [{key: k.pub}]}\n", "duplicate policy name \"p\""},
		{"policy named none", policyHead + "imagePolicies:\n  - {name: none, authorities: [{key: k.pub}]}\n", "\"none\" is not a valid policy name"},
		{"required not bool", policyHead + "imagePolicies:\n  - {name: p, required: always, authorities: [{key: k.pub}]}\n", "imagePolicies[0].required: must be true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := definition.Parse("ferry.yaml", []byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("not one line: %q", err)
			}
		})
	}
}
