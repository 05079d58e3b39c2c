package gitserver

import (
	"bytes"
	"net/http"
	"strconv"
)

// Protocol v0/v1 over stateless HTTP negotiates a shallow clone in two
// requests. The first carries the wants and "deepen N" and ends at its
// flush, with no haves; git's own upload-pack answers it with the shallow
// list alone (reading the missing haves, it stops at the end of the
// request), and the client reads nothing more before it sends its second
// request. go-git v6.0.0-beta.1's upload-pack goes on to a NAK, which the
// client then takes for the answer to its second request ("expected
// shallow list"; go-git issue #2011). shallowProbe recognises that first
// request, and firstSection passes on only the shallow list.

// shallowProbe reports whether body (pkt-lines) is a first request of a
// shallow negotiation: lines up to one flush, a "deepen" among them, and
// nothing after the flush.
func shallowProbe(body []byte) bool {
	deepen := false
	for len(body) >= 4 {
		n, err := strconv.ParseUint(string(body[:4]), 16, 16)
		switch {
		case err != nil:
			return false
		case n == 0: // flush
			return deepen && len(body) == 4
		case n < 4 || int(n) > len(body):
			return false
		}
		if bytes.HasPrefix(body[4:n], []byte("deepen")) {
			deepen = true
		}
		body = body[n:]
	}
	return false
}

// firstSection writes the pkt-lines up to and including the first flush,
// and drops the rest.
type firstSection struct {
	http.ResponseWriter
	hdr  []byte // length of the packet being read, while incomplete
	left int    // payload bytes of the packet being written
	done bool
}

func (w *firstSection) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !w.done {
		if w.left > 0 {
			k := min(w.left, len(p))
			if _, err := w.ResponseWriter.Write(p[:k]); err != nil {
				return 0, err
			}
			w.left -= k
			p = p[k:]
			continue
		}
		k := min(4-len(w.hdr), len(p))
		w.hdr = append(w.hdr, p[:k]...)
		p = p[k:]
		if len(w.hdr) < 4 {
			break
		}
		l, err := strconv.ParseUint(string(w.hdr), 16, 16)
		if err != nil || (l != 0 && l < 4) {
			return 0, errBadPktLine
		}
		if _, err := w.ResponseWriter.Write(w.hdr); err != nil {
			return 0, err
		}
		w.hdr = w.hdr[:0]
		w.left = int(l) - 4
		w.done = l == 0
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the connection's Flush.
func (w *firstSection) Unwrap() http.ResponseWriter { return w.ResponseWriter }
