package gitserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v6/plumbing"
	"github.com/go-git/go-git/v6/plumbing/storer"
)

// An upload-pack request is read whole (it is bounded), parsed and checked
// here against git's grammar (gitprotocol-pack, gitprotocol-v2) and what
// this server offers, then written again in canonical form for go-git's
// upload-pack: go-git answers 500, or nothing, to much of what it cannot
// parse, and serves wants it does not have as server errors. What is wrong
// with a request is a *requestError (400).

// Request limits.
const (
	// maxWants bounds the objects one request wants: a clone of what the
	// server advertises wants one or two.
	maxWants = 256
	// maxCommonHaves bounds, in a protocol v2 negotiation round, the
	// haves the server holds, and maxNegotiation their product with the
	// wants: go-git checks each want against each of them along the
	// history.
	maxCommonHaves = 256
	maxNegotiation = 4096
	// maxPktLine is git's LARGE_PACKET_MAX.
	maxPktLine = 65520
)

// requestError is what is wrong with a client's request (HTTP 400).
type requestError struct {
	// Msg says what is wrong, in one line.
	Msg string
}

func (e *requestError) Error() string { return e.Msg }

func badRequest(format string, a ...any) error {
	return &requestError{Msg: fmt.Sprintf(format, a...)}
}

// pktKind is the kind of a pkt-line.
type pktKind int

const (
	pktData pktKind = iota
	pktFlush
	pktDelim
	pktEnd
)

// pktReader reads pkt-lines from a request body.
type pktReader struct {
	b []byte
	n int // pkt-lines read
}

// next returns the next pkt-line (a data line without its newline), or
// io.EOF at the end of the body.
func (r *pktReader) next() (pktKind, string, error) {
	if len(r.b) == 0 {
		return 0, "", io.EOF
	}
	r.n++
	if len(r.b) < 4 {
		return 0, "", badRequest("pkt-line %d: truncated length %q", r.n, r.b)
	}
	n, err := strconv.ParseUint(string(r.b[:4]), 16, 16)
	if err != nil {
		return 0, "", badRequest("pkt-line %d: length %q is not 4 hex digits", r.n, r.b[:4])
	}
	switch n {
	case 0:
		r.b = r.b[4:]
		return pktFlush, "", nil
	case 1:
		r.b = r.b[4:]
		return pktDelim, "", nil
	case 2:
		r.b = r.b[4:]
		return pktEnd, "", nil
	case 3, 4:
		return 0, "", badRequest("pkt-line %d: length %d: empty or invalid", r.n, n)
	}
	if n > maxPktLine {
		return 0, "", badRequest("pkt-line %d: length %d: longer than %d", r.n, n, maxPktLine)
	}
	if int(n) > len(r.b) {
		return 0, "", badRequest("pkt-line %d: length %d, but the body ends after %d bytes", r.n, n, len(r.b))
	}
	line := string(r.b[4:n])
	r.b = r.b[n:]
	return pktData, strings.TrimSuffix(line, "\n"), nil
}

// data returns the next pkt-line, which must be a data line, a flush or
// the end of the body (done is then true).
func (r *pktReader) data(what string) (line string, flush bool, err error) {
	kind, line, err := r.next()
	switch {
	case errors.Is(err, io.EOF):
		return "", false, badRequest("the request ends before the flush-pkt after its %s", what)
	case err != nil:
		return "", false, err
	case kind == pktFlush:
		return "", true, nil
	case kind != pktData:
		return "", false, badRequest("pkt-line %d: a %s where %s were expected", r.n, kindName(kind), what)
	}
	return line, false, nil
}

func (r *pktReader) expectEnd(after string) error {
	if len(r.b) != 0 {
		return badRequest("pkt-line %d: data after the %s", r.n+1, after)
	}
	return nil
}

func kindName(k pktKind) string {
	switch k {
	case pktFlush:
		return "flush-pkt"
	case pktDelim:
		return "delim-pkt"
	case pktEnd:
		return "response-end-pkt"
	}
	return "data pkt-line"
}

// pktWriter writes the canonical request.
type pktWriter struct{ bytes.Buffer }

func (w *pktWriter) line(s string) {
	fmt.Fprintf(&w.Buffer, "%04x%s\n", len(s)+5, s)
}
func (w *pktWriter) flush() { w.WriteString("0000") }
func (w *pktWriter) delim() { w.WriteString("0001") }

// repoObjects is what the checks need of the served repository.
type repoObjects interface {
	storer.ReferenceStorer
	HasEncodedObject(plumbing.Hash) error
}

// oid parses a 40-hex object id (lower case, as git writes it).
func oid(s, what string) (plumbing.Hash, error) {
	if len(s) != 40 || strings.Trim(s, "0123456789abcdef") != "" {
		return plumbing.ZeroHash, badRequest("%s %q: not an object id (40 lower-case hex digits)", what, s)
	}
	return plumbing.NewHash(s), nil
}

// want parses a want, which must name an object the repository holds
// (all of them are reachable from what it advertises: the bundle's
// history).
func want(s string, repo repoObjects) (plumbing.Hash, error) {
	h, err := oid(s, "want")
	if err != nil {
		return h, err
	}
	if repo.HasEncodedObject(h) != nil {
		return h, badRequest("want %s: not our ref (no such object in this repository)", s)
	}
	return h, nil
}

func depth(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > math.MaxInt32 {
		return 0, badRequest("deepen %q: want a depth from 1 to %d", s, math.MaxInt32)
	}
	return n, nil
}

// capability checks one capability a v0/v1 client sends after its first
// want: well formed (a name of lower-case letters, digits, "-" and "_",
// and an optional "=value" without spaces). It returns it if go-git
// understands it, "" if it is ignored (as git ignores those it does not
// know); an object format other than SHA-1 is refused.
func capability(c string) (string, error) {
	name, value, _ := strings.Cut(c, "=")
	if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" || len(c) > 1024 {
		return "", badRequest("capability %q: malformed", c)
	}
	for _, r := range value {
		if r <= ' ' || r == 0x7f {
			return "", badRequest("capability %q: malformed", c)
		}
	}
	switch name {
	case "object-format":
		if value != "sha1" {
			return "", badRequest("capability %q: this repository's object format is sha1", c)
		}
		return c, nil
	case "multi_ack", "multi_ack_detailed", "side-band", "side-band-64k", "ofs-delta", "no-progress", "shallow", "thin-pack", "include-tag":
		if value != "" {
			return "", badRequest("capability %q: takes no value", c)
		}
		return c, nil
	case "agent":
		return c, nil
	}
	return "", nil
}

// checkV0 parses an upload-pack request of protocol v0 or v1 (stateless:
// its wants, then at most one round of haves) and returns it in canonical
// form.
func checkV0(body []byte, repo repoObjects) ([]byte, error) {
	r := &pktReader{b: body}
	var w pktWriter
	kind, line, err := r.next()
	switch {
	case errors.Is(err, io.EOF):
		return nil, badRequest("empty request: want at least a flush-pkt")
	case err != nil:
		return nil, err
	case kind == pktFlush:
		// The client wants nothing.
		if err := r.expectEnd("flush-pkt of an empty request"); err != nil {
			return nil, err
		}
		w.flush()
		return w.Bytes(), nil
	case kind != pktData:
		return nil, badRequest("pkt-line 1: a %s where a want was expected", kindName(kind))
	}
	var (
		wants    []plumbing.Hash
		seen     = map[plumbing.Hash]bool{}
		caps     []string
		agent    bool
		shallows []plumbing.Hash
		deepen   int
		section  int // 0 wants, 1 shallows, 2 deepen
	)
	for {
		verb, arg, _ := strings.Cut(line, " ")
		switch verb {
		case "want":
			if section > 0 {
				return nil, badRequest("pkt-line %d: a want after the shallow or deepen lines", r.n)
			}
			id, rest, _ := strings.Cut(arg, " ")
			h, err := want(id, repo)
			if err != nil {
				return nil, err
			}
			for c := range strings.FieldsSeq(rest) {
				c, err := capability(c)
				if err != nil {
					return nil, err
				}
				if c == "" || slices.Contains(caps, c) || strings.HasPrefix(c, "agent=") && agent {
					continue
				}
				agent = agent || strings.HasPrefix(c, "agent=")
				caps = append(caps, c)
			}
			if !seen[h] {
				if len(wants) == maxWants {
					return nil, badRequest("more than %d wants", maxWants)
				}
				seen[h] = true
				wants = append(wants, h)
			}
		case "shallow":
			if section > 1 {
				return nil, badRequest("pkt-line %d: a shallow line after the deepen line", r.n)
			}
			section = 1
			h, err := oid(arg, "shallow")
			if err != nil {
				return nil, err
			}
			// One the server does not have is ignored, as git does.
			if repo.HasEncodedObject(h) == nil {
				shallows = append(shallows, h)
			}
		case "deepen":
			if section == 2 {
				return nil, badRequest("pkt-line %d: a second deepen line", r.n)
			}
			section = 2
			if deepen, err = depth(arg); err != nil {
				return nil, err
			}
		case "deepen-since", "deepen-not":
			return nil, badRequest("%s: not offered over protocol v0 or v1 (protocol v2 offers it)", verb)
		case "filter":
			return nil, badRequest("filter: partial clones are not offered")
		default:
			return nil, badRequest("pkt-line %d: unexpected line %.64q", r.n, line)
		}
		var flush bool
		if line, flush, err = r.data("wants"); err != nil {
			return nil, err
		}
		if flush {
			break
		}
	}
	if len(wants) == 0 {
		return nil, badRequest("no want")
	}
	for i, h := range wants {
		if i == 0 {
			w.line(strings.TrimSpace("want " + h.String() + " " + strings.Join(caps, " ")))
		} else {
			w.line("want " + h.String())
		}
	}
	for _, h := range shallows {
		w.line("shallow " + h.String())
	}
	if deepen > 0 {
		w.line("deepen " + strconv.Itoa(deepen))
	}
	w.flush()

	// One round of haves: ended by done or a flush-pkt; or none at all
	// (the first request of a shallow clone).
	for first := true; ; first = false {
		kind, line, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			if first {
				return w.Bytes(), nil
			}
			return nil, badRequest("the request ends before the flush-pkt or done after its haves")
		case err != nil:
			return nil, err
		case kind == pktFlush:
			w.flush()
			return w.Bytes(), r.expectEnd("flush-pkt after the haves")
		case kind != pktData:
			return nil, badRequest("pkt-line %d: a %s where a have was expected", r.n, kindName(kind))
		case line == "done":
			w.line("done")
			return w.Bytes(), r.expectEnd("done")
		}
		verb, arg, _ := strings.Cut(line, " ")
		if verb != "have" {
			return nil, badRequest("pkt-line %d: unexpected line %.64q where a have was expected", r.n, line)
		}
		h, err := oid(arg, "have")
		if err != nil {
			return nil, err
		}
		w.line("have " + h.String())
	}
}

// checkV2 parses a protocol v2 request (one command: ls-refs or fetch)
// and returns it in canonical form.
func checkV2(body []byte, repo repoObjects) ([]byte, error) {
	r := &pktReader{b: body}
	var w pktWriter
	kind, line, err := r.next()
	switch {
	case errors.Is(err, io.EOF):
		return nil, badRequest("empty request: want a command or a flush-pkt")
	case err != nil:
		return nil, err
	case kind == pktFlush:
		if err := r.expectEnd("flush-pkt of an empty request"); err != nil {
			return nil, err
		}
		w.flush()
		return w.Bytes(), nil
	case kind != pktData || !strings.HasPrefix(line, "command="):
		return nil, badRequest("pkt-line 1: %.64q: want command=ls-refs or command=fetch", line)
	}
	command := strings.TrimPrefix(line, "command=")
	if command != "ls-refs" && command != "fetch" {
		return nil, badRequest("command %.64q: not offered (ls-refs and fetch are)", command)
	}
	w.line(line)
	// Capabilities, up to the delim-pkt (or the flush-pkt: no arguments).
	args := false
	for !args {
		kind, line, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			return nil, badRequest("the request ends before the flush-pkt after its capabilities")
		case err != nil:
			return nil, err
		case kind == pktDelim:
			args = true
			continue
		case kind == pktFlush:
			// No arguments (git's serve.c allows it; go-git wants the
			// delim-pkt).
			w.delim()
			w.flush()
			return w.Bytes(), r.expectEnd("flush-pkt that ends the request")
		case kind != pktData:
			return nil, badRequest("pkt-line %d: a %s among the capabilities", r.n, kindName(kind))
		}
		name, _, _ := strings.Cut(line, "=")
		switch {
		case name == "agent" || name == "session-id":
			if _, err := capability(line); err != nil {
				return nil, err
			}
			w.line(line)
		case line == "object-format=sha1":
			w.line(line)
		case name == "object-format":
			return nil, badRequest("capability %.64q: this repository's object format is sha1", line)
		default:
			return nil, badRequest("capability %.64q: not offered", line)
		}
	}
	w.delim()
	if command == "ls-refs" {
		return checkLsRefs(r, &w)
	}
	return checkFetch(r, &w, repo)
}

func checkLsRefs(r *pktReader, w *pktWriter) ([]byte, error) {
	for {
		line, flush, err := r.data("ls-refs arguments")
		if err != nil {
			return nil, err
		}
		if flush {
			w.flush()
			return w.Bytes(), r.expectEnd("flush-pkt that ends the request")
		}
		switch verb, _, _ := strings.Cut(line, " "); {
		case line == "symrefs" || line == "peel":
			w.line(line)
		case line == "unborn":
			// Not offered; the repository is never empty.
		case verb == "ref-prefix":
			w.line(line)
		default:
			return nil, badRequest("ls-refs argument %.64q: not offered", line)
		}
	}
}

func checkFetch(r *pktReader, w *pktWriter, repo repoObjects) ([]byte, error) {
	var (
		wants, haves []plumbing.Hash
		seen         = map[plumbing.Hash]bool{}
		common       int
		done         bool
		deepen       bool
		deepenRev    bool
	)
	for {
		line, flush, err := r.data("fetch arguments")
		if err != nil {
			return nil, err
		}
		if flush {
			break
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch {
		case verb == "want" && arg != "":
			h, err := want(arg, repo)
			if err != nil {
				return nil, err
			}
			if !seen[h] {
				if len(wants) == maxWants {
					return nil, badRequest("more than %d wants", maxWants)
				}
				seen[h] = true
				wants = append(wants, h)
				w.line(line)
			}
		case verb == "have" && arg != "":
			h, err := oid(arg, "have")
			if err != nil {
				return nil, err
			}
			if repo.HasEncodedObject(h) == nil {
				common++
			}
			haves = append(haves, h)
			w.line(line)
		case verb == "shallow" && arg != "":
			h, err := oid(arg, "shallow")
			if err != nil {
				return nil, err
			}
			// One the server does not have is ignored, as git does.
			if repo.HasEncodedObject(h) == nil {
				w.line(line)
			}
		case verb == "deepen" && arg != "":
			if deepen {
				return nil, badRequest("a second deepen")
			}
			deepen = true
			n, err := depth(arg)
			if err != nil {
				return nil, err
			}
			w.line("deepen " + strconv.Itoa(n))
		case verb == "deepen-since" && arg != "":
			if _, err := strconv.ParseInt(arg, 10, 64); err != nil {
				return nil, badRequest("deepen-since %.64q: want seconds since the epoch", arg)
			}
			deepenRev = true
			w.line(line)
		case verb == "deepen-not" && arg != "":
			if err := resolvable(arg, repo); err != nil {
				return nil, err
			}
			deepenRev = true
			w.line(line)
		case line == "done":
			done = true
			w.line(line)
		case line == "thin-pack" || line == "no-progress" || line == "include-tag" || line == "ofs-delta" || line == "deepen-relative":
			w.line(line)
		case verb == "filter":
			return nil, badRequest("filter: partial clones are not offered")
		case verb == "want-ref" || line == "sideband-all" || verb == "packfile-uris" || line == "wait-for-done":
			return nil, badRequest("fetch argument %s: not offered", verb)
		default:
			return nil, badRequest("fetch argument %.64q: unexpected", line)
		}
	}
	if deepen && deepenRev {
		return nil, badRequest("deepen cannot be combined with deepen-since or deepen-not")
	}
	if !done && len(haves) > 0 && len(wants) > 0 {
		if common > maxCommonHaves || common*len(wants) > maxNegotiation {
			return nil, badRequest("%d haves the server holds and %d wants in one negotiation round: more than it checks (%d haves, %d pairs); send done", common, len(wants), maxCommonHaves, maxNegotiation)
		}
	}
	w.flush()
	return w.Bytes(), r.expectEnd("flush-pkt that ends the request")
}

// resolvable checks a deepen-not argument: a ref the repository has, or
// an object it holds.
func resolvable(s string, repo repoObjects) error {
	if _, err := storer.ResolveReference(repo, plumbing.ReferenceName(s)); err == nil {
		return nil
	}
	if h, err := oid(s, "deepen-not"); err == nil && repo.HasEncodedObject(h) == nil {
		return nil
	}
	return badRequest("deepen-not %.64q: no such ref or object in this repository", s)
}
