package artifact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// uploadCancelTimeout bounds the DELETE that cancels a failed upload.
const uploadCancelTimeout = 10 * time.Second

// pushBlob uploads one blob as crane does — a POST that opens an upload
// session (mounting from mountFrom, a repository of the same registry, when
// set), a PATCH that streams the body, a PUT that commits it under its
// digest — and cancels the session when the upload fails, so that a push
// refused half-way leaves nothing in the registry's upload area. A blob is
// verified as it streams; when its reader fails (the blob damaged, the
// archive found hostile) or ctx ends, the PATCH body ends early instead of
// being cut off, the registry answers with the session's state, and the
// session is deleted instead of committed. (A request cut off mid-body
// leaves a session the registry will not delete: distribution answers 416
// to a DELETE whose state does not match the data it holds, and oras-go's
// one-PUT upload can only be cut off.) A registry that does not answer
// within uploadCancelTimeout of ctx's end is cut off all the same.
//
// The body goes to the HTTP transport in writes of len(buf) (from 4 KiB if
// buf is nil).
func pushBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, body io.Reader, buf []byte, mountFrom string) error {
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
	resp, err := do(scoped, repo.Client, http.MethodPost, start, nil, nil)
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
	// The PATCH outlives ctx a little, so that its body can end cleanly.
	reqCtx, cancelReq := context.WithCancel(context.WithoutCancel(scoped))
	defer cancelReq()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(uploadCancelTimeout, cancelReq) })
	defer stop()
	held := &endEarly{r: body, ctx: ctx}
	var rb io.Reader = held
	if buf != nil {
		rb = &bigWrites{r: held, buf: buf}
	}
	if resp, err = do(reqCtx, repo.Client, http.MethodPatch, loc.String(), rb, nil); err == nil {
		var next *url.URL
		if next, err = location(resp, http.StatusAccepted); err == nil {
			loc = next
		}
	}
	if err == nil && held.err != nil {
		err = held.err
	}
	if err == nil {
		u := *loc
		q := u.Query()
		q.Set("digest", desc.Digest.String())
		u.RawQuery = q.Encode()
		if resp, err = do(scoped, repo.Client, http.MethodPut, u.String(), nil, nil); err == nil {
			_, err = location(resp, http.StatusCreated)
		}
	}
	if err != nil {
		cancelUpload(scoped, repo.Client, loc)
		if held.err != nil {
			return held.err
		}
	}
	return err
}

// endEarly ends a blob's body cleanly, and keeps the reason, where its
// reader fails or ctx ends: the upload's PATCH then completes with what it
// sent, and the caller deletes the session instead of committing it.
type endEarly struct {
	r   io.Reader
	ctx context.Context
	err error
}

func (e *endEarly) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, io.EOF
	}
	if err := e.ctx.Err(); err != nil {
		e.err = err
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
		return n, io.EOF
	}
	return n, err
}

// do sends one request of an upload, streaming body (if any) with chunked
// transfer encoding, and returns the response with its body read (an
// error's first bytes) and closed.
func do(ctx context.Context, client remote.Client, method, u string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.ContentLength = -1
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
		detail, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s %s: %s%s", resp.Request.Method, redact(resp.Request.URL), resp.Status, detail)
	}
	if want == http.StatusCreated {
		return nil, nil
	}
	return resp.Location()
}

// redact is u without its query (upload state).
func redact(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.String()
}

// cancelUpload deletes an upload session, even when ctx is done; its
// outcome is not the caller's error.
func cancelUpload(ctx context.Context, client remote.Client, loc *url.URL) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uploadCancelTimeout)
	defer cancel()
	_, _ = do(ctx, client, http.MethodDelete, loc.String(), nil, nil)
}

// errorDetail is the start of a registry's error body, on one line, after
// ": " (or nothing).
func errorDetail(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 512))
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	return ": " + strings.Join(strings.Fields(string(b)), " ")
}
