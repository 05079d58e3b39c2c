package registry

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// blobFiles serves a blob GET on filesystem storage from the blob's file,
// once distribution has answered the same request as a HEAD: distribution
// copies a blob through a 4 MiB buffer in writes of 32 KiB, which was most
// of the registry's processor time on a pull; a file handed to the
// connection goes out with sendfile(2). Every decision stays
// distribution's (credentials, whether the repository holds the blob, the
// headers). A refusal of the HEAD (4xx, 5xx) is the GET's answer, as
// distribution writes it for either; any other answer but a 200, and any
// file that does not open at the size distribution gave, leaves the GET to
// distribution as before.
type blobFiles struct {
	next http.Handler
	root string
}

// probeHeaders are left out of the HEAD: its answer is the whole blob's.
var probeHeaders = []string{"Range", "If-Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since"}

func (h *blobFiles) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, ok := blobGet(r)
	if !ok {
		h.next.ServeHTTP(w, r)
		return
	}
	probe := r.Clone(r.Context())
	probe.Method = http.MethodHead
	for _, k := range probeHeaders {
		probe.Header.Del(k)
	}
	head := &recorder{header: http.Header{}}
	h.next.ServeHTTP(head, probe)
	if head.code >= 400 && !head.cut {
		// Refused (credentials, a repository without the blob): the
		// answer is the GET's, and asking again would check the
		// password twice per attempt, twice the bcrypt work that
		// internal/authlimit lets a guesser have.
		for k, v := range head.header {
			w.Header()[k] = v
		}
		w.WriteHeader(head.code)
		_, _ = io.WriteString(w, head.body.String())
		return
	}
	size, err := strconv.ParseInt(head.header.Get("Content-Length"), 10, 64)
	if head.code != http.StatusOK || err != nil || head.header.Get("Docker-Content-Digest") != d.String() {
		h.next.ServeHTTP(w, r)
		return
	}
	enc := d.Encoded()
	f, err := os.Open(filepath.Join(h.root, "docker", "registry", "v2", "blobs", "sha256", enc[:2], enc, "data"))
	if err != nil {
		h.next.ServeHTTP(w, r) // removed since (garbage collection): distribution says so
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		h.next.ServeHTTP(w, r)
		return
	}
	for k, v := range head.header {
		// ServeContent sets these as it answers (distribution's did for
		// the HEAD): not on a 304, 412 or 416.
		if k != "Content-Length" && k != "Accept-Ranges" {
			w.Header()[k] = v
		}
	}
	http.ServeContent(w, r, "", time.Time{}, f)
}

// blobGet reports whether r is a GET of a blob by its sha256 digest, and
// the digest.
func blobGet(r *http.Request) (digest.Digest, bool) {
	if r.Method != http.MethodGet {
		return "", false
	}
	m := apiPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil || !validName(m[1]) {
		return "", false
	}
	ref, ok := strings.CutPrefix(m[2], "blobs/")
	if !ok || strings.HasPrefix(ref, "uploads/") {
		return "", false
	}
	d, err := digest.Parse(ref)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", false
	}
	return d, true
}
