package centre_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// allocated is what f allocates in this process (the centre is served
// in it), in bytes, and how long it takes.
func allocated(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// TestSyncBomb: a member's report of 10⁶ empty packages within the 4 MiB
// body is refused (413) before they are decoded: a few MiB, not the 800
// MiB that decoding them took, and nothing changed.
func TestSyncBomb(t *testing.T) {
	w := newWorld(t)
	m := w.join("m", w.token(centre.TokenOptions{}), nil)
	rv := w.member("m").ResourceVersion
	n := (wire.MaxReport - 64) / 3
	body := []byte(`{"member":"m","packages":[` + strings.TrimSuffix(strings.Repeat("{},", n), ",") + `]}`)
	var status int
	var msg string
	bytes, took := allocated(func() { status, msg = w.post(wire.PathSync, m.cl.Credential, body) })
	t.Logf("%d: %s (%v, %d MiB allocated)", status, msg, took, bytes>>20)
	if status != 413 || !strings.Contains(msg, "packages, more than 256") {
		t.Fatalf("%d %q", status, msg)
	}
	if bytes > 64<<20 {
		t.Errorf("refusing a 4 MiB report allocated %d MiB", bytes>>20)
	}
	if w.member("m").ResourceVersion != rv {
		t.Error("the refused report changed the member")
	}
}
