// Package readahead overlaps reading with using what is read: a Reader
// fills chunks of a caller's buffer in one goroutine (file I/O,
// decompression) and hashes them in another while the caller uploads or
// writes them. Memory stays the buffer the caller gives, whatever the size
// of what is read.
package readahead

import (
	"hash"
	"io"
	"sync/atomic"
)

// InFlight is how many chunks of its buffer a Reader keeps in flight.
const InFlight = 4

// Reader reads src ahead in a second goroutine, into chunks of a
// buffer, so that reading (I/O, decompression) overlaps with the reader's
// own work (hashing, uploading). Given a hash, a third goroutine hashes each
// chunk while the reader uses it: reading, hashing and writing a pulled blob
// then run side by side. Close stops the goroutines; it must be called before
// src or the buffer is used again.
type Reader struct {
	full   chan prefetched
	free   chan *part
	stop   chan struct{}
	cur    []byte // unread part of the current chunk
	held   *part  // the current chunk, released once read
	err    error
	hash   hash.Hash
	hashed chan struct{} // closed when every chunk is hashed
}

// part is a piece of a Reader's buffer; it goes back to free when
// both the reader and the hasher are done with it.
type part struct {
	b    []byte
	refs atomic.Int32
}

type prefetched struct {
	c   *part
	err error
}

// New reads src ahead into the InFlight chunks of buf; if h is not nil, what
// is read is also fed to h (see Sum).
func New(src io.Reader, buf []byte, h hash.Hash) *Reader {
	size := len(buf) / InFlight
	r := &Reader{
		full: make(chan prefetched, InFlight+1),
		free: make(chan *part, InFlight),
		stop: make(chan struct{}),
		hash: h,
	}
	for i := range InFlight {
		r.free <- &part{b: buf[i*size : (i+1)*size : (i+1)*size]}
	}
	var toHash chan *part
	if h != nil {
		toHash, r.hashed = make(chan *part, InFlight), make(chan struct{})
		go func() {
			defer close(r.hashed)
			for c := range toHash {
				h.Write(c.b)
				r.release(c)
			}
		}()
	}
	go func() {
		defer close(r.full)
		if toHash != nil {
			defer close(toHash)
		}
		for {
			var c *part
			select {
			case c = <-r.free:
			case <-r.stop:
				return
			}
			n, err := Fill(src, c.b[:cap(c.b)])
			if n > 0 {
				c.b = c.b[:n]
				c.refs.Store(1)
				if toHash != nil {
					c.refs.Store(2)
					toHash <- c
				}
				r.full <- prefetched{c: c}
			}
			if err != nil {
				r.full <- prefetched{err: err}
				return
			}
		}
	}()
	return r
}

func (r *Reader) release(c *part) {
	if c.refs.Add(-1) == 0 {
		r.free <- c
	}
}

func (r *Reader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// fill makes the next chunk current once the current one is read.
func (r *Reader) fill() error {
	for len(r.cur) == 0 {
		if r.err != nil {
			return r.err
		}
		if r.held != nil {
			r.release(r.held)
			r.held = nil
		}
		p, ok := <-r.full
		switch {
		case !ok:
			r.err = io.EOF
		case p.err != nil:
			r.err = p.err
		default:
			r.cur, r.held = p.c.b, p.c
		}
	}
	return nil
}

// Chunks hands fn the rest of src chunk by chunk, as read: whole chunks but
// the last, without copying them. It returns nil at the end of src.
func (r *Reader) Chunks(fn func([]byte) error) error {
	for {
		if err := r.fill(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		b := r.cur
		r.cur = nil
		if err := fn(b); err != nil {
			return err
		}
	}
}

// Sum waits until everything read is hashed and returns the hash (nil
// without one). Call it only after reading to the end.
func (r *Reader) Sum() hash.Hash {
	if r.hashed != nil {
		<-r.hashed
	}
	return r.hash
}

// Close stops the read-ahead and waits for it.
func (r *Reader) Close() {
	close(r.stop)
	for range r.full {
	}
	if r.hashed != nil {
		<-r.hashed
	}
}
