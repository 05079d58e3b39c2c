package registry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/opencontainers/go-digest"
)

// distribution v3.1.2 stores every blob under its sha256 digest and links a
// blob uploaded by another algorithm (sha512) under that digest too, so GET,
// HEAD and manifest references by it work. Two things it gets wrong are put
// right here:
//   - the closing PUT of an upload and GET/HEAD answer with the sha256
//     digest in Docker-Content-Digest (and the PUT's Location), where the
//     spec wants the digest the client named;
//   - a mount by a sha512 digest links the target repository to a sha512
//     blob that does not exist (storage.linkedBlobStore.mount links the
//     requested digest to itself): HEAD then fails with a 500.

// serveBlob serves the blob requests that name a non-sha256 digest and
// reports whether it did.
func (h *referrersHandler) serveBlob(w http.ResponseWriter, r *http.Request) bool {
	m := apiPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil || !strings.HasPrefix(m[2], "blobs/") {
		return false
	}
	name, ref := m[1], strings.TrimPrefix(m[2], "blobs/")
	q := r.URL.Query()
	switch {
	case !strings.HasPrefix(ref, "uploads/") && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		if d, ok := nonCanonical(ref); ok {
			h.echoBlobDigest(w, r, d)
			return true
		}
	case ref == "uploads/" && r.Method == http.MethodPost && q.Has("mount"):
		if d, ok := nonCanonical(q.Get("mount")); ok && q.Get("from") != "" {
			h.mountByAlias(w, r, name, q.Get("from"), d)
			return true
		}
	case strings.HasPrefix(ref, "uploads/") && (r.Method == http.MethodPut || r.Method == http.MethodPost):
		if d, ok := nonCanonical(q.Get("digest")); ok {
			h.echoBlobDigest(w, r, d)
			return true
		}
	}
	return false
}

// nonCanonical parses s as a digest of an algorithm other than sha256.
func nonCanonical(s string) (digest.Digest, bool) {
	d, err := digest.Parse(s)
	if err != nil || d.Algorithm() == digest.Canonical {
		return "", false
	}
	return d, true
}

// echoBlobDigest makes a successful blob GET, HEAD or closing upload PUT
// answer with d, the digest the client named, where distribution answers
// with the blob's sha256 digest.
func (h *referrersHandler) echoBlobDigest(w http.ResponseWriter, r *http.Request, d digest.Digest) {
	h.next.ServeHTTP(&hookWriter{ResponseWriter: w, hook: func(code int) int {
		if code < 200 || code > 299 {
			return code
		}
		if stored, err := digest.Parse(w.Header().Get("Docker-Content-Digest")); err == nil && stored != d {
			if loc := w.Header().Get("Location"); loc != "" {
				w.Header().Set("Location", strings.Replace(loc, stored.String(), d.String(), 1))
			}
		}
		w.Header().Set("Docker-Content-Digest", d.String())
		return code
	}}, r)
}

// mountByAlias mounts the blob with the non-sha256 digest d from repository
// from into name. distribution cannot (see above), and the only way its
// storage links a blob under a second digest is an upload that names it, so
// the blob is uploaded again from the source repository: read and hashed
// once, stored once (distribution keeps the existing data). When the source
// has no such blob the request goes on to distribution, which opens an
// upload session (202), as the spec allows for a failed mount.
func (h *referrersHandler) mountByAlias(w http.ResponseWriter, r *http.Request, name, from string, d digest.Digest) {
	src := internalRequest(r, http.MethodHead, "/v2/"+from+"/blobs/"+d.String(), "", nil)
	head := &recorder{header: http.Header{}}
	h.next.ServeHTTP(head, src)
	if head.code != http.StatusOK {
		h.next.ServeHTTP(w, r)
		return
	}
	start := &recorder{header: http.Header{}}
	h.next.ServeHTTP(start, internalRequest(r, http.MethodPost, "/v2/"+name+"/blobs/uploads/", "", nil))
	if start.code != http.StatusAccepted {
		start.replay(w)
		return
	}
	loc, err := url.Parse(start.header.Get("Location"))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "UNKNOWN", fmt.Sprintf("mount %s from %s: upload location: %v", d, from, err))
		return
	}
	q := loc.Query()
	q.Set("digest", d.String())

	pr, pw := io.Pipe()
	go func() {
		get := &pipeWriter{recorder: recorder{header: http.Header{}}, pw: pw}
		h.next.ServeHTTP(get, internalRequest(r, http.MethodGet, "/v2/"+from+"/blobs/"+d.String(), "", nil))
		if get.code != 0 && get.code != http.StatusOK {
			pw.CloseWithError(fmt.Errorf("mount %s from %s: GET answered %d", d, from, get.code))
			return
		}
		pw.Close()
	}()
	put := &recorder{header: http.Header{}}
	h.echoBlobDigest(put, internalRequest(r, http.MethodPut, loc.Path, q.Encode(), pr), d)
	_ = pr.CloseWithError(errors.New("upload ended"))
	put.replay(w)
}

// internalRequest is a request to distribution made on behalf of r, with
// r's context and credentials.
func internalRequest(r *http.Request, method, path, rawQuery string, body io.Reader) *http.Request {
	req := r.Clone(r.Context())
	req.Method = method
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", rawQuery
	req.RequestURI = ""
	req.Header.Del("Content-Length")
	req.Header.Del("Content-Range")
	req.ContentLength = 0
	req.Body = http.NoBody
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
		req.ContentLength = -1
		req.Body = io.NopCloser(body)
	}
	return req
}

// recordLimit bounds the body a recorder keeps (distribution's JSON errors
// are a few hundred bytes); past it, the rest is dropped and cut set.
const recordLimit = 64 << 10

// recorder keeps a small response (headers and an error body) to inspect or
// replay.
type recorder struct {
	header http.Header
	code   int
	body   strings.Builder
	cut    bool // the body went past what is kept
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	if rec.body.Len()+len(b) <= recordLimit {
		rec.body.Write(b)
	} else {
		rec.cut = true
	}
	return len(b), nil
}

// replay writes the recorded response to w.
func (rec *recorder) replay(w http.ResponseWriter) {
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	w.WriteHeader(rec.code)
	_, _ = io.WriteString(w, rec.body.String())
}

// pipeWriter streams a response body into a pipe.
type pipeWriter struct {
	recorder
	pw *io.PipeWriter
}

func (p *pipeWriter) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	if p.code != http.StatusOK {
		return len(b), nil
	}
	return p.pw.Write(b)
}
