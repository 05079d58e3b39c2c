package centre

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// TestTokenIDs: joins with tokens of ids the centre never made — anyone
// may send them, from as many addresses as they have — leave nothing
// behind in its memory (a lock per id sent did: 5.4 MiB per 20,000).
func TestTokenIDs(t *testing.T) {
	c := &Centre{Client: fake.NewClientBuilder().Build()}
	c.init()
	use := func(i int) {
		tok := wire.Token{ID: fmt.Sprintf("%06d", i), Secret: strings.Repeat("a", 64), CA: strings.Repeat("b", 64)}
		if _, _, err := c.useToken(t.Context(), tok.String(), func(map[string]string) error { return nil }); err == nil {
			t.Fatal("an unknown token was taken")
		}
	}
	use(0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 20000
	for i := 1; i <= n; i++ {
		use(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d joins with unknown token ids: the heap grew by %d KiB", n, grew>>10)
	if grew > 256<<10 {
		t.Errorf("%d refused joins kept %d KiB", n, grew>>10)
	}
}
