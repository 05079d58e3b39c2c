package bom_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// craftedIndex is an index whose checksum holds, of 256 strings of 64 KiB,
// one package URL of 60 KiB with 8,000 qualifiers, and n components, each
// with its own name and that URL, listing the 256 big strings as its
// licenses: 16 MiB of strings that the components refer to by number.
func craftedIndex(n int) []byte {
	var body []byte
	put := func(v uint64) { body = binary.AppendUvarint(body, v) }
	body = append(body, "FERRYBOMIDX\x01"...)
	const big = 256
	var quals []string
	for i := range 8_000 {
		quals = append(quals, fmt.Sprintf("q%d=1", i))
	}
	purl := "pkg:npm/x@1?" + strings.Join(quals, "&")
	put(uint64(big + n + 1))
	for i := range big {
		s := strings.Repeat(string(rune('a'+i%26)), 64<<10-4) + fmt.Sprintf("%04d", i)
		put(uint64(len(s)))
		body = append(body, s...)
	}
	for i := range n {
		s := fmt.Sprint(i)
		put(uint64(len(s)))
		body = append(body, s...)
	}
	put(uint64(len(purl)))
	body = append(body, purl...)
	put(uint64(n))
	for i := range n {
		put(uint64(big + i))
		put(0)
		put(0)
		put(uint64(big + n))
		put(big)
		for l := range big {
			put(uint64(l))
		}
	}
	put(1)
	dg := string(digest.FromString("x"))
	put(uint64(len(dg)))
	body = append(body, dg...)
	put(1)
	put(1)
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

// TestReadIndexAmplification: a component's strings are held once however
// many components refer to them, and a package URL is read once however
// many components share it. Before, each component's identity held a copy
// of all its strings and each component parsed its URL again: 40
// components of such an index (16 MiB) took 955 MiB and 2.3 s; 2,000 ran
// out of memory.
func TestReadIndexAmplification(t *testing.T) {
	if testing.Short() {
		t.Skip("reads an index of 17 MiB")
	}
	data := craftedIndex(2000)
	var x *bom.Index
	var err error
	start := time.Now()
	mem := allocated(func() { x, err = bom.ReadIndex(bytes.NewReader(data), bom.IndexLimits{}) })
	d := time.Since(start)
	t.Logf("%d MiB: %d MiB, %v", len(data)>>20, mem>>20, d)
	if err != nil {
		t.Fatal(err)
	}
	if mem > 4*uint64(len(data)) || d > 60*time.Second {
		t.Errorf("%d MiB and %v for an index of %d MiB", mem>>20, d, len(data)>>20)
	}
	q, _ := bom.ParseQuery("pkg:npm/x")
	n := 0
	x.Query(q, func(digest.Digest, bom.Component) bool { n++; return true })
	if n != 1 {
		t.Errorf("query: %d matches, want 1", n)
	}
}
