// Package injector is stage 1 of ferry's cluster bootstrap: the binary that
// runs inside the injector Pod, joins the payload chunks mounted from
// ConfigMaps, verifies them against the expected sha256, extracts the OCI
// image layout they carry and serves it read-only over the OCI distribution
// API until the real registry takes over (docs/design/injector.md).
//
// The package imports the standard library only (a test enforces it) and
// avoids net/http, which alone would push the binary past its 3 MiB budget:
// Server is a small HTTP/1.1 handler written on package net.
//
// The flow is Reassemble (chunks → verified, extracted layout), then
// NewServer on the layout directory and Server.Serve on a listener.
package injector
