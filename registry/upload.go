package registry

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/ferrypkg/ferry/internal/readahead"
)

// uploadChunk is the size of the writes a blob upload reaches storage in.
const uploadChunk = 1 << 20

// uploadBufs holds the buffers of uploads in flight.
var uploadBufs = sync.Pool{New: func() any { b := make([]byte, uploadChunk); return &b }}

// largeWrites makes a blob upload's body (PATCH or PUT) reach storage in
// writes of uploadChunk. distribution copies the body with io.Copy into its
// blob writer's ReadFrom, which hashes and writes 32 KiB at a time; that was
// most of the registry's CPU on ingest. io.Copy takes the body's WriteTo
// instead, when it has one.
//
// Filesystem storage only: distribution's in-memory driver reports a size
// without its unflushed writes, and the blob writer then rewinds its digest
// on the second write (the upload fails with "digest invalid").
func largeWrites(r *http.Request) {
	if (r.Method == http.MethodPatch || r.Method == http.MethodPut) && r.Body != nil && strings.Contains(r.URL.Path, "/blobs/uploads/") {
		r.Body = &uploadBody{ReadCloser: r.Body}
	}
}

type uploadBody struct{ io.ReadCloser }

// WriteTo copies the body to w in writes of uploadChunk (the last shorter).
func (b *uploadBody) WriteTo(w io.Writer) (int64, error) {
	bp := uploadBufs.Get().(*[]byte)
	defer uploadBufs.Put(bp)
	r := readahead.New(b.ReadCloser, *bp, nil)
	defer r.Close()
	var n int64
	err := r.Chunks(func(c []byte) error {
		k, err := w.Write(c)
		n += int64(k)
		return err
	})
	return n, err
}
