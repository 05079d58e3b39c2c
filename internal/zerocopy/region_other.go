//go:build !linux

package zerocopy

import (
	"errors"
	"os"
)

func mapFile(*os.File, int64, int64) ([]byte, int, error) {
	return nil, 0, errors.ErrUnsupported
}

func unmapFile([]byte) {}

func (r *Region) holds(uintptr) bool { return false }
