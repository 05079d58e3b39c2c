// Package suite pins the OCI distribution-spec conformance suite of the
// v1.1 release line as the Go module proxy serves it (2023-11-01,
// f2182352d4cc; the proxy serves no pseudo-version of the v1.1.1 tag's
// commit). `go test -c github.com/opencontainers/distribution-spec/conformance`
// in this folder builds it (mk/conformance.mk).
package suite

import _ "github.com/opencontainers/distribution-spec/conformance"
