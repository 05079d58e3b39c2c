package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/internal/redact"
)

// distribution v3.1.2 answers some malformed requests with a 500 or takes
// them as valid, so ferry checks the request's names, references and digests
// before distribution sees it, and answers with the spec's 4xx code:
//
//   - its routes match <name> with reference.NameRegexp, which admits a
//     registry host before the path ("UPPER/app", "localhost:5000/app"): such
//     names got an upload session, a folder in storage and a 500 on manifest
//     PUT; the spec's <name> is lower-case path components only;
//   - a name over 255 characters passed the route and failed later, as 500;
//   - a reference or digest the routes do not match got a plain-text 404.

// maxNameLength is the longest repository name accepted (distribution's
// reference.NameTotalLengthMax; the spec notes clients' limit of 255 for
// host, "/" and name together).
const maxNameLength = 255

// nameRE is the spec's <name> ("Pulling manifests"), anchored.
var nameRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)

// tagRE is the spec's <reference> when it is a tag.
var tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// apiPathRE splits /v2/<name>/<endpoint>; the greedy name takes the longest
// prefix, so a repository may have a component named "blobs" or "manifests".
var apiPathRE = regexp.MustCompile(`^/v2/(.+)/(manifests/[^/]*|blobs/uploads/[^/]*|blobs/[^/]*|tags/list|referrers/[^/]*)$`)

// validName reports whether name is a repository name the spec allows.
func validName(name string) bool {
	return len(name) <= maxNameLength && nameRE.MatchString(name)
}

// checkRequest answers a malformed request with the spec's 4xx error and
// returns false; it returns true when distribution may serve the request.
func checkRequest(w http.ResponseWriter, r *http.Request) bool {
	m := apiPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return true
	}
	name, endpoint := m[1], m[2]
	if !validName(name) {
		writeError(w, http.StatusBadRequest, "NAME_INVALID", fmt.Sprintf("invalid repository name %.300q", name))
		return false
	}
	q := r.URL.Query()
	kind, ref, _ := strings.Cut(endpoint, "/")
	switch {
	case kind == "manifests":
		if strings.Contains(ref, ":") {
			if _, err := digest.Parse(ref); err != nil {
				writeError(w, http.StatusBadRequest, "DIGEST_INVALID", fmt.Sprintf("invalid digest %.300q: %v", ref, err))
				return false
			}
			return true
		}
		if tagRE.MatchString(ref) {
			return true
		}
		if r.Method == http.MethodPut {
			writeError(w, http.StatusBadRequest, "TAG_INVALID", fmt.Sprintf("invalid tag %.300q", ref))
		} else { // no such tag can exist
			writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("manifest unknown: invalid tag %.300q", ref))
		}
		return false
	case kind == "blobs" && !strings.HasPrefix(ref, "uploads/"):
		return checkDigest(w, ref)
	case kind == "blobs": // uploads: the digest of a closing PUT or a single POST, a mount
		for _, p := range []string{"digest", "mount"} {
			if v := q.Get(p); v != "" && !checkDigest(w, v) {
				return false
			}
		}
		// A mount without from is no mount: distribution opens an upload
		// session (202), as the spec asks of a registry that does not
		// mount (OCI distribution-spec v1.1, "Mounting a blob from another
		// repository": "If the registry does not support cross-repository
		// mounting or is unable to mount the requested blob, it SHOULD
		// return a 202", and from MAY be omitted). A from that is present
		// and malformed is a client error.
		if from := q.Get("from"); q.Get("mount") != "" && from != "" && !validName(from) {
			writeError(w, http.StatusBadRequest, "NAME_INVALID", fmt.Sprintf("invalid repository name %.300q in from", from))
			return false
		}
		// A chunk's Content-Range and Content-Type: distribution answers a
		// malformed one with a 500.
		if cr := r.Header.Get("Content-Range"); cr != "" && (r.Method == http.MethodPatch || r.Method == http.MethodPut) && !validContentRange(cr) {
			writeError(w, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID", fmt.Sprintf("invalid Content-Range %.100q, want <start>-<end>", cr))
			return false
		}
		if ct := r.Header.Get("Content-Type"); r.Method == http.MethodPatch && ct != "" && ct != "application/octet-stream" {
			writeError(w, http.StatusBadRequest, "BLOB_UPLOAD_INVALID", fmt.Sprintf("chunk Content-Type %.100q, want application/octet-stream", ct))
			return false
		}
	}
	return true
}

// validContentRange reports whether cr is <start>-<end>, as distribution
// parses it.
func validContentRange(cr string) bool {
	start, end, ok := strings.Cut(cr, "-")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseInt(start, 10, 64)
	_, err2 := strconv.ParseInt(end, 10, 64)
	return err1 == nil && err2 == nil
}

func checkDigest(w http.ResponseWriter, s string) bool {
	if _, err := digest.Parse(s); err != nil {
		writeError(w, http.StatusBadRequest, "DIGEST_INVALID", fmt.Sprintf("invalid digest %.300q: %v", s, err))
		return false
	}
	return true
}

// manifestMediaTypes are the manifest types distribution verifies in
// storage, where a malformed one failed as a 500 ("unrecognized manifest
// schema version 0" for {}, an unsupported digest algorithm or a URL
// distribution refuses in a descriptor).
var manifestMediaTypes = map[string]bool{
	ocispec.MediaTypeImageManifest:                              true,
	ocispec.MediaTypeImageIndex:                                 true,
	"application/vnd.docker.distribution.manifest.v2+json":      true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
}

// manifestBody is what checkManifest reads of an image manifest or index.
type manifestBody struct {
	SchemaVersion *int                 `json:"schemaVersion"`
	Config        *ocispec.Descriptor  `json:"config"`
	Layers        []ocispec.Descriptor `json:"layers"`
	Manifests     []ocispec.Descriptor `json:"manifests"`
	Subject       *ocispec.Descriptor  `json:"subject"`
}

// checkManifest returns why the manifest in buf, of the given media type,
// is invalid, or nil. It checks what distribution would otherwise fail on
// with a server error; everything else is left to distribution.
func checkManifest(mediaType string, buf []byte) error {
	if !manifestMediaTypes[mediaType] {
		return nil
	}
	var m manifestBody
	if err := json.Unmarshal(buf, &m); err != nil {
		return fmt.Errorf("manifest is not a JSON object: %w", err)
	}
	if m.SchemaVersion == nil || *m.SchemaVersion != 2 {
		return fmt.Errorf("schemaVersion must be 2")
	}
	var descs []ocispec.Descriptor
	if m.Config != nil {
		descs = append(descs, *m.Config)
	}
	if m.Subject != nil {
		descs = append(descs, *m.Subject)
	}
	descs = append(append(descs, m.Layers...), m.Manifests...)
	for _, d := range descs {
		if err := d.Digest.Validate(); err != nil {
			return fmt.Errorf("descriptor digest %.300q: %w", d.Digest, err)
		}
		if d.Size < 0 {
			return fmt.Errorf("descriptor %s: negative size %d", d.Digest, d.Size)
		}
		for _, u := range d.URLs {
			// distribution's rule (storage.ocischemaManifestHandler): an
			// absolute http or https URL without a fragment.
			pu, err := url.Parse(u)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.Fragment != "" {
				return fmt.Errorf("descriptor %s: url %.300q is not an http or https URL without a fragment", d.Digest, redact.URL(u))
			}
		}
	}
	return nil
}
