// Package sigstore is the engine of imagesig.Policy.Verify: it reads
// cosign signature and attestation manifests and Sigstore bundles from a
// content.Fetcher, bounded, and verifies them offline with sigstore-go
// (signatures, DSSE envelopes, certificate chains to a trusted root's
// certificate authorities, certificate identities, Rekor signed entry
// timestamps and RFC 3161 timestamps).
//
// Import it for its side effect in each program that verifies image
// signatures (and in their tests):
//
//	import _ "github.com/ferrypkg/ferry/artifact/imagesig/sigstore"
//
// It is a separate package because sigstore-go links Rekor's generated
// client and types, which programs that only read a package's
// configuration (the front binary) must not pay for at start.
package sigstore
