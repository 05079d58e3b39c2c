package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// env is the state one Run shares between its checks.
type env struct {
	cfg       Config
	c         *client
	runID     string
	prefix    string // repository prefix of this run
	largeSize int64

	pull      *fixture // seeded content of the pull workflow
	pullErr   error
	pullReady bool

	pushed map[string]ocispec.Descriptor // push workflow results by check name

	disc      *discovery
	discErr   error
	discReady bool
}

func (e *env) repo(name string) string { return e.prefix + "/" + name }

// blob is content with its descriptor.
type blob struct {
	desc ocispec.Descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	return blob{ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}, data}
}

// randomBytes returns n deterministic pseudo-random bytes for seed.
func randomBytes(seed string, n int64) []byte {
	var key [32]byte
	copy(key[:], digest.FromString(seed).Encoded())
	r := rand.NewChaCha8(key)
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own well-typed values are marshalled
	}
	return b
}

func imageManifest(config blob, layers []blob, artifactType string, subject *ocispec.Descriptor, annotations map[string]string) blob {
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: artifactType,
		Config:       config.desc,
		Layers:       []ocispec.Descriptor{},
		Subject:      subject,
		Annotations:  annotations,
	}
	for _, l := range layers {
		m.Layers = append(m.Layers, l.desc)
	}
	b := newBlob(ocispec.MediaTypeImageManifest, marshal(m))
	b.desc.ArtifactType = artifactType
	return b
}

func imageIndex(manifests []ocispec.Descriptor, artifactType string, subject *ocispec.Descriptor, annotations map[string]string) blob {
	idx := ocispec.Index{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageIndex,
		ArtifactType: artifactType,
		Manifests:    manifests,
		Subject:      subject,
		Annotations:  annotations,
	}
	b := newBlob(ocispec.MediaTypeImageIndex, marshal(idx))
	b.desc.ArtifactType = artifactType
	return b
}

func emptyConfig() blob {
	return newBlob(ocispec.MediaTypeEmptyJSON, []byte("{}"))
}

// ---- requests with expectations ----

func (e *env) get(ctx context.Context, method, path string, hdr http.Header) (*response, error) {
	return e.c.do(ctx, request{Method: method, Path: path, Header: hdr})
}

// wantStatus fails unless resp has one of the codes.
func wantStatus(what string, resp *response, codes ...int) error {
	if slices.Contains(codes, resp.Status) {
		return nil
	}
	want := make([]string, len(codes))
	for i, c := range codes {
		want[i] = strconv.Itoa(c)
	}
	return fmt.Errorf("%s: got %d, want %s%s", what, resp.Status, strings.Join(want, " or "), errorSuffix(resp))
}

func errorSuffix(resp *response) string {
	if resp.Status < 400 || len(resp.Body) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.120s)", bytes.TrimSpace(resp.Body))
}

// wantErrorCode checks a 4xx JSON body carries one of codes (spec §Error
// Codes: a JSON error body MUST have the errors format; the code MUST be one
// of the table). A non-JSON body passes: the spec allows any format.
func wantErrorCode(what string, resp *response, codes ...string) error {
	got, err := resp.errorCodes()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if got == nil {
		return nil
	}
	for _, g := range got {
		if slices.Contains(codes, g) {
			return nil
		}
	}
	return fmt.Errorf("%s: error codes %v, want one of %v", what, got, codes)
}

// wantDigestHeader checks Docker-Content-Digest, when present, equals d.
func wantDigestHeader(what string, resp *response, d digest.Digest, required bool) error {
	h := resp.Header.Get("Docker-Content-Digest")
	if h == "" {
		if required {
			return fmt.Errorf("%s: no Docker-Content-Digest header", what)
		}
		return nil
	}
	if h != d.String() {
		return fmt.Errorf("%s: Docker-Content-Digest %s, want %s", what, h, d)
	}
	return nil
}

func wantContentLength(what string, resp *response, size int64) error {
	h := resp.Header.Get("Content-Length")
	if h == "" {
		return fmt.Errorf("%s: no Content-Length header", what)
	}
	if n, err := strconv.ParseInt(h, 10, 64); err != nil || n != size {
		return fmt.Errorf("%s: Content-Length %s, want %d", what, h, size)
	}
	return nil
}

func wantBody(what string, resp *response, b blob) error {
	if !bytes.Equal(resp.Body, b.data) {
		if got := digest.FromBytes(resp.Body); got != b.desc.Digest {
			return fmt.Errorf("%s: body digest %s (%d bytes), want %s (%d bytes)", what, got, len(resp.Body), b.desc.Digest, b.desc.Size)
		}
	}
	return nil
}

// ---- uploads ----

func blobPath(repo string, d digest.Digest) string { return "/v2/" + repo + "/blobs/" + d.String() }
func manifestPath(repo, ref string) string         { return "/v2/" + repo + "/manifests/" + ref }

// withDigest appends digest=<d> to an upload location.
func withDigest(loc string, d digest.Digest) (string, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	return u.String(), nil
}

var octet = http.Header{"Content-Type": {"application/octet-stream"}}

// startUpload opens an upload session (end-4a) and returns its location.
func (e *env) startUpload(ctx context.Context, repo string) (string, error) {
	resp, err := e.c.do(ctx, request{Method: http.MethodPost, Path: "/v2/" + repo + "/blobs/uploads/", Header: http.Header{"Content-Length": {"0"}}})
	if err != nil {
		return "", err
	}
	if err := wantStatus("POST upload", resp, http.StatusAccepted); err != nil {
		return "", err
	}
	return resp.location()
}

// pushBlob uploads b monolithically with POST then PUT (end-4a, end-6),
// the way every client can.
func (e *env) pushBlob(ctx context.Context, repo string, b blob) error {
	_, err := e.uploadBlob(ctx, repo, b)
	return err
}

// uploadBlob is pushBlob returning the closing PUT's response.
func (e *env) uploadBlob(ctx context.Context, repo string, b blob) (*response, error) {
	loc, err := e.startUpload(ctx, repo)
	if err != nil {
		return nil, err
	}
	loc, err = withDigest(loc, b.desc.Digest)
	if err != nil {
		return nil, err
	}
	resp, err := e.c.do(ctx, request{Method: http.MethodPut, Path: loc, Header: octet, Body: b.data})
	if err != nil {
		return nil, err
	}
	if err := wantStatus("PUT blob "+b.desc.Digest.String(), resp, http.StatusCreated); err != nil {
		return resp, err
	}
	_, err = resp.location()
	return resp, err
}

// pushManifest PUTs a manifest under ref (end-7) and returns the response.
func (e *env) pushManifest(ctx context.Context, repo, ref string, m blob) (*response, error) {
	resp, err := e.c.do(ctx, request{Method: http.MethodPut, Path: manifestPath(repo, ref),
		Header: http.Header{"Content-Type": {m.desc.MediaType}}, Body: m.data})
	if err != nil {
		return nil, err
	}
	if err := wantStatus("PUT manifest "+ref, resp, http.StatusCreated); err != nil {
		return resp, err
	}
	return resp, nil
}

// pushImage uploads an image's blobs and its manifest, tagged with tag when
// not empty (by digest otherwise).
func (e *env) pushImage(ctx context.Context, repo, tag string, m blob, blobs ...blob) error {
	for _, b := range blobs {
		if err := e.pushBlob(ctx, repo, b); err != nil {
			return err
		}
	}
	ref := tag
	if ref == "" {
		ref = m.desc.Digest.String()
	}
	_, err := e.pushManifest(ctx, repo, ref, m)
	return err
}

var manifestAccept = http.Header{"Accept": {strings.Join([]string{
	ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}, ", ")}}
