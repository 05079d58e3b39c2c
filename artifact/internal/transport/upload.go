// Package transport is how artifact talks HTTP to a registry beyond what
// oras-go does: a blob upload in three requests that leaves nothing behind
// when refused half-way (PushBlob), and stall detection on answers
// (StallTransport).
package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact/internal/corrupt"
	"github.com/ferrypkg/ferry/internal/readahead"
	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/internal/zerocopy"
)

// uploadCancelTimeout bounds how long an upload under way may go on once its
// push has failed, and the DELETE that cancels a failed upload.
const uploadCancelTimeout = 10 * time.Second

// PushBlob uploads one blob as crane does — a POST that opens an upload
// session (mounting from mountFrom, a repository of the same registry, when
// set), a PATCH with the whole body, a PUT that commits it under its digest
// — so that a push refused half-way leaves nothing in the registry's upload
// area:
//
//   - A damaged blob is known at its last byte, when the walker's reader
//     fails instead of ending. The PATCH body is complete by then: it ends
//     cleanly, the registry answers with the session's new state, and the
//     session is deleted instead of committed. (oras-go's one PUT would
//     send the damaged blob for the registry to refuse; distribution then
//     keeps the session, and refuses to delete it: its state no longer
//     matches the data it holds. The extra request costs a push little:
//     docs/performance.md.)
//   - When ctx ends (another stream failed, Ctrl-C), an upload under way is
//     let finish, for up to uploadCancelTimeout: its blob is verified, and
//     a request cut off mid-body leaves a session behind as above.
//   - Any other failure cuts the request off, and the session is deleted
//     as far as the registry allows.
//
// A blob held in memory (a *bytes.Reader), verified already, goes up in
// one PUT.
//
// The body goes to the HTTP transport in writes of len(buf) (from 4 KiB if
// buf is nil).
func PushBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, body io.Reader, buf []byte, mountFrom string) error {
	ref := repo.Reference
	scoped := auth.AppendRepositoryScope(ctx, ref, auth.ActionPull, auth.ActionPush)
	scheme := "https"
	if repo.PlainHTTP {
		scheme = "http"
	}
	start := scheme + "://" + ref.Host() + "/v2/" + ref.Repository + "/blobs/uploads/"
	if mountFrom != "" {
		from := ref
		from.Repository, from.Reference = mountFrom, ""
		scoped = auth.AppendRepositoryScope(scoped, from, auth.ActionPull)
		start += "?" + url.Values{"mount": {desc.Digest.String()}, "from": {mountFrom}}.Encode()
	}
	// The upload, once begun, outlives ctx a little, so that it can finish:
	// a POST cut off could leave a session the registry opened unknown to
	// us, a PATCH cut off one it will not delete.
	if err := ctx.Err(); err != nil {
		return err
	}
	client := repo.Client
	if client == nil {
		client = auth.DefaultClient // as the repository's own requests use
	}
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(scoped))
	defer cancelReq()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(uploadCancelTimeout, cancelReq) })
	defer stop()
	resp, err := do(reqCtx, client, http.MethodPost, start, nil, 0)
	if err != nil {
		return fmt.Errorf("open upload: %w", err)
	}
	if resp.StatusCode == http.StatusCreated {
		return nil // mounted
	}
	loc, err := location(resp, http.StatusAccepted)
	if err != nil {
		return fmt.Errorf("open upload: %w", err)
	}
	if _, inMemory := body.(*bytes.Reader); inMemory {
		// Verified already, and whole: one PUT, as oras-go sends it.
		if resp, err = do(reqCtx, client, http.MethodPut, commitURL(loc, desc), body, desc.Size); err == nil {
			_, err = location(resp, http.StatusCreated)
		}
		if err != nil && resp == nil {
			cancelUpload(scoped, client, loc)
		}
		return err
	}
	held := &wholeIfCorrupt{r: body}
	if desc.Size > 0 {
		var rb io.Reader = held
		if _, sends := body.(zerocopy.Sender); buf != nil && !sends {
			rb = &bigWrites{r: held, buf: buf}
		}
		if resp, err = do(reqCtx, client, http.MethodPatch, loc.String(), rb, desc.Size); err == nil {
			var next *url.URL
			if next, err = location(resp, http.StatusAccepted); err == nil {
				loc = next
			}
		}
	}
	if err == nil && held.err == nil {
		if resp, err = do(reqCtx, client, http.MethodPut, commitURL(loc, desc), nil, 0); err == nil {
			_, err = location(resp, http.StatusCreated)
		}
	}
	if err != nil || held.err != nil {
		cancelUpload(scoped, client, loc)
	}
	if held.err != nil {
		return held.err
	}
	return err
}

// commitURL is the upload session loc's URL that commits it as desc.
func commitURL(loc *url.URL, desc ocispec.Descriptor) string {
	u := *loc
	q := u.Query()
	q.Set("digest", desc.Digest.String())
	u.RawQuery = q.Encode()
	return u.String()
}

// wholeIfCorrupt passes a blob's body through and, where the walker's
// reader fails with a corruptBlobError (every byte read, the digest
// wrong), ends it cleanly and keeps the error: the registry then gets the
// whole body and refuses it on its digest.
type wholeIfCorrupt struct {
	r   io.Reader
	err error
}

func (c *wholeIfCorrupt) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if _, ok := corrupt.IsBlob(err); ok {
		c.err = err
		return n, io.EOF
	}
	return n, err
}

// Close does nothing: a ReadCloser is what net/http passes to the
// connection as it is (see zerocopy.Sender).
func (c *wholeIfCorrupt) Close() error { return nil }

// SendTo lets a body that sends itself (a rawBlob) do so.
func (c *wholeIfCorrupt) SendTo(tc *net.TCPConn, limit int64) (int64, error) {
	s, ok := c.r.(zerocopy.Sender)
	if !ok {
		return zerocopy.Copy(tc, c, limit)
	}
	n, err := s.SendTo(tc, limit)
	if _, ok := corrupt.IsBlob(err); ok {
		c.err = err
		return n, nil
	}
	return n, err
}

// do sends one request of an upload, with body (if any) of size bytes, and
// returns the response with its body read (an error's first bytes) and
// closed.
func do(ctx context.Context, client remote.Client, method, u string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	detail := errorDetail(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(detail))
	return resp, nil
}

// location checks an upload response's status and returns its Location,
// resolved against the request.
func location(resp *http.Response, want int) (*url.URL, error) {
	if resp.StatusCode != want {
		detail, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s %s: %s%s", resp.Request.Method, redact.URL(resp.Request.URL.String()), resp.Status, detail)
	}
	if want == http.StatusCreated {
		return nil, nil
	}
	return resp.Location()
}

// cancelUpload deletes an upload session, even when ctx is done; its
// outcome is not the caller's error.
func cancelUpload(ctx context.Context, client remote.Client, loc *url.URL) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadCancelTimeout)
	defer cancel()
	_, _ = do(ctx, client, http.MethodDelete, loc.String(), nil, 0)
}

// errorDetail is the start of a registry's error body, on one line, after
// ": " (or nothing): the messages of an OCI error body ("registry storage
// full: …"), else the body's text.
func errorDetail(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 512))
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	var oci struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if json.Unmarshal(b, &oci) == nil && len(oci.Errors) > 0 {
		msgs := make([]string, 0, len(oci.Errors))
		for _, e := range oci.Errors {
			m := e.Message
			if m == "" {
				m = strings.ToLower(e.Code)
			}
			msgs = append(msgs, m)
		}
		b = []byte(strings.Join(msgs, "; "))
	}
	return ": " + strings.Join(strings.Fields(string(b)), " ")
}

// bigWrites hands an upload's bytes to the HTTP transport in large writes
// (io.Copy prefers WriteTo), not through its 4 KiB buffer.
type bigWrites struct {
	r   io.Reader
	buf []byte
}

func (b *bigWrites) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bigWrites) WriteTo(w io.Writer) (int64, error) { return readahead.Copy(w, b.r, b.buf) }
