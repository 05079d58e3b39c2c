package gitrepo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// ErrRefList is wrapped by the error of a clone whose server listed more
// refs than artifact.MaxGitRefList bytes.
var ErrRefList = errors.New("the git server's list of refs passed its limit")

// Bounds of a clone over HTTP(S), variables so that a test can lower them.
var (
	// maxRefList is artifact.MaxGitRefList.
	maxRefList int64 = artifact.MaxGitRefList
	// stallWindow and minRate give up a server that answers nothing, or
	// sends slower than minRate, over stallWindow (artifact's defaults for
	// registries: a minute, 16 KiB/s).
	stallWindow time.Duration = artifact.DefaultStallWindow
	minRate     int64         = artifact.DefaultMinRate
)

// httpClient is the client a clone talks HTTP(S) with: Go's default
// transport (proxies from the environment, the system's roots), a server
// that stalls given up (artifact.NewStallTransport), and its list of refs
// held to maxRefList (refListTransport).
func httpClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Transport: refListTransport{next: artifact.NewStallTransport(t, stallWindow, minRate)}}
}

// refListTransport holds the answers that list a server's refs — the GET
// of info/refs (protocol v0 and v1 list them there), and a POST whose
// request is protocol v2's ls-refs command — to maxRefList bytes: go-git
// reads a list whole into memory, so a server listing refs without end
// would grow a clone without bound. The pack, which go-git streams to disk,
// is bounded by the stall transport only.
type refListTransport struct{ next http.RoundTripper }

func (t refListTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	list := req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/info/refs") ||
		req.Method == http.MethodPost && lsRefs(req)
	resp, err := t.next.RoundTrip(req)
	if err != nil || !list {
		return resp, err
	}
	resp.Body = &refListBody{rc: resp.Body, left: maxRefList}
	return resp, nil
}

// lsRefs is a protocol v2 request whose command is ls-refs: its first
// pkt-line is "command=ls-refs". go-git sends a body it can read again.
func lsRefs(req *http.Request) bool {
	if req.GetBody == nil {
		return false
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	head := make([]byte, 4+len("command=ls-refs"))
	n, _ := io.ReadFull(body, head)
	return bytes.HasSuffix(head[:n], []byte("command=ls-refs"))
}

// refusal is the innermost error of err's chain that is still ErrRefList
// or artifact.ErrStalled: the refusal itself, without the words go-git
// puts around it.
func refusal(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil || next == ErrRefList || next == artifact.ErrStalled ||
			!errors.Is(next, ErrRefList) && !errors.Is(next, artifact.ErrStalled) {
			return err
		}
		err = next
	}
}

// refListBody ends with a *refListError once more than left bytes came.
type refListBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *refListBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, &refListError{limit: maxRefList}
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return n - 1, &refListError{limit: maxRefList}
	}
	return n, err
}

func (b *refListBody) Close() error { return b.rc.Close() }

// refListError is a list of refs past limit bytes; Open names the
// repository.
type refListError struct{ limit int64 }

func (e *refListError) Error() string {
	return fmt.Sprintf("%s of %s", ErrRefList, size(e.limit))
}

func (e *refListError) Unwrap() error { return ErrRefList }

// size is n bytes in MiB when whole, else in bytes.
func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
