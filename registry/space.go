package registry

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/ferrypkg/ferry/internal/diskspace"
)

// Filesystem storage that fills up: distribution writes an upload's bytes
// until the disk refuses one, then answers 500 UNKNOWN and keeps the
// half-written session (its data file holding the space) until a purge a
// day later. spaceGuard, in front of it on filesystem storage, instead:
//
//   - refuses a write before any byte of it is stored when its size is
//     known (Content-Length) and it would leave less than the reserve free
//     (StorageReserve), counting the bytes other uploads in flight have yet
//     to write;
//   - turns a write that met the full disk anyway (an upload of unknown
//     size, a file system shared with something else) into the same answer,
//     and removes that upload's session at once, giving its space back;
//   - answers both 507 Insufficient Storage with the OCI error DENIED and
//     one line naming the free space, which oras, crane and skopeo show as
//     they get it (and which no client retries as a passing 5xx).
//
// A blob is served only once its upload is committed (its data moved into
// the blob store after its digest was checked), and distribution writes
// every link and manifest through a temporary file and a rename: a write
// cut short by the full disk leaves nothing that is served. Pulls need no
// room and go on.
type spaceGuard struct {
	next     http.Handler
	root     string
	driver   storagedriver.StorageDriver // removes refused upload sessions
	access   auth.AccessController       // nil: anonymous access
	inFlight atomic.Int64                // bytes accepted uploads have yet to write
	stall    time.Duration               // 0: UploadStall
}

// StorageReserve is the room a write must leave free on filesystem
// storage: 1/64 of the file system's size, at least 1 MiB and at most
// 256 MiB. It covers what a push writes beside its blobs (upload state,
// links, ferry's side records) and leaves the registry room to commit the
// uploads it has accepted.
func StorageReserve(total int64) int64 {
	return min(max(total/64, 1<<20), 256<<20)
}

// ErrorCodeStorageFull is the OCI error code of a write the registry's
// storage has no room for, with status 507 Insufficient Storage: DENIED, as
// registries answer a push over a quota.
const ErrorCodeStorageFull = "DENIED"

func (g *spaceGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, upload, ok := storageWrite(r)
	if !ok {
		g.next.ServeHTTP(w, r)
		return
	}
	need := max(r.ContentLength, 0)
	reserved := false
	// A file system that reports no size (some FUSE and virtual ones)
	// cannot be guarded: writes go to distribution as they come.
	if u, err := diskspace.Of(g.root); err == nil && u.Total > 0 {
		floor := StorageReserve(u.Total)
		if need == 0 {
			floor /= 2 // a commit or a session opened: room for links
		}
		switch {
		case g.reserve(u.Free, floor, need):
			reserved = need > 0
		case g.authorized(r, name):
			what := "push refused"
			if need > 0 {
				kind := "blob"
				if upload == "" && !strings.Contains(r.URL.Path, "/blobs/") {
					kind = "manifest"
				}
				what = fmt.Sprintf("%s of %s refused", kind, diskspace.Bytes(need))
			}
			g.refuse(w, u, what)
			return
		}
		// Not authorized: distribution answers it, and it holds no room.
	}
	if reserved && r.Body != nil {
		body := &countedBody{ReadCloser: r.Body, left: need, inFlight: &g.inFlight,
			rc: http.NewResponseController(w), stall: cmp.Or(g.stall, UploadStall)}
		body.extend()
		defer body.release()
		r.Body = body
	} else if reserved {
		g.inFlight.Add(-need)
	}
	sw := &spaceWriter{ResponseWriter: w, root: g.root}
	g.next.ServeHTTP(sw, r)
	if !sw.full {
		return
	}
	// distribution has closed the upload by now: removing its session
	// gives the space back at once.
	what := "the write met the full disk"
	if upload != "" {
		g.removeUpload(name, upload)
		what = "the upload was refused and removed"
	}
	u, err := diskspace.Of(g.root)
	if err != nil {
		writeError(w, http.StatusInsufficientStorage, ErrorCodeStorageFull, "registry storage full ("+what+")")
		return
	}
	g.refuse(w, u, what)
}

// UploadStall is how long an upload that holds reserved room may go
// without sending a byte before its connection is closed and the room
// given back: the server has no read timeout (a push of many GiB is
// slow), and a client that declared a Content-Length and then stopped
// would otherwise hold that room, and refuse every other push, for as long
// as it kept the connection open.
const UploadStall = time.Minute

// reserve counts need bytes in flight when storage has room for them
// above floor, besides what accepted uploads have yet to write; the check
// and the count are one step, so that uploads at once cannot overcommit.
func (g *spaceGuard) reserve(free, floor, need int64) bool {
	for {
		cur := g.inFlight.Load()
		if need > free-cur-floor {
			return false
		}
		if need == 0 || g.inFlight.CompareAndSwap(cur, cur+need) {
			return true
		}
	}
}

// storageWrite says whether r writes to storage (an upload's POST, PATCH or
// PUT, a manifest's PUT) and returns its repository and, for a started
// upload, the session's id.
func storageWrite(r *http.Request) (name, upload string, ok bool) {
	m := apiPathRE.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return "", "", false
	}
	name, endpoint := m[1], m[2]
	if !validName(name) {
		return "", "", false // checkRequest answers it
	}
	switch {
	case strings.HasPrefix(endpoint, "blobs/uploads/"):
		upload = strings.TrimPrefix(endpoint, "blobs/uploads/")
		return name, upload, r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodPut
	case strings.HasPrefix(endpoint, "manifests/"):
		return name, "", r.Method == http.MethodPut
	}
	return "", "", false
}

// authorized reports whether r may push to name: the free space is said
// only to those who may write (distribution answers the others 401).
func (g *spaceGuard) authorized(r *http.Request, name string) bool {
	if g.access == nil {
		return true
	}
	_, err := g.access.Authorized(r, auth.Access{Resource: auth.Resource{Type: "repository", Name: name}, Action: "push"})
	return err == nil
}

// refuse answers 507 with the one line that names the storage's room.
func (g *spaceGuard) refuse(w http.ResponseWriter, u diskspace.Usage, what string) {
	w.Header().Del("Location")
	w.Header().Del("Docker-Upload-UUID")
	w.Header().Del("Range")
	writeError(w, http.StatusInsufficientStorage, ErrorCodeStorageFull,
		fmt.Sprintf("registry storage full: %s free of %s (%s)", diskspace.Bytes(u.Free), diskspace.Bytes(u.Total), what))
}

// removeUpload deletes an upload session's folder, data and all. The data
// file is first truncated: distribution leaves it open when the disk was
// too full to store the session's hash state (blobWriter.Close returns
// before closing it), and a removed file that is still open keeps its
// space.
func (g *spaceGuard) removeUpload(name, id string) {
	if id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." {
		return
	}
	session := path.Join("/docker/registry/v2/repositories", name, "_uploads", id)
	_ = os.Truncate(filepath.Join(g.root, filepath.FromSlash(session), "data"), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = g.driver.Delete(ctx, session)
}

// spaceWriter holds back distribution's 5xx answer to a write that met
// the full disk (and its body), for the guard to answer instead.
type spaceWriter struct {
	http.ResponseWriter
	root string
	full bool
}

func (s *spaceWriter) WriteHeader(code int) {
	if code >= 500 && !s.full {
		if u, err := diskspace.Of(s.root); err == nil && u.Total > 0 && u.Free < StorageReserve(u.Total) {
			s.full = true
			return
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *spaceWriter) Write(b []byte) (int, error) {
	if s.full {
		return len(b), nil
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *spaceWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// countedBody counts an accepted upload's bytes down in the guard's
// in-flight total as storage takes them; it keeps the body's WriteTo
// (largeWrites).
type countedBody struct {
	io.ReadCloser
	left     int64
	inFlight *atomic.Int64
	rc       *http.ResponseController
	stall    time.Duration
}

func (b *countedBody) took(n int) {
	d := min(int64(n), b.left)
	b.left -= d
	b.inFlight.Add(-d)
	if n > 0 {
		b.extend()
	}
}

// extend moves the connection's read deadline to a stall from now while
// the body has bytes to come, and clears it once it has none.
func (b *countedBody) extend() {
	if b.left > 0 {
		_ = b.rc.SetReadDeadline(time.Now().Add(b.stall))
	} else {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.took(n)
	if err != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *countedBody) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := b.ReadCloser.(io.WriterTo); ok {
		return wt.WriteTo(&countingWriter{w: w, b: b})
	}
	return io.Copy(w, struct{ io.Reader }{b})
}

// release gives back what the request did not write.
func (b *countedBody) release() {
	b.inFlight.Add(-b.left)
	b.left = 0
	_ = b.rc.SetReadDeadline(time.Time{})
}

type countingWriter struct {
	w io.Writer
	b *countedBody
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.b.took(n)
	return n, err
}
