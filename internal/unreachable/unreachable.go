// Package unreachable says a connection that could not be made (refused,
// no route, no such host) as a sentence about the server — "127.0.0.1:1
// cannot be reached: connection refused" — instead of the request line
// and dial Go's transports put around it (`Get "https://…": dial tcp …`).
// Registries (artifact), git servers (artifact/gitrepo) and API servers
// (client-go) all reach it.
package unreachable

import (
	"errors"
	"net"
	"net/http"
	"syscall"
)

// Error is a server that could not be connected to at all, as opposed to
// one that answered badly. Err is the cause (errors.Is(err,
// syscall.ECONNREFUSED) holds).
type Error struct {
	Host string
	Err  error
}

func (e *Error) Error() string {
	cause := e.Err.Error()
	var errno syscall.Errno
	var dns *net.DNSError
	switch {
	case errors.As(e.Err, &errno):
		cause = errno.Error()
	case errors.As(e.Err, &dns):
		cause = "no such host"
		if !dns.IsNotFound {
			cause = "its name does not resolve (" + dns.Err + ")"
		}
	}
	return e.Host + " cannot be reached: " + cause
}

func (e *Error) Unwrap() error { return e.Err }

// Of returns the *Error in err's chain, or one made of a connection that
// could not be made (a *net.OpError dialing), or nil.
func Of(err error) *Error {
	var ue *Error
	if errors.As(err, &ue) {
		return ue
	}
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		host := ""
		if op.Addr != nil {
			host = op.Addr.String()
		}
		return &Error{Host: host, Err: op.Err}
	}
	return nil
}

// Said is err with a connection that could not be made said as an *Error,
// the words around it dropped; any other err as it is.
func Said(err error) error {
	if ue := Of(err); ue != nil {
		return ue
	}
	return err
}

// Transport is next, returning an *Error (named by the request's host)
// for a connection it could not make.
type Transport struct{ Next http.RoundTripper }

func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Next.RoundTrip(req)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		return nil, &Error{Host: req.URL.Host, Err: op.Err}
	}
	return resp, err
}
