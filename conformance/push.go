package conformance

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types of the ferry-shaped artifacts the push checks store.
const (
	mediaTypeConfig   = "application/vnd.ferry.conformance.config.v1+json"
	mediaTypeLayer    = "application/vnd.ferry.conformance.file.v1"
	artifactTypeTest  = "application/vnd.ferry.conformance.artifact.v1"
	artifactTypeIndex = "application/vnd.ferry.conformance.package.v1+json"
)

var pushChecks = []check{
	def(Push, "blob-post-put", "Pushing a blob monolithically: POST then PUT (end-4a, end-6)", "POST opens a session, PUT ?digest= with the body answers 201 with Location; the blob is then pullable",
		func(ctx context.Context, e *env) error {
			b := newBlob("application/octet-stream", randomBytes("post-put "+e.runID, 10_000))
			repo := e.repo("push")
			if err := e.pushBlob(ctx, repo, b); err != nil {
				return err
			}
			return headBlob(ctx, e, repo, b)
		}),
	def(Push, "blob-single-post", "Pushing a blob monolithically: single POST (end-4b)", "POST ?digest= with the body answers 201 (or 202 when unsupported, then PUT completes it)",
		func(ctx context.Context, e *env) error {
			b := newBlob("application/octet-stream", randomBytes("single-post "+e.runID, 10_000))
			repo := e.repo("push")
			resp, err := e.c.do(ctx, request{Method: http.MethodPost, Path: "/v2/" + repo + "/blobs/uploads/?digest=" + b.desc.Digest.String(), Header: octet, Body: b.data})
			if err != nil {
				return err
			}
			if err := wantStatus("single POST", resp, http.StatusCreated, http.StatusAccepted); err != nil {
				return err
			}
			loc, err := resp.location()
			if err != nil {
				return fmt.Errorf("single POST: %w", err)
			}
			if resp.Status == http.StatusAccepted {
				loc, err = withDigest(loc, b.desc.Digest)
				if err != nil {
					return err
				}
				put, err := e.c.do(ctx, request{Method: http.MethodPut, Path: loc, Header: octet, Body: b.data})
				if err != nil {
					return err
				}
				if err := wantStatus("PUT after 202", put, http.StatusCreated); err != nil {
					return err
				}
				if err := headBlob(ctx, e, repo, b); err != nil {
					return err
				}
				return passNote("single-request upload not supported: 202, completed with PUT")
			}
			return headBlob(ctx, e, repo, b)
		}),
	def(Push, "blob-chunked", "Pushing a blob in chunks (end-4a, end-5, end-13, end-6)", "PATCH chunks with Content-Range: 202 with Location and Range; GET session: 204; final PUT with the last chunk: 201",
		func(ctx context.Context, e *env) error {
			b := newBlob("application/octet-stream", randomBytes("chunked "+e.runID, 3*(256<<10)+123))
			repo := e.repo("push")
			if err := e.pushChunked(ctx, repo, b, 256<<10, true); err != nil {
				return err
			}
			return getBlob(ctx, e, repo, b)
		}),
	def(Push, "blob-chunk-out-of-order", "Pushing a blob in chunks (end-5: 416)", "a PATCH whose Content-Range does not start at the current offset answers 416",
		func(ctx context.Context, e *env) error {
			data := randomBytes("out-of-order "+e.runID, 2048)
			loc, err := e.startUpload(ctx, e.repo("push"))
			if err != nil {
				return err
			}
			resp, err := patchChunk(ctx, e, loc, data[:1024], 0)
			if err != nil {
				return err
			}
			if err := wantStatus("PATCH first chunk", resp, http.StatusAccepted); err != nil {
				return err
			}
			loc, err = resp.location()
			if err != nil {
				return err
			}
			resp, err = patchChunk(ctx, e, loc, data[1024:], 1500)
			if err != nil {
				return err
			}
			return wantStatus("PATCH chunk at a gap (Content-Range 1500-)", resp, http.StatusRequestedRangeNotSatisfiable)
		}),
	def(Push, "blob-digest-mismatch", "Pushing blobs; Error Codes (end-6, code-4)", "PUT with a digest that does not match the body: 400 with DIGEST_INVALID",
		func(ctx context.Context, e *env) error {
			loc, err := e.startUpload(ctx, e.repo("push"))
			if err != nil {
				return err
			}
			loc, err = withDigest(loc, digest.FromString("something else "+e.runID))
			if err != nil {
				return err
			}
			resp, err := e.c.do(ctx, request{Method: http.MethodPut, Path: loc, Header: octet, Body: []byte("the actual body")})
			if err != nil {
				return err
			}
			if err := wantStatus("PUT with a wrong digest", resp, http.StatusBadRequest); err != nil {
				return err
			}
			return wantErrorCode("PUT with a wrong digest", resp, "DIGEST_INVALID")
		}),
	def(Push, "blob-mount", "Mounting a blob from another repository (end-11)", "POST ?mount=&from= answers 201 with Location and the blob appears in the target repository",
		func(ctx context.Context, e *env) error {
			b := newBlob("application/octet-stream", randomBytes("mount "+e.runID, 4096))
			dst := e.repo("mount-dst")
			if err := mountBlob(ctx, e, b, e.repo("mount-src"), dst); err != nil {
				return err
			}
			return headBlob(ctx, e, dst, b)
		}),
	def(Push, "blob-large", "Pushing a blob in chunks (end-5, end-6); Pulling blobs (end-2)", "a large blob uploaded in 8 MiB chunks is stored and served intact",
		func(ctx context.Context, e *env) error {
			if e.largeSize < 0 {
				return skipf("large blob check disabled")
			}
			b := newBlob("application/octet-stream", randomBytes("large "+e.runID, e.largeSize))
			repo := e.repo("push")
			if err := e.pushChunked(ctx, repo, b, 8<<20, false); err != nil {
				return err
			}
			return getBlob(ctx, e, repo, b)
		}),
	def(Push, "manifest-by-tag", "Pushing Manifests (end-7)", "PUT an image manifest by tag: 201 with Location and the matching digest; GET returns the exact bytes",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			cfg := newBlob(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"arm64","os":"linux"}`))
			layer := newBlob(ocispec.MediaTypeImageLayerGzip, randomBytes("layer "+e.runID, 2000))
			m := imageManifest(cfg, []blob{layer}, "", nil, nil)
			return pushAndVerify(ctx, e, repo, "image", m, cfg, layer)
		}),
	def(Push, "manifest-by-digest", "Pushing Manifests (end-7)", "PUT an image manifest by digest: 201 with Location and the same digest",
		func(ctx context.Context, e *env) error {
			cfg := newBlob(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"amd64","os":"linux","variant":"by-digest"}`))
			m := imageManifest(cfg, nil, "", nil, map[string]string{"run": e.runID})
			return pushAndVerify(ctx, e, e.repo("push"), "", m, cfg)
		}),
	def(Push, "manifest-custom-config", "Pushing Manifests (end-7); image-spec artifacts guidance", "an image manifest whose config and layers have custom media types is stored byte for byte",
		func(ctx context.Context, e *env) error {
			cfg := newBlob(mediaTypeConfig, []byte(`{"name":"conformance","version":"1.0.0"}`))
			layer := newBlob(mediaTypeLayer, randomBytes("custom layer "+e.runID, 1500))
			m := imageManifest(cfg, []blob{layer}, "", nil, map[string]string{"org.opencontainers.image.title": "custom config"})
			if err := pushAndVerify(ctx, e, e.repo("push"), "custom-config", m, cfg, layer); err != nil {
				return err
			}
			e.remember("custom-config", m.desc)
			return nil
		}),
	def(Push, "manifest-artifact-type", "Pushing Manifests (end-7); image-spec artifactType", "an image manifest with an artifactType and the empty config is stored byte for byte",
		func(ctx context.Context, e *env) error {
			layer := newBlob(mediaTypeLayer, randomBytes("artifact layer "+e.runID, 1200))
			m := imageManifest(emptyConfig(), []blob{layer}, artifactTypeTest, nil, map[string]string{"run": e.runID})
			if err := pushAndVerify(ctx, e, e.repo("push"), "artifact", m, emptyConfig(), layer); err != nil {
				return err
			}
			e.remember("artifact", m.desc)
			return nil
		}),
	def(Push, "index-artifact-type", "Pushing Manifests (end-7); image-spec index artifactType", "an image index with an artifactType and annotations, holding artifact manifests, is stored byte for byte",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			var children []ocispec.Descriptor
			for i := range 2 {
				layer := newBlob(mediaTypeLayer, randomBytes(fmt.Sprintf("index child %d %s", i, e.runID), 700))
				m := imageManifest(emptyConfig(), []blob{layer}, artifactTypeTest, nil, map[string]string{"child": strconv.Itoa(i)})
				if err := e.pushImage(ctx, repo, "", m, emptyConfig(), layer); err != nil {
					return fmt.Errorf("setup: %w", err)
				}
				d := m.desc
				d.Annotations = map[string]string{"child": strconv.Itoa(i)}
				children = append(children, d)
			}
			idx := imageIndex(children, artifactTypeIndex, nil, map[string]string{"org.opencontainers.image.ref.name": "1.0.0"})
			return pushAndVerify(ctx, e, repo, "package", idx)
		}),
	def(Push, "manifest-subject", "Pushing Manifests with Subject (end-7)", "PUT a manifest with a subject: 201 with OCI-Subject set to the subject digest",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			subject := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"subject": e.runID})
			if err := e.pushImage(ctx, repo, "", subject, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			sd := subject.desc
			sd.ArtifactType = ""
			ref := imageManifest(emptyConfig(), nil, "application/vnd.ferry.conformance.signature.v1", &sd, nil)
			resp, err := e.pushManifest(ctx, repo, ref.desc.Digest.String(), ref)
			if err != nil {
				return err
			}
			if got := resp.Header.Get("OCI-Subject"); got != sd.Digest.String() {
				return fmt.Errorf("PUT manifest with subject: OCI-Subject %q, want %s (referrers API not supported)", got, sd.Digest)
			}
			return nil
		}),
	def(Push, "blob-sha512", "Pushing blobs; Pulling blobs (end-6, end-2); image-spec sha512 digests", "a blob uploaded and fetched by a sha512 digest, answered with that digest in Docker-Content-Digest and Location",
		func(ctx context.Context, e *env) error {
			data := randomBytes("sha512 "+e.runID, 5000)
			b := newBlob("application/octet-stream", data)
			b.desc.Digest = sha512Digest(data)
			repo := e.repo("push")
			resp, err := e.uploadBlob(ctx, repo, b)
			if err != nil {
				return err
			}
			if err := wantDigestHeader("PUT blob by sha512", resp, b.desc.Digest, false); err != nil {
				return err
			}
			if loc := resp.Header.Get("Location"); !strings.HasSuffix(loc, b.desc.Digest.String()) {
				return fmt.Errorf("PUT blob by sha512: Location %q does not name %s", loc, b.desc.Digest)
			}
			return getBlobByDigest(ctx, e, repo, b)
		}),
	def(Push, "blob-mount-sha512", "Mounting a blob from another repository (end-11); image-spec sha512 digests", "a blob mounted by a sha512 digest: 201 naming that digest, and the target repository serves it by it",
		func(ctx context.Context, e *env) error {
			data := randomBytes("mount sha512 "+e.runID, 3000)
			b := newBlob("application/octet-stream", data)
			b.desc.Digest = sha512Digest(data)
			dst := e.repo("mount-dst-sha512")
			if err := mountBlob(ctx, e, b, e.repo("mount-src"), dst); err != nil {
				return err
			}
			return getBlobByDigest(ctx, e, dst, b)
		}),
	def(Push, "manifest-nondistributable", "Pushing Manifests (end-7); image-spec descriptor urls, non-distributable layers", "a manifest whose layer carries urls and whose blob is never pushed is stored byte for byte",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			layer := newBlob("application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", randomBytes("foreign "+e.runID, 100))
			layer.desc.URLs = []string{"https://example.com/v2/foreign/blobs/" + layer.desc.Digest.String()}
			m := imageManifest(emptyConfig(), []blob{layer}, "", nil, map[string]string{"run": e.runID})
			if err := e.pushBlob(ctx, repo, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			resp, err := e.pushManifest(ctx, repo, m.desc.Digest.String(), m)
			if err != nil {
				return err
			}
			if err := wantDigestHeader("PUT manifest", resp, m.desc.Digest, false); err != nil {
				return err
			}
			return getManifest(ctx, e, repo, m.desc.Digest.String(), m)
		}),
	def(Push, "manifest-sha512", "Pushing Manifests; Pulling manifests (end-7, end-3); image-spec sha512 digests", "a manifest pushed and fetched by a sha512 digest",
		func(ctx context.Context, e *env) error {
			repo := e.repo("push")
			m := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"sha512": e.runID})
			if err := e.pushBlob(ctx, repo, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			m.desc.Digest = sha512Digest(m.data)
			resp, err := e.pushManifest(ctx, repo, m.desc.Digest.String(), m)
			if err != nil {
				return err
			}
			if err := wantDigestHeader("PUT manifest by sha512", resp, m.desc.Digest, true); err != nil {
				return err
			}
			return getManifest(ctx, e, repo, m.desc.Digest.String(), m)
		}),
}

func sha512Digest(b []byte) digest.Digest {
	sum := sha512.Sum512(b)
	return digest.NewDigestFromEncoded(digest.SHA512, hex.EncodeToString(sum[:]))
}

func (e *env) remember(name string, d ocispec.Descriptor) {
	if e.pushed == nil {
		e.pushed = map[string]ocispec.Descriptor{}
	}
	e.pushed[name] = d
}

// pushAndVerify uploads blobs, PUTs m under tag (by digest when empty) and
// checks the response headers and a GET round trip.
func pushAndVerify(ctx context.Context, e *env, repo, tag string, m blob, blobs ...blob) error {
	for _, b := range blobs {
		if err := e.pushBlob(ctx, repo, b); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	ref := tag
	if ref == "" {
		ref = m.desc.Digest.String()
	}
	resp, err := e.pushManifest(ctx, repo, ref, m)
	if err != nil {
		return err
	}
	what := "PUT manifest " + ref
	if _, err := resp.location(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := wantDigestHeader(what, resp, m.desc.Digest, tag == ""); err != nil {
		return err
	}
	if err := getManifest(ctx, e, repo, ref, m); err != nil {
		return err
	}
	if tag != "" {
		return getManifest(ctx, e, repo, m.desc.Digest.String(), m)
	}
	return nil
}

// mountBlob pushes b to src, then mounts it into dst (end-11): 201 with a
// Location and, when sent, b's digest in Docker-Content-Digest.
func mountBlob(ctx context.Context, e *env, b blob, src, dst string) error {
	if err := e.pushBlob(ctx, src, b); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	resp, err := e.c.do(ctx, request{Method: http.MethodPost, Path: "/v2/" + dst + "/blobs/uploads/?mount=" + b.desc.Digest.String() + "&from=" + src, Header: http.Header{"Content-Length": {"0"}}})
	if err != nil {
		return err
	}
	what := "mount " + b.desc.Digest.String()
	if resp.Status == http.StatusAccepted {
		return fmt.Errorf("%s: got 202, the registry opened an upload instead of mounting (spec-permitted, but a cross-mount is what ferry relies on)", what)
	}
	if err := wantStatus(what, resp, http.StatusCreated); err != nil {
		return err
	}
	if _, err := resp.location(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return wantDigestHeader(what, resp, b.desc.Digest, false)
}

// getBlobByDigest GETs and HEADs b by its digest: the body must be b's and
// Docker-Content-Digest, when present, b's digest.
func getBlobByDigest(ctx context.Context, e *env, repo string, b blob) error {
	for _, m := range []string{http.MethodHead, http.MethodGet} {
		resp, err := e.get(ctx, m, blobPath(repo, b.desc.Digest), nil)
		if err != nil {
			return err
		}
		what := m + " blob " + b.desc.Digest.String()
		if err := wantStatus(what, resp, http.StatusOK); err != nil {
			return err
		}
		if err := wantDigestHeader(what, resp, b.desc.Digest, false); err != nil {
			return err
		}
		if m == http.MethodGet {
			return wantBody(what, resp, b)
		}
	}
	return nil
}

func headBlob(ctx context.Context, e *env, repo string, b blob) error {
	resp, err := e.get(ctx, http.MethodHead, blobPath(repo, b.desc.Digest), nil)
	if err != nil {
		return err
	}
	if err := wantStatus("HEAD pushed blob", resp, http.StatusOK); err != nil {
		return err
	}
	return wantContentLength("HEAD pushed blob", resp, b.desc.Size)
}

func getBlob(ctx context.Context, e *env, repo string, b blob) error {
	resp, err := e.get(ctx, http.MethodGet, blobPath(repo, b.desc.Digest), nil)
	if err != nil {
		return err
	}
	if err := wantStatus("GET pushed blob", resp, http.StatusOK); err != nil {
		return err
	}
	if err := wantContentLength("GET pushed blob", resp, b.desc.Size); err != nil {
		return err
	}
	return wantBody("GET pushed blob", resp, b)
}

func patchChunk(ctx context.Context, e *env, loc string, chunk []byte, offset int64) (*response, error) {
	return e.c.do(ctx, request{Method: http.MethodPatch, Path: loc, Body: chunk, Header: http.Header{
		"Content-Type":  {"application/octet-stream"},
		"Content-Range": {fmt.Sprintf("%d-%d", offset, offset+int64(len(chunk))-1)},
	}})
}

// pushChunked uploads b in chunks of size chunk (raised to the registry's
// OCI-Chunk-Min-Length), sending the last chunk with the closing PUT. With
// strict it also checks the session status endpoint after the first chunk.
func (e *env) pushChunked(ctx context.Context, repo string, b blob, chunk int, strict bool) error {
	resp, err := e.c.do(ctx, request{Method: http.MethodPost, Path: "/v2/" + repo + "/blobs/uploads/", Header: http.Header{"Content-Length": {"0"}}})
	if err != nil {
		return err
	}
	if err := wantStatus("POST upload", resp, http.StatusAccepted); err != nil {
		return err
	}
	if min, err := strconv.Atoi(resp.Header.Get("OCI-Chunk-Min-Length")); err == nil && min > chunk {
		chunk = min
	}
	loc, err := resp.location()
	if err != nil {
		return fmt.Errorf("POST upload: %w", err)
	}
	var off int64
	for int64(len(b.data))-off > int64(chunk) {
		part := b.data[off : off+int64(chunk)]
		resp, err := patchChunk(ctx, e, loc, part, off)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("PATCH chunk at %d", off)
		if err := wantStatus(what, resp, http.StatusAccepted); err != nil {
			return err
		}
		off += int64(len(part))
		if want := fmt.Sprintf("0-%d", off-1); resp.Header.Get("Range") != want {
			return fmt.Errorf("%s: Range %q, want %q", what, resp.Header.Get("Range"), want)
		}
		if loc, err = resp.location(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if strict && off == int64(len(part)) {
			st, err := e.get(ctx, http.MethodGet, loc, nil)
			if err != nil {
				return err
			}
			if err := wantStatus("GET upload status", st, http.StatusNoContent); err != nil {
				return err
			}
			if want := fmt.Sprintf("0-%d", off-1); st.Header.Get("Range") != want {
				return fmt.Errorf("GET upload status: Range %q, want %q", st.Header.Get("Range"), want)
			}
			if loc, err = st.location(); err != nil {
				return fmt.Errorf("GET upload status: %w", err)
			}
		}
	}
	loc, err = withDigest(loc, b.desc.Digest)
	if err != nil {
		return err
	}
	last := b.data[off:]
	resp, err = e.c.do(ctx, request{Method: http.MethodPut, Path: loc, Body: last, Header: http.Header{
		"Content-Type":  {"application/octet-stream"},
		"Content-Range": {fmt.Sprintf("%d-%d", off, int64(len(b.data))-1)},
	}})
	if err != nil {
		return err
	}
	if err := wantStatus("closing PUT", resp, http.StatusCreated); err != nil {
		return err
	}
	if _, err := resp.location(); err != nil {
		return fmt.Errorf("closing PUT: %w", err)
	}
	return nil
}
