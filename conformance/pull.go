package conformance

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
)

// Tags under which WritePullFixture stores the pull workflow's content.
const (
	FixtureTag      = "v1"    // an image manifest
	FixtureIndexTag = "index" // an image index with an artifactType, holding the manifest
)

// fixture is the pull workflow's content: a config and a layer blob, an image
// manifest tagged FixtureTag and an index tagged FixtureIndexTag.
type fixture struct {
	repo            string
	config, layer   blob
	manifest, index blob
}

func newFixture(repo string) *fixture {
	f := &fixture{repo: repo}
	f.config = newBlob(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["`+digest.FromString("ferry conformance layer").String()+`"]}}`))
	f.layer = newBlob(ocispec.MediaTypeImageLayer, randomBytes("ferry conformance layer", 64<<10))
	f.manifest = imageManifest(f.config, []blob{f.layer}, "", nil, map[string]string{"org.opencontainers.image.title": "ferry conformance"})
	f.index = imageIndex([]ocispec.Descriptor{f.manifest.desc}, "application/vnd.ferry.conformance.v1", nil, nil)
	return f
}

// PusherTagger is where WritePullFixture stores content: an oras-go
// content store such as an OCI layout (content/oci) or a registry repository.
type PusherTagger interface {
	content.Pusher
	content.Tagger
}

// WritePullFixture stores the pull workflow's content in target and tags it,
// so that a read-only registry serving target can be checked with
// Config{ReadOnly: true, Repo: <repository serving target>}.
func WritePullFixture(ctx context.Context, target PusherTagger) error {
	f := newFixture("")
	for _, b := range []blob{f.config, f.layer, f.manifest, f.index} {
		if err := target.Push(ctx, b.desc, bytes.NewReader(b.data)); err != nil {
			return fmt.Errorf("conformance fixture %s: %w", b.desc.Digest, err)
		}
	}
	if err := target.Tag(ctx, f.manifest.desc, FixtureTag); err != nil {
		return fmt.Errorf("conformance fixture tag %s: %w", FixtureTag, err)
	}
	if err := target.Tag(ctx, f.index.desc, FixtureIndexTag); err != nil {
		return fmt.Errorf("conformance fixture tag %s: %w", FixtureIndexTag, err)
	}
	return nil
}

// pullFixture returns the pull content, pushing it on first use unless the
// registry is read-only.
func (e *env) pullFixture(ctx context.Context) (*fixture, error) {
	if e.pullReady {
		return e.pull, e.pullErr
	}
	e.pullReady = true
	if e.cfg.ReadOnly {
		e.pull = newFixture(e.prefix)
		return e.pull, nil
	}
	f := newFixture(e.repo("pull"))
	err := e.pushImage(ctx, f.repo, FixtureTag, f.manifest, f.config, f.layer)
	if err == nil {
		_, err = e.pushManifest(ctx, f.repo, FixtureIndexTag, f.index)
	}
	if err != nil {
		e.pullErr = fmt.Errorf("setup: pushing pull content: %w", err)
		return nil, e.pullErr
	}
	e.pull = f
	return f, nil
}

// withFixture adapts a check that needs the pull content.
func withFixture(run func(context.Context, *env, *fixture) error) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		f, err := e.pullFixture(ctx)
		if err != nil {
			return err
		}
		return run(ctx, e, f)
	}
}

var pullChecks = []check{
	def(Pull, "api-version", "Determining Support (end-1)", "GET /v2/ answers 200",
		func(ctx context.Context, e *env) error {
			resp, err := e.get(ctx, http.MethodGet, "/v2/", nil)
			if err != nil {
				return err
			}
			return wantStatus("GET /v2/", resp, http.StatusOK)
		}),
	def(Pull, "manifest-by-tag", "Pulling manifests (end-3)", "GET a manifest by tag returns its exact bytes, media type and digest",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			return getManifest(ctx, e, f.repo, FixtureTag, f.manifest)
		})),
	def(Pull, "manifest-by-digest", "Pulling manifests (end-3)", "GET a manifest by digest returns its exact bytes, media type and digest",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			return getManifest(ctx, e, f.repo, f.manifest.desc.Digest.String(), f.manifest)
		})),
	def(Pull, "index-by-tag", "Pulling manifests (end-3)", "GET an image index with an artifactType by tag returns its exact bytes",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			return getManifest(ctx, e, f.repo, FixtureIndexTag, f.index)
		})),
	def(Pull, "manifest-head", "Checking if content exists in the registry (end-3)", "HEAD a manifest by tag and digest: 200, Content-Length, digest header, no body",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			for _, ref := range []string{FixtureTag, f.manifest.desc.Digest.String()} {
				resp, err := e.get(ctx, http.MethodHead, manifestPath(f.repo, ref), manifestAccept)
				if err != nil {
					return err
				}
				what := "HEAD manifest " + ref
				if err := wantStatus(what, resp, http.StatusOK); err != nil {
					return err
				}
				if err := wantContentLength(what, resp, f.manifest.desc.Size); err != nil {
					return err
				}
				if err := wantDigestHeader(what, resp, f.manifest.desc.Digest, false); err != nil {
					return err
				}
				if len(resp.Body) != 0 {
					return fmt.Errorf("%s: %d body bytes, want none", what, len(resp.Body))
				}
			}
			return nil
		})),
	def(Pull, "blob-get", "Pulling blobs (end-2)", "GET a blob returns its exact bytes and Content-Length",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			resp, err := e.get(ctx, http.MethodGet, blobPath(f.repo, f.layer.desc.Digest), nil)
			if err != nil {
				return err
			}
			what := "GET blob"
			if err := wantStatus(what, resp, http.StatusOK); err != nil {
				return err
			}
			if err := wantContentLength(what, resp, f.layer.desc.Size); err != nil {
				return err
			}
			if err := wantDigestHeader(what, resp, f.layer.desc.Digest, false); err != nil {
				return err
			}
			return wantBody(what, resp, f.layer)
		})),
	def(Pull, "blob-head", "Checking if content exists in the registry (end-2)", "HEAD a blob: 200, Content-Length, no body",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			resp, err := e.get(ctx, http.MethodHead, blobPath(f.repo, f.config.desc.Digest), nil)
			if err != nil {
				return err
			}
			what := "HEAD blob"
			if err := wantStatus(what, resp, http.StatusOK); err != nil {
				return err
			}
			if err := wantDigestHeader(what, resp, f.config.desc.Digest, false); err != nil {
				return err
			}
			return wantContentLength(what, resp, f.config.desc.Size)
		})),
	def(Pull, "blob-range", "Pulling blobs (end-2; RFC 9110 Range)", "GET a blob with Range returns 206 and exactly the requested bytes",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			const from, to = 1000, 5095
			resp, err := e.get(ctx, http.MethodGet, blobPath(f.repo, f.layer.desc.Digest), http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", from, to)}})
			if err != nil {
				return err
			}
			what := "GET blob with Range"
			if err := wantStatus(what, resp, http.StatusPartialContent); err != nil {
				return err
			}
			if want := fmt.Sprintf("bytes %d-%d/%d", from, to, f.layer.desc.Size); resp.Header.Get("Content-Range") != want {
				return fmt.Errorf("%s: Content-Range %q, want %q", what, resp.Header.Get("Content-Range"), want)
			}
			if !bytes.Equal(resp.Body, f.layer.data[from:to+1]) {
				return fmt.Errorf("%s: %d bytes that differ from the requested range", what, len(resp.Body))
			}
			return nil
		})),
	def(Pull, "manifest-unknown", "Pulling manifests; Error Codes (end-3, code-7)", "GET/HEAD an absent manifest: 404 with MANIFEST_UNKNOWN",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			for _, ref := range []string{"no-such-tag", digest.FromString("no such manifest").String()} {
				for _, m := range []string{http.MethodGet, http.MethodHead} {
					resp, err := e.get(ctx, m, manifestPath(f.repo, ref), manifestAccept)
					if err != nil {
						return err
					}
					what := m + " absent manifest " + ref
					if err := wantStatus(what, resp, http.StatusNotFound); err != nil {
						return err
					}
					if err := wantErrorCode(what, resp, "MANIFEST_UNKNOWN"); err != nil {
						return err
					}
				}
			}
			return nil
		})),
	def(Pull, "blob-unknown", "Pulling blobs; Error Codes (end-2, code-1)", "GET/HEAD an absent blob: 404 with BLOB_UNKNOWN",
		withFixture(func(ctx context.Context, e *env, f *fixture) error {
			d := digest.FromString("no such blob " + e.runID)
			for _, m := range []string{http.MethodGet, http.MethodHead} {
				resp, err := e.get(ctx, m, blobPath(f.repo, d), nil)
				if err != nil {
					return err
				}
				what := m + " absent blob"
				if err := wantStatus(what, resp, http.StatusNotFound); err != nil {
					return err
				}
				if err := wantErrorCode(what, resp, "BLOB_UNKNOWN"); err != nil {
					return err
				}
			}
			return nil
		})),
	def(Pull, "repo-unknown", "Pulling manifests; Error Codes (end-3, code-9)", "GET a manifest of an absent repository: 404 with NAME_UNKNOWN or MANIFEST_UNKNOWN",
		func(ctx context.Context, e *env) error {
			resp, err := e.get(ctx, http.MethodGet, manifestPath(e.repo("absent-"+e.runID), "latest"), manifestAccept)
			if err != nil {
				return err
			}
			what := "GET manifest in an absent repository"
			if err := wantStatus(what, resp, http.StatusNotFound); err != nil {
				return err
			}
			return wantErrorCode(what, resp, "NAME_UNKNOWN", "MANIFEST_UNKNOWN")
		}),
}

// getManifest GETs repo:ref and compares it with m.
func getManifest(ctx context.Context, e *env, repo, ref string, m blob) error {
	resp, err := e.get(ctx, http.MethodGet, manifestPath(repo, ref), manifestAccept)
	if err != nil {
		return err
	}
	what := "GET manifest " + ref
	if err := wantStatus(what, resp, http.StatusOK); err != nil {
		return err
	}
	if ct := resp.Header.Get("Content-Type"); ct != m.desc.MediaType {
		return fmt.Errorf("%s: Content-Type %q, want %q", what, ct, m.desc.MediaType)
	}
	if err := wantDigestHeader(what, resp, m.desc.Digest, false); err != nil {
		return err
	}
	if err := wantContentLength(what, resp, m.desc.Size); err != nil {
		return err
	}
	return wantBody(what, resp, m)
}
