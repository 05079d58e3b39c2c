package definition

import (
	"fmt"
	"slices"
)

// everyField is a definition that reaches every mapping of the schema, so
// that parsing it walks each mapping's known fields.
const everyField = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: all, version: 1.0.0, description: d}
platforms: [linux/amd64]
sbom: {enabled: true, format: spdx-json}
verify: p
imagePolicies:
  - name: p
    required: true
    authorities:
      - name: k
        key: k.pub
      - name: kl
        keyless:
          trustedRoot: trusted_root.json
          identities: [{issuer: i, subject: s}, {issuerRegExp: i, subjectRegExp: s}]
    attestations: [{name: a, predicateType: spdx}]
components:
  - name: c
    description: d
    required: true
    findImages: true
    verify: p
    images:
      - example.com/a:1
      - {ref: example.com/b:1, layout: l, tag: t, verify: p, platform: linux/amd64}
    charts:
      - {path: chart, namespace: n, releaseName: r}
      - {url: oci://example.com/c, version: 1.0.0}
    manifests: [{name: m, namespace: n, files: [m.yaml]}]
    files: [{source: f, target: /f, mode: 0644}]
    repositories: [{url: https://example.com/r.git, path: r, ref: main, history: true}]
    advisories: [{source: osv}]
`

// Fields lists every field of a definition the parser knows, as
// paths with list indexes written [] ("components[].files[].source"),
// sorted: the schema the register of inputs (internal/inputs) is checked
// against.
func Fields() ([]string, error) {
	p := &defParser{file: "ferry.yaml", fields: map[string]bool{}}
	if _, err := p.definition("ferry.yaml", []byte(everyField)); err != nil {
		return nil, fmt.Errorf("the schema's own definition: %w", err)
	}
	var fields []string
	for f := range p.fields {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	return fields, nil
}
