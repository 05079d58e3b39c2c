package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// distribution v3.1.2 has no referrers API (OCI distribution spec v1.1,
// "Listing Referrers"). referrersHandler adds it in front of distribution: it
// answers GET /v2/<name>/referrers/<digest> from a referrerIndex, and keeps
// that index in step with manifest PUTs that carry a subject (answering them
// with the OCI-Subject header) and with manifest DELETEs.

// maxManifestSize is the largest manifest body we inspect for a subject;
// distribution refuses bigger ones itself (4 MiB).
const maxManifestSize = 4 << 20

// referrerIndex records, per repository and subject, the descriptors of
// the manifests that refer to it: one small object per referrer on the
// registry's storage driver,
// <sideDir>/<repository>/_referrers/<subject alg>/<subject hex>/<alg>-<hex>.json,
// so every registry on the same storage answers the same list.
type referrerIndex struct {
	d storagedriver.StorageDriver
}

func (x *referrerIndex) subjectDir(repo string, subject digest.Digest) string {
	return repoSideDir(repo, "_referrers") + "/" + string(subject.Algorithm()) + "/" + subject.Encoded()
}

func referrerFile(referrer digest.Digest) string {
	return string(referrer.Algorithm()) + "-" + referrer.Encoded() + ".json"
}

// add records desc as a referrer of subject in repo.
func (x *referrerIndex) add(ctx context.Context, repo string, subject digest.Digest, desc ocispec.Descriptor) error {
	b, err := json.Marshal(desc)
	if err != nil {
		return err
	}
	if err := x.d.PutContent(ctx, x.subjectDir(repo, subject)+"/"+referrerFile(desc.Digest), b); err != nil {
		return fmt.Errorf("referrers index: %w", err)
	}
	return nil
}

// remove forgets referrer in repo, whatever subject it referred to.
func (x *referrerIndex) remove(ctx context.Context, repo string, referrer digest.Digest) error {
	name := referrerFile(referrer)
	var found []string
	err := x.d.Walk(ctx, repoSideDir(repo, "_referrers"), func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() && path.Base(fi.Path()) == name {
			found = append(found, fi.Path())
		}
		return nil
	})
	if err != nil && !notFound(err) {
		return fmt.Errorf("referrers index: %w", err)
	}
	for _, p := range found {
		if err := x.d.Delete(ctx, p); err != nil && !notFound(err) {
			return fmt.Errorf("referrers index: %w", err)
		}
	}
	return nil
}

// list returns the referrers of subject in repo, sorted by digest, keeping
// only the given artifact types when any are given.
func (x *referrerIndex) list(ctx context.Context, repo string, subject digest.Digest, artifactTypes []string) ([]ocispec.Descriptor, error) {
	out := []ocispec.Descriptor{}
	dir := x.subjectDir(repo, subject)
	names, err := x.d.List(ctx, dir)
	if notFound(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("referrers index: %w", err)
	}
	for _, p := range names {
		if !strings.HasSuffix(p, ".json") {
			continue
		}
		b, err := x.d.GetContent(ctx, p)
		if notFound(err) { // removed since the listing
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("referrers index: %w", err)
		}
		var d ocispec.Descriptor
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("referrers index %s: %w", p, err)
		}
		if len(artifactTypes) > 0 && !slices.Contains(artifactTypes, d.ArtifactType) {
			continue
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b ocispec.Descriptor) int { return strings.Compare(string(a.Digest), string(b.Digest)) })
	return out, nil
}

// referrersHandler is what stands in front of distribution: it answers
// malformed requests (check.go), bounds catalog pages (catalog.go), serves
// blobs named by non-sha256 digests (blobdigest.go) and manifests by their
// aliases (alias.go), and the referrers API; everything else goes to next.
type referrersHandler struct {
	next    http.Handler
	index   *referrerIndex
	aliases *aliasIndex
	catalog *catalogIndex
	access  auth.AccessController // nil: anonymous access
}

// splitPath splits /v2/<name>/<kind>/<ref> for kind manifests or referrers.
func splitPath(p string) (name, kind, ref string, ok bool) {
	rest, found := strings.CutPrefix(p, "/v2/")
	if !found {
		return "", "", "", false
	}
	for _, k := range []string{"referrers", "manifests"} {
		i := strings.LastIndex(rest, "/"+k+"/")
		if i <= 0 {
			continue
		}
		ref = rest[i+len(k)+2:]
		if ref == "" || strings.Contains(ref, "/") {
			continue
		}
		return rest[:i], k, ref, true
	}
	return "", "", "", false
}

func (h *referrersHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !checkRequest(w, r) {
		return
	}
	if r.URL.Path == "/v2/_catalog" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.serveCatalog(w, r)
		return
	}
	if h.serveBlob(w, r) {
		return
	}
	name, kind, ref, ok := splitPath(r.URL.Path)
	switch {
	case ok && kind == "referrers" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		h.serveReferrers(w, r, name, ref)
	case ok && kind == "manifests" && r.Method == http.MethodPut:
		h.putManifest(w, r, name, ref)
	case ok && kind == "manifests" && r.Method == http.MethodDelete:
		h.deleteManifest(w, r, name, ref)
	case ok && kind == "manifests" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		h.getManifest(w, r, name, ref)
	default:
		h.next.ServeHTTP(w, r)
	}
}

// authorized checks r's credentials for access, as distribution does, and
// answers a request without them (401 with the challenge); it reports
// whether the request may go on.
func (h *referrersHandler) authorized(w http.ResponseWriter, r *http.Request, access auth.Access) bool {
	if h.access == nil {
		return true
	}
	_, err := h.access.Authorized(r, access)
	if err == nil {
		return true
	}
	var ch auth.Challenge
	if errors.As(err, &ch) {
		ch.SetHeaders(r, w)
		writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
		return false
	}
	writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
	return false
}

func (h *referrersHandler) serveReferrers(w http.ResponseWriter, r *http.Request, name, ref string) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if !h.authorized(w, r, auth.Access{Resource: auth.Resource{Type: "repository", Name: name}, Action: "pull"}) {
		return
	}
	if _, err := reference.WithName(name); err != nil {
		writeError(w, http.StatusBadRequest, "NAME_INVALID", "invalid repository name "+name)
		return
	}
	subject, err := digest.Parse(ref)
	if err != nil {
		writeError(w, http.StatusBadRequest, "DIGEST_INVALID", "invalid digest "+ref)
		return
	}
	types := r.URL.Query()["artifactType"]
	refs, err := h.index.list(r.Context(), name, subject, types)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	body, err := json.Marshal(ocispec.Index{
		Versioned: specsVersioned,
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: refs,
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	if len(types) > 0 {
		w.Header().Set("OCI-Filters-Applied", "artifactType")
	}
	w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// manifestFields are the parts of an image manifest or index that a
// referrers descriptor is built from.
type manifestFields struct {
	MediaType    string               `json:"mediaType"`
	ArtifactType string               `json:"artifactType"`
	Config       *ocispec.Descriptor  `json:"config"`
	Subject      *ocispec.Descriptor  `json:"subject"`
	Annotations  map[string]string    `json:"annotations"`
	Manifests    []ocispec.Descriptor `json:"manifests"`
}

func (h *referrersHandler) putManifest(w http.ResponseWriter, r *http.Request, name, ref string) {
	// Credentials first: a stranger's manifest is not read into memory.
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if !h.authorized(w, r, auth.Access{Resource: auth.Resource{Type: "repository", Name: name}, Action: "push"}) {
		return
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxManifestSize+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", "reading manifest: "+err.Error())
		return
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	var mf manifestFields
	if len(buf) > maxManifestSize || json.Unmarshal(buf, &mf) != nil || mf.Subject == nil || mf.Subject.Digest.Validate() != nil {
		mf.Subject = nil
	}
	mediaType := r.Header.Get("Content-Type")
	if mediaType == "" {
		mediaType = mf.MediaType
	}
	if len(buf) <= maxManifestSize {
		if err := checkManifest(mediaType, buf); err != nil {
			writeError(w, http.StatusBadRequest, "MANIFEST_INVALID", err.Error())
			return
		}
	}

	// A PUT by a non-sha256 digest, or by a tag with ?digest= naming one
	// (the client's way to say which digest it refers to the manifest by):
	// verify it here, let distribution store the manifest under its sha256
	// digest, and record the alias.
	var alias digest.Digest
	byDigest := true
	named := ref
	if _, err := digest.Parse(ref); err != nil {
		byDigest, named = false, r.URL.Query().Get("digest")
	}
	if d, err := digest.Parse(named); err == nil && len(buf) <= maxManifestSize {
		if d.Algorithm().FromBytes(buf) != d {
			writeError(w, http.StatusBadRequest, "DIGEST_INVALID", "provided digest did not match uploaded content")
			return
		}
		if d.Algorithm() != digest.Canonical {
			alias = d
			if byDigest {
				r.URL.Path = strings.TrimSuffix(r.URL.Path, ref) + digest.Canonical.FromBytes(buf).String()
				r.URL.RawPath = ""
			}
		}
	}
	// An index's children named by sha512 digests that were stored before
	// ferry wrote revision links for its aliases (alias.go).
	var children []digest.Digest
	for _, c := range mf.Manifests {
		if c.Digest.Validate() == nil && c.Digest.Algorithm() != digest.Canonical {
			children = append(children, c.Digest)
		}
	}
	if err := h.aliases.ensureLinks(r.Context(), name, children); err != nil {
		writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
		return
	}
	if mf.MediaType != "" {
		mediaType = mf.MediaType
	}
	artifactType := mf.ArtifactType
	if artifactType == "" && mf.Config != nil {
		artifactType = mf.Config.MediaType
	}
	hw := &hookWriter{ResponseWriter: w, hook: func(code int) int {
		if code != http.StatusCreated {
			return code
		}
		// The repository is in the catalog before the client hears of it.
		if err := h.catalog.add(r.Context(), name); err != nil {
			w.Header().Del("Location")
			w.Header().Del("Docker-Content-Digest")
			writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return 0
		}
		dgst, err := digest.Parse(w.Header().Get("Docker-Content-Digest"))
		if err != nil {
			return code
		}
		if alias != "" {
			if err := h.aliases.add(r.Context(), name, alias, dgst); err != nil {
				w.Header().Del("Location")
				w.Header().Del("Docker-Content-Digest")
				writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
				return 0
			}
			if loc := w.Header().Get("Location"); loc != "" {
				w.Header().Set("Location", strings.Replace(loc, dgst.String(), alias.String(), 1))
			}
			w.Header().Set("Docker-Content-Digest", alias.String())
			dgst = alias
		}
		if mf.Subject == nil {
			return code
		}
		subject := mf.Subject.Digest
		desc := ocispec.Descriptor{
			MediaType:    mediaType,
			ArtifactType: artifactType,
			Digest:       dgst,
			Size:         int64(len(buf)),
			Annotations:  mf.Annotations,
		}
		if err := h.index.add(r.Context(), name, subject, desc); err != nil {
			w.Header().Del("Location")
			w.Header().Del("Docker-Content-Digest")
			writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return 0
		}
		w.Header().Set("OCI-Subject", subject.String())
		return code
	}}
	h.next.ServeHTTP(hw, r)
}

func (h *referrersHandler) deleteManifest(w http.ResponseWriter, r *http.Request, name, ref string) {
	dgst, err := digest.Parse(ref)
	if err != nil { // a tag: deleting it leaves the manifest and its referrers
		h.next.ServeHTTP(w, r)
		return
	}
	canonical, aliased := h.rewriteAlias(r, name, dgst)
	hw := &hookWriter{ResponseWriter: w, hook: func(code int) int {
		if code != http.StatusAccepted {
			return code
		}
		// The manifest is gone under its sha256 digest: so are its
		// aliases (the one it was deleted by, or any it had when it was
		// deleted by its sha256 digest) and the referrers recorded under
		// them.
		var aliases []digest.Digest
		err := h.index.remove(r.Context(), name, dgst)
		if err == nil {
			if aliased {
				aliases = []digest.Digest{dgst}
				err = h.index.remove(r.Context(), name, canonical)
			} else {
				aliases, err = h.aliases.pointingAt(r.Context(), name, canonical)
			}
		}
		for _, a := range aliases {
			if err != nil {
				break
			}
			if err = h.index.remove(r.Context(), name, a); err == nil {
				err = h.dropAlias(r, name, a)
			}
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
			return 0
		}
		return code
	}}
	h.next.ServeHTTP(hw, r)
}

// dropAlias deletes alias's revision link through distribution, which
// forgets what it cached of it (a HEAD by the alias would otherwise still
// find the deleted manifest), then the alias record.
func (h *referrersHandler) dropAlias(r *http.Request, name string, alias digest.Digest) error {
	rec := &recorder{header: http.Header{}}
	h.next.ServeHTTP(rec, internalRequest(r, http.MethodDelete, "/v2/"+name+"/manifests/"+alias.String(), "", nil))
	if rec.code != http.StatusAccepted && rec.code != http.StatusNotFound {
		return fmt.Errorf("digest alias %s: delete answered %d: %s", alias, rec.code, strings.TrimSpace(rec.body.String()))
	}
	return h.aliases.remove(r.Context(), name, alias)
}

// rewriteAlias points a request for a sha512-addressed manifest at the
// sha256 digest distribution stored it under.
func (h *referrersHandler) rewriteAlias(r *http.Request, name string, d digest.Digest) (digest.Digest, bool) {
	if d.Algorithm() == digest.Canonical {
		return d, false
	}
	canonical, ok := h.aliases.lookup(r.Context(), name, d)
	if !ok {
		return d, false
	}
	r.URL.Path = strings.TrimSuffix(r.URL.Path, d.String()) + canonical.String()
	r.URL.RawPath = ""
	return canonical, true
}

// getManifest serves GET and HEAD, resolving sha512 aliases.
func (h *referrersHandler) getManifest(w http.ResponseWriter, r *http.Request, name, ref string) {
	d, err := digest.Parse(ref)
	if err != nil {
		h.next.ServeHTTP(w, r)
		return
	}
	if _, aliased := h.rewriteAlias(r, name, d); !aliased {
		h.next.ServeHTTP(w, r)
		return
	}
	h.next.ServeHTTP(&hookWriter{ResponseWriter: w, hook: func(code int) int {
		if code == http.StatusOK {
			w.Header().Set("Docker-Content-Digest", d.String())
		}
		return code
	}}, r)
}

// hookWriter calls hook with the status code before it is written. The hook
// returns the code to write, or 0 when it has written the response itself;
// then the wrapped handler's output is dropped.
type hookWriter struct {
	http.ResponseWriter
	hook    func(code int) int
	written bool
	dropped bool
}

func (w *hookWriter) WriteHeader(code int) {
	if w.written {
		return
	}
	w.written = true
	if code = w.hook(code); code == 0 {
		w.dropped = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *hookWriter) Write(b []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	if w.dropped {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *hookWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeError writes an OCI error response with one error.
func writeError(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

var specsVersioned = specs.Versioned{SchemaVersion: 2}
