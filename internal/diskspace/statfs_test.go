package diskspace

import (
	"math"
	"testing"

	"golang.org/x/sys/unix"
)

// File systems that report block counts past int64 once multiplied by the
// block size (FUSE and network file systems saying "unlimited" as
// 2^64-1) are read as the most there can be, not as negative room: before,
// Of said -4096 B free, and the registry's 507 guard refused every push.
func TestUsageSaturates(t *testing.T) {
	for _, tc := range []struct {
		name               string
		bsize              int64
		bavail, blocks     uint64
		wantFree, wantSize int64
	}{
		{"ordinary", 4096, 10, 100, 40960, 409600},
		{"unlimited", 4096, math.MaxUint64, math.MaxUint64, math.MaxInt64, math.MaxInt64},
		{"past int64 once multiplied", 1 << 20, 1 << 50, 1 << 50, math.MaxInt64, math.MaxInt64},
		{"negative block size", -1, 10, 10, 0, 0},
	} {
		var st unix.Statfs_t
		st.Bsize, st.Bavail, st.Blocks = tc.bsize, tc.bavail, tc.blocks
		if u := usage(&st); u.Free != tc.wantFree || u.Total != tc.wantSize {
			t.Errorf("%s: %+v, want free %d of %d", tc.name, u, tc.wantFree, tc.wantSize)
		}
	}
}
