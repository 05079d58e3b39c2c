// Package zerocopy sends parts of a file to a TCP connection without
// copying them through the process (sendfile(2) on Linux), so that a blob
// read from a package archive and uploaded to a registry is sent by the
// kernel.
//
// An HTTP client whose transport dials through WrapDial hands a request
// body that is a Sender (directly or as the *io.LimitedReader net/http
// wraps it in) the connection itself: the body then writes itself, e.g. a
// blob's spans of an archive with SendFile. Any other body, and any
// connection that is not plain TCP (TLS wraps the connection and never
// asks), is copied as before.
package zerocopy

import (
	"context"
	"io"
	"net"
	"os"
)

// A Sender writes at most limit bytes of itself to c, returning how many
// it wrote; limit < 0 means all of it. A request body must be an
// io.ReadCloser too: net/http wraps any other reader in a NopCloser, which
// hides SendTo.
type Sender interface {
	SendTo(c *net.TCPConn, limit int64) (int64, error)
}

// DialFunc is the shape of net.Dialer.DialContext and
// http.Transport.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// WrapDial returns dial whose TCP connections give a Sender body the
// connection (see the package doc). A nil dial is a net.Dialer's.
func WrapDial(dial DialFunc) DialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok && err == nil {
			return &conn{TCPConn: tc}, nil
		}
		return c, err
	}
}

// conn is a TCP connection whose ReadFrom lets a Sender write itself.
type conn struct {
	*net.TCPConn
}

func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	lr, limited := r.(*io.LimitedReader)
	src := r
	limit := int64(-1)
	if limited {
		src, limit = lr.R, lr.N
	}
	s, ok := src.(Sender)
	if !ok {
		return c.TCPConn.ReadFrom(r)
	}
	if limited && limit <= 0 {
		return 0, nil
	}
	n, err := s.SendTo(c.TCPConn, limit)
	if limited {
		lr.N -= n
	}
	return n, err
}

// SendFile writes the n bytes of f at off to c: sendfile(2) where there is
// one, else a copy.
func SendFile(c *net.TCPConn, f *os.File, off, n int64) (int64, error) {
	return sendFile(c, f, off, n)
}

// copyFile is SendFile's copy.
func copyFile(c *net.TCPConn, f *os.File, off, n int64) (int64, error) {
	return Copy(c, io.NewSectionReader(f, off, n), -1)
}

// Copy copies r to c, at most limit bytes (all if limit < 0), through the
// process as a connection copies any body: for a Sender that cannot send
// itself after all.
func Copy(c *net.TCPConn, r io.Reader, limit int64) (int64, error) {
	if limit >= 0 {
		r = io.LimitReader(r, limit)
	}
	return io.Copy(writerOnly{c}, readerOnly{r})
}

// writerOnly and readerOnly hide c's ReadFrom, which would come back to
// a Sender's SendTo, and a reader's WriteTo.
type writerOnly struct{ io.Writer }

type readerOnly struct{ io.Reader }
