package injector

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrServerClosed is returned by Server.Serve after Shutdown.
var ErrServerClosed = errors.New("injector: server closed")

// Limits of the HTTP/1.1 reader.
const (
	maxHeaderBytes = 16 << 10
	idleTimeout    = 2 * time.Minute
	readTimeout    = 30 * time.Second
)

// Server serves one OCI image layout read-only over the OCI distribution
// API: GET and HEAD of /v2/, /v2/<name>/manifests/<tag|digest>,
// /v2/<name>/blobs/<digest> (with single-range Range requests) and
// /v2/<name>/tags/list. Every write method answers 405 with an OCI error
// body. The layout is served under every valid repository name unless
// Repositories restricts them.
type Server struct {
	l     *layout
	repos map[string]bool

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*serverConn]struct{}
	closing  bool
	wg       sync.WaitGroup
	shutdown chan struct{}
}

// ServerOption configures a Server.
type ServerOption func(*Server) error

// WithRepositories restricts the repository names the layout is served
// under; other names answer NAME_UNKNOWN. By default every name is served.
func WithRepositories(names ...string) ServerOption {
	return func(s *Server) error {
		for _, n := range names {
			if !validName(n) {
				return errors.New("injector: invalid repository name " + strconv.Quote(n))
			}
			s.repos[n] = true
		}
		return nil
	}
}

// NewServer opens the OCI image layout in dir (its oci-layout and
// index.json must be valid; tags come from the
// org.opencontainers.image.ref.name annotations of index.json).
func NewServer(dir string, opts ...ServerOption) (*Server, error) {
	l, err := openLayout(dir)
	if err != nil {
		return nil, err
	}
	s := &Server{l: l, repos: map[string]bool{}, conns: map[*serverConn]struct{}{}, shutdown: make(chan struct{})}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Serve accepts connections on ln until Shutdown, when it returns
// ErrServerClosed. It serves a listener once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		sc := &serverConn{s: s, c: c, idle: true}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go sc.serve()
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// Shutdown stops accepting, closes idle connections and waits for
// responses in flight to finish, or until ctx is done, when it closes the
// remaining connections and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.shutdown)
		if s.ln != nil {
			s.ln.Close()
		}
		for sc := range s.conns {
			if sc.idle {
				sc.c.SetReadDeadline(time.Unix(1, 0))
			}
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for sc := range s.conns {
			sc.c.Close()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// serverConn is one HTTP/1.1 connection with keep-alive.
type serverConn struct {
	s    *Server
	c    net.Conn
	idle bool // guarded by s.mu
}

// request is a parsed HTTP/1.1 request head.
type request struct {
	method, path, query string
	rangeHdr            string
	keepAlive           bool
	hasBody             bool
}

func (sc *serverConn) setIdle(idle bool) bool {
	sc.s.mu.Lock()
	defer sc.s.mu.Unlock()
	sc.idle = idle
	return !sc.s.closing
}

func (sc *serverConn) serve() {
	defer func() {
		sc.c.Close()
		sc.s.mu.Lock()
		delete(sc.s.conns, sc)
		sc.s.mu.Unlock()
		sc.s.wg.Done()
	}()
	br := bufio.NewReaderSize(sc.c, 4096)
	bw := bufio.NewWriterSize(sc.c, 4096)
	for {
		if !sc.setIdle(true) {
			return
		}
		sc.c.SetReadDeadline(time.Now().Add(idleTimeout))
		if _, err := br.Peek(1); err != nil {
			return
		}
		if !sc.setIdle(false) {
			return
		}
		sc.c.SetReadDeadline(time.Now().Add(readTimeout))
		req, err := readRequest(br)
		if err != nil {
			w := &response{w: bw, conn: sc.c}
			w.keepAlive = false
			w.status = 400
			w.errorBody("UNSUPPORTED", err.Error())
			w.finish(nil, 0)
			return
		}
		sc.c.SetReadDeadline(time.Time{})
		w := &response{w: bw, conn: sc.c, head: req.method == "HEAD", keepAlive: req.keepAlive && !req.hasBody}
		sc.s.handle(w, req)
		if w.err != nil || !w.keepAlive {
			return
		}
	}
}

// readRequest parses a request line and headers.
func readRequest(br *bufio.Reader) (*request, error) {
	total := 0
	line := func() (string, error) {
		var b []byte
		for {
			frag, err := br.ReadSlice('\n')
			total += len(frag)
			if total > maxHeaderBytes {
				return "", errors.New("request header too large")
			}
			b = append(b, frag...)
			if err == nil {
				break
			}
			if err != bufio.ErrBufferFull {
				return "", err
			}
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	first, err := line()
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(first, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/1.") || !strings.HasPrefix(target, "/") {
		return nil, errors.New("malformed request line")
	}
	req := &request{method: method, keepAlive: proto != "HTTP/1.0"}
	req.path, req.query, _ = strings.Cut(target, "?")
	for {
		l, err := line()
		if err != nil {
			return nil, err
		}
		if l == "" {
			break
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, errors.New("malformed header line")
		}
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "connection":
			if strings.EqualFold(v, "close") {
				req.keepAlive = false
			} else if strings.EqualFold(v, "keep-alive") {
				req.keepAlive = true
			}
		case "range":
			req.rangeHdr = v
		case "content-length":
			if v != "0" {
				req.hasBody = true
			}
		case "transfer-encoding":
			req.hasBody = true
		}
	}
	return req, nil
}

// response writes one HTTP/1.1 response.
type response struct {
	w         *bufio.Writer
	conn      net.Conn
	head      bool
	keepAlive bool
	status    int
	hdr       []string // "Name: value" lines
	body      []byte
	err       error
}

func (w *response) header(k, v string) { w.hdr = append(w.hdr, k+": "+v) }

// errorBody sets an OCI error JSON body.
func (w *response) errorBody(code, msg string) {
	b := append([]byte(`{"errors":[{"code":`), appendJSONString(nil, code)...)
	b = append(b, `,"message":`...)
	b = append(appendJSONString(b, msg), "}]}"...)
	w.header("Content-Type", "application/json")
	w.body = b
}

var statusText = map[int]string{
	200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found",
	405: "Method Not Allowed", 416: "Range Not Satisfiable", 500: "Internal Server Error",
}

// finish writes the head and either w.body or n bytes of src.
func (w *response) finish(src *os.File, n int64) {
	if src == nil {
		n = int64(len(w.body))
	}
	bw := w.w
	bw.WriteString("HTTP/1.1 " + strconv.Itoa(w.status) + " " + statusText[w.status] + "\r\n")
	bw.WriteString("Docker-Distribution-API-Version: registry/2.0\r\n")
	for _, h := range w.hdr {
		bw.WriteString(h + "\r\n")
	}
	bw.WriteString("Content-Length: " + strconv.FormatInt(n, 10) + "\r\n")
	if !w.keepAlive {
		bw.WriteString("Connection: close\r\n")
	}
	bw.WriteString("\r\n")
	if !w.head && src == nil {
		bw.Write(w.body)
	}
	if err := bw.Flush(); err != nil {
		w.err = err
		return
	}
	if !w.head && src != nil {
		// *net.TCPConn.ReadFrom turns this into sendfile(2).
		w.conn.SetWriteDeadline(time.Now().Add(10*time.Minute + time.Duration(n/(1<<20))*time.Second))
		_, err := io.Copy(w.conn, &io.LimitedReader{R: src, N: n})
		w.conn.SetWriteDeadline(time.Time{})
		if err != nil {
			w.err = err
		}
	}
}

// handle routes one request.
func (s *Server) handle(w *response, req *request) {
	fail := func(status int, code, msg string) {
		w.status = status
		w.errorBody(code, msg)
		w.finish(nil, 0)
	}
	if req.method != "GET" && req.method != "HEAD" {
		w.header("Allow", "GET, HEAD")
		w.keepAlive = false
		fail(405, "UNSUPPORTED", "the injector registry is read-only")
		return
	}
	p := req.path
	if p == "/v2" || p == "/v2/" {
		w.status = 200
		w.header("Content-Type", "application/json")
		w.body = []byte("{}")
		w.finish(nil, 0)
		return
	}
	if !strings.HasPrefix(p, "/v2/") {
		fail(404, "NOT_FOUND", "not found: "+p)
		return
	}
	rest := p[len("/v2/"):]
	var name, kind, ref string
	if n, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		name, kind = n, "tags"
	} else if i := strings.LastIndex(rest, "/manifests/"); i >= 0 {
		name, kind, ref = rest[:i], "manifests", rest[i+len("/manifests/"):]
	} else if i := strings.LastIndex(rest, "/blobs/"); i >= 0 {
		name, kind, ref = rest[:i], "blobs", rest[i+len("/blobs/"):]
	} else {
		fail(404, "NOT_FOUND", "not found: "+p)
		return
	}
	if !validName(name) {
		fail(400, "NAME_INVALID", "invalid repository name "+strconv.Quote(name))
		return
	}
	if len(s.repos) > 0 && !s.repos[name] {
		fail(404, "NAME_UNKNOWN", "repository "+name+" is not served here")
		return
	}
	switch kind {
	case "tags":
		s.tags(w, name, req.query, fail)
	case "manifests":
		if !validDigest(ref) && !validTag(ref) {
			if strings.Contains(ref, ":") {
				fail(400, "DIGEST_INVALID", "invalid digest "+strconv.Quote(ref))
			} else {
				fail(400, "TAG_INVALID", "invalid tag "+strconv.Quote(ref))
			}
			return
		}
		b, dgst, mt, err := s.l.manifest(ref)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				fail(404, "MANIFEST_UNKNOWN", "manifest unknown: "+name+":"+ref)
			} else {
				fail(500, "UNKNOWN", err.Error())
			}
			return
		}
		w.status = 200
		w.header("Content-Type", mt)
		w.header("Docker-Content-Digest", dgst)
		w.body = b
		w.finish(nil, 0)
	case "blobs":
		if !validDigest(ref) {
			fail(400, "DIGEST_INVALID", "invalid digest "+strconv.Quote(ref))
			return
		}
		f, size, err := s.l.openBlob(ref)
		if err != nil {
			fail(404, "BLOB_UNKNOWN", "blob unknown: "+ref)
			return
		}
		defer f.Close()
		w.header("Content-Type", "application/octet-stream")
		w.header("Docker-Content-Digest", ref)
		w.header("Accept-Ranges", "bytes")
		start, n := int64(0), size
		w.status = 200
		if req.rangeHdr != "" {
			var ok bool
			start, n, ok = parseRange(req.rangeHdr, size)
			if !ok {
				w.header("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
				fail(416, "BLOB_UNKNOWN", "range not satisfiable: "+req.rangeHdr)
				return
			}
			w.status = 206
			w.header("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(start+n-1, 10)+"/"+strconv.FormatInt(size, 10))
		}
		if start > 0 {
			if _, err := f.Seek(start, io.SeekStart); err != nil {
				fail(500, "UNKNOWN", err.Error())
				return
			}
		}
		w.finish(f, n)
	}
}

// tags answers /v2/<name>/tags/list with the n and last parameters.
func (s *Server) tags(w *response, name, query string, fail func(int, string, string)) {
	tags := s.l.sortedTags()
	n := -1
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "n":
			i, err := strconv.Atoi(v)
			if err != nil || i < 0 {
				fail(400, "PAGINATION_NUMBER_INVALID", "invalid n "+strconv.Quote(v))
				return
			}
			n = i
		case "last":
			i := 0
			for i < len(tags) && tags[i] <= v {
				i++
			}
			tags = tags[i:]
		}
	}
	if n >= 0 && n < len(tags) {
		tags = tags[:n]
	}
	b := appendJSONString([]byte(`{"name":`), name)
	b = append(b, `,"tags":[`...)
	for i, t := range tags {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, t)
	}
	b = append(b, "]}"...)
	w.status = 200
	w.header("Content-Type", "application/json")
	w.body = b
	w.finish(nil, 0)
}

// parseRange parses a single "bytes=" range against size.
func parseRange(h string, size int64) (start, n int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	if a == "" { // suffix: last b bytes
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k <= 0 || size == 0 {
			return 0, 0, false
		}
		k = min(k, size)
		return size - k, k, true
	}
	s, err := strconv.ParseInt(a, 10, 64)
	if err != nil || s < 0 || s >= size {
		return 0, 0, false
	}
	e := size - 1
	if b != "" {
		e, err = strconv.ParseInt(b, 10, 64)
		if err != nil || e < s {
			return 0, 0, false
		}
		e = min(e, size-1)
	}
	return s, e - s + 1, true
}
