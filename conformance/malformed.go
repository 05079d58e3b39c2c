package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// wantClientError checks a malformed request got a 4xx (never a 5xx, never
// a success) and, with a JSON body, one of codes.
func wantClientError(what string, resp *response, codes ...string) error {
	if resp.Status < 400 || resp.Status > 499 {
		return fmt.Errorf("%s: got %d, want a 4xx client error%s", what, resp.Status, errorSuffix(resp))
	}
	return wantErrorCode(what, resp, codes...)
}

// malformedChecks answer malformed requests: the spec's 4xx, not a server
// error, and nothing stored.
var malformedChecks = []check{
	def(Push, "name-invalid", "Pulling manifests: <name>; Error Codes (NAME_INVALID)", "an upload or manifest PUT to a name with upper-case letters or over 255 characters: 4xx (NAME_INVALID), never 5xx",
		func(ctx context.Context, e *env) error {
			for _, name := range []string{e.repo("UPPER"), e.prefix + "/" + strings.Repeat("a", 256)} {
				short := name
				if len(short) > 60 {
					short = short[:60] + "…"
				}
				resp, err := e.c.do(ctx, request{Method: http.MethodPost, Path: "/v2/" + name + "/blobs/uploads/", Header: http.Header{"Content-Length": {"0"}}})
				if err != nil {
					return err
				}
				if err := wantClientError("POST upload to "+short, resp, "NAME_INVALID", "NAME_UNKNOWN"); err != nil {
					return err
				}
				m := imageManifest(emptyConfig(), nil, "", nil, nil)
				resp, err = e.c.do(ctx, request{Method: http.MethodPut, Path: manifestPath(name, "v1"), Header: http.Header{"Content-Type": {m.desc.MediaType}}, Body: m.data})
				if err != nil {
					return err
				}
				if err := wantClientError("PUT manifest to "+short, resp, "NAME_INVALID", "NAME_UNKNOWN"); err != nil {
					return err
				}
			}
			return nil
		}),
	def(Push, "manifest-invalid", "Pushing Manifests (end-7); Error Codes (MANIFEST_INVALID)", "PUT of manifests that are not valid ({}, schemaVersion 1, a layer digest of an unknown algorithm): 400 MANIFEST_INVALID, never 5xx",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			if err := e.pushBlob(ctx, repo, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			cfg := emptyConfig().desc
			for what, body := range map[string]string{
				"{}":                      `{}`,
				"schemaVersion 1":         `{"schemaVersion":1,"mediaType":"` + ocispec.MediaTypeImageManifest + `","layers":[]}`,
				"unknown digest in layer": `{"schemaVersion":2,"mediaType":"` + ocispec.MediaTypeImageManifest + `","config":{"mediaType":"` + cfg.MediaType + `","digest":"` + cfg.Digest.String() + `","size":2},"layers":[{"mediaType":"` + ocispec.MediaTypeImageLayer + `","digest":"md5:d41d8cd98f00b204e9800998ecf8427e","size":0}]}`,
			} {
				resp, err := e.c.do(ctx, request{Method: http.MethodPut, Path: manifestPath(repo, "invalid"), Header: http.Header{"Content-Type": {ocispec.MediaTypeImageManifest}}, Body: []byte(body)})
				if err != nil {
					return err
				}
				if err := wantStatus("PUT manifest "+what, resp, http.StatusBadRequest); err != nil {
					return err
				}
				if err := wantErrorCode("PUT manifest "+what, resp, "MANIFEST_INVALID", "DIGEST_INVALID"); err != nil {
					return err
				}
			}
			return nil
		}),
}
