package readahead

import "io"

// Fill reads into buf until it is full or r fails; io.EOF comes only with
// the end of r.
func Fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Copy copies r to w in writes of len(buf), the last shorter, until r ends
// (nil error) or fails, and returns the bytes written.
func Copy(w io.Writer, r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := Fill(r, buf)
		if k > 0 {
			m, werr := w.Write(buf[:k])
			n += int64(m)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
