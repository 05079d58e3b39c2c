package gitserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v6/plumbing/transport"
)

// Git's smart HTTP media types.
const (
	mediaTypeAdvertisement = "application/x-git-upload-pack-advertisement"
	mediaTypeRequest       = "application/x-git-upload-pack-request"
	mediaTypeResult        = "application/x-git-upload-pack-result"
)

// bodyReadTimeout bounds reading an upload-pack request body: git sends it
// at once.
const bodyReadTimeout = time.Minute

// protocolVersion is the Git-Protocol header go-git is given: the highest
// version this server speaks among those the client offers (as git's
// http-backend picks it), canonical.
func protocolVersion(h string) string {
	v := ""
	for p := range strings.SplitSeq(h, ":") {
		switch strings.TrimSpace(p) {
		case "version=2":
			return "version=2"
		case "version=1":
			v = "version=1"
		}
	}
	return v
}

// advertise answers GET info/refs?service=git-upload-pack: the refs (v0,
// v1) or the capabilities (v2). It is small: made whole, then sent, so
// that a failure is a 500 and never half an answer.
func (s *Server) advertise(ctx context.Context, w http.ResponseWriter, st *servedRepo, key, version string) {
	var buf bytes.Buffer
	err := transport.UploadPack(ctx, st.served, nil, nopWriteCloser{&buf}, &transport.UploadPackRequest{
		GitProtocol: version, AdvertiseRefs: true, StatelessRPC: true,
	})
	if err != nil {
		s.opts.logger.Error("advertisement failed", "repository", key, "error", err)
		httpError(w, http.StatusInternalServerError, "repository "+key+": advertisement failed")
		return
	}
	h := w.Header()
	h.Set("Content-Type", mediaTypeAdvertisement)
	h.Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	h.Set("Pragma", "no-cache")
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
	_, _ = w.Write(buf.Bytes())
}

// uploadPack answers POST git-upload-pack: the request is read whole
// (bounded), checked and made canonical (checkV0, checkV2), then go-git's
// upload-pack answers it, at most opts.maxPacks at once.
func (s *Server) uploadPack(ctx context.Context, w http.ResponseWriter, r *http.Request, st *servedRepo, key, version string) {
	select {
	case s.packs <- struct{}{}:
		defer func() { <-s.packs }()
	case <-ctx.Done():
		httpError(w, http.StatusServiceUnavailable, "too many clones at once; try again")
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	body, err := s.limitBody(w, r)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	b, err := io.ReadAll(body)
	body.Close()
	// (A deadline must not outlive the request on a kept-alive
	// connection.)
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok || errors.Is(err, errTooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		httpError(w, code, "request body: "+err.Error())
		return
	}
	check := checkV0
	if version == "version=2" {
		check = checkV2
	}
	req, err := check(b, st.served)
	if err != nil {
		if re, ok := errors.AsType[*requestError](err); ok {
			s.opts.logger.Info("request refused", "repository", key, "remote", r.RemoteAddr, "reason", re.Msg)
			httpError(w, http.StatusBadRequest, "upload-pack: "+re.Msg)
			return
		}
		s.opts.logger.Error("request check failed", "repository", key, "error", err)
		httpError(w, http.StatusInternalServerError, "upload-pack failed")
		return
	}

	// The pack may take long to write: the request's time bound is a
	// write deadline, and go-git's upload-pack is given a context it never
	// sees cancelled (it abandons a write in progress when its context
	// ends, and that write would then touch w after the handler returned).
	if dl, ok := ctx.Deadline(); ok {
		_ = rc.SetWriteDeadline(dl)
		defer rc.SetWriteDeadline(time.Time{})
	}
	var out http.ResponseWriter = w
	if version != "version=2" && shallowProbe(req) {
		out = &firstSection{ResponseWriter: w}
	}
	pw := &packWriter{w: out}
	pw.bw = bufio.NewWriterSize(writerFunc(pw.send), 64<<10)
	err = transport.UploadPack(context.WithoutCancel(ctx), st.served, io.NopCloser(bytes.NewReader(req)), pw, &transport.UploadPackRequest{
		GitProtocol: version, StatelessRPC: true,
	})
	written := pw.finish()
	switch {
	case err == nil:
	case version != "version=2" && !bytes.HasSuffix(req, []byte("0009done\n")):
		// A stateless v0/v1 round that did not say done: go-git answers
		// it (with ACKs or a NAK, or nothing, as git does without
		// multi_ack), then fails reading the next round, which is the
		// client's next request.
		s.opts.logger.Debug("upload-pack round ended", "repository", key, "error", err)
		if written == 0 {
			w.Header().Set("Content-Type", mediaTypeResult)
			w.WriteHeader(http.StatusOK)
		}
	case written == 0 && ctx.Err() == nil:
		// Nothing sent yet: the request was checked, so this is ours.
		s.opts.logger.Error("upload-pack failed", "repository", key, "error", err)
		httpError(w, http.StatusInternalServerError, "upload-pack failed")
	default:
		// The client went away, or the time bound was reached.
		s.opts.logger.Debug("upload-pack ended", "repository", key, "error", err)
	}
}

// packWriter is what go-git's upload-pack writes to: buffered, headers
// set before the first byte goes out, and closed for good once the
// handler is done.
type packWriter struct {
	w       http.ResponseWriter
	bw      *bufio.Writer
	mu      sync.Mutex
	n       int64 // bytes go-git wrote
	started bool
	done    bool
}

func (p *packWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return 0, errClosed
	}
	p.n += int64(len(b))
	return p.bw.Write(b)
}

// send writes to the response, its headers first.
func (p *packWriter) send(b []byte) (int, error) {
	if !p.started {
		p.started = true
		h := p.w.Header()
		h.Set("Content-Type", mediaTypeResult)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	return p.w.Write(b)
}

// Close flushes what is buffered (go-git closes its writer when done).
func (p *packWriter) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil
	}
	return p.bw.Flush()
}

// finish flushes, closes the writer and returns how many bytes go-git
// wrote.
func (p *packWriter) finish() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done && p.n > 0 {
		_ = p.bw.Flush()
	}
	p.done = true
	return p.n
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
