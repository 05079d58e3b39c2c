package bom_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// sbomDigest is a digest standing for SBOM document n.
func sbomDigest(n int) digest.Digest { return digest.FromString(fmt.Sprint("sbom ", n)) }

// testIndex holds three SBOMs sharing components.
func testIndex() *bom.Index {
	x := bom.NewIndex()
	x.Add(sbomDigest(1), []bom.Component{xnet37, ssl11, lodash4, nopurl})
	x.Add(sbomDigest(2), []bom.Component{xnet38, ssl11w, lodash4, django, lodash4})
	x.Add(sbomDigest(3), []bom.Component{xnet37, sslApk, angular, stdlib})
	return x
}

// hits runs q over x: "sbom number:name@version" each.
func hits(t *testing.T, x *bom.Index, query string) []string {
	t.Helper()
	q, err := bom.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	x.Query(q, func(d digest.Digest, c bom.Component) bool {
		for n := 1; n <= 3; n++ {
			if d == sbomDigest(n) {
				got = append(got, fmt.Sprintf("%d:%s@%s", n, c.Name, c.Version))
			}
		}
		return true
	})
	slices.Sort(got)
	return got
}

// TestIndexQuery: the index finds what Match finds, across SBOMs, by
// package URL, name and wildcard; a shared component is held once.
func TestIndexQuery(t *testing.T) {
	x := testIndex()
	for q, want := range map[string][]string{
		"pkg:golang/golang.org/x/net@<0.38.0": {"1:golang.org/x/net@v0.37.0", "3:golang.org/x/net@v0.37.0"},
		"pkg:golang/golang.org/x/net":         {"1:golang.org/x/net@v0.37.0", "2:golang.org/x/net@v0.38.0", "3:golang.org/x/net@v0.37.0"},
		"openssl":                             {"1:openssl@1.0", "1:openssl@1.1.1n-0+deb11u5", "2:openssl@1.1.1w-0+deb11u1", "3:openssl@3.1.4-r5"},
		"pkg:deb/debian/openssl@<1.1.1w":      {"1:openssl@1.1.1n-0+deb11u5"},
		"lodash":                              {"1:lodash@4.17.20", "2:lodash@4.17.20"},
		"Django-REST-Framework":               {"2:Django_REST.framework@3.14.0"},
		"pkg:pypi/django_rest_framework@3.14": {"2:Django_REST.framework@3.14.0"},
		"*angular*":                           {"3:@angular/core@17.0.0"},
		"pkg:npm/*":                           {"1:lodash@4.17.20", "2:lodash@4.17.20", "3:@angular/core@17.0.0"},
		"nothing":                             nil,
	} {
		if got := hits(t, x, q); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", q, got, want)
		}
	}
	// fn returning false stops the walk.
	n := 0
	q, _ := bom.ParseQuery("openssl")
	x.Query(q, func(digest.Digest, bom.Component) bool { n++; return false })
	if n != 1 {
		t.Errorf("the walk went on after false: %d", n)
	}
	if x.Len() != 3 || !x.Has(sbomDigest(2)) || x.Has(sbomDigest(4)) {
		t.Errorf("Len %d, Has wrong", x.Len())
	}
	if got := x.Components(sbomDigest(2)); len(got) != 4 { // lodash4 twice is once
		t.Errorf("SBOM 2 has %d components: %v", len(got), got)
	}
	if x.Components(sbomDigest(9)) != nil {
		t.Error("an SBOM the index lacks has components")
	}
}

// TestIndexRetain: dropped SBOMs are gone from queries, the others stay.
func TestIndexRetain(t *testing.T) {
	x := testIndex()
	if n := x.Retain(func(d digest.Digest) bool { return d != sbomDigest(1) }); n != 1 {
		t.Fatalf("Retain dropped %d", n)
	}
	if got := hits(t, x, "pkg:golang/golang.org/x/net"); !slices.Equal(got, []string{"2:golang.org/x/net@v0.38.0", "3:golang.org/x/net@v0.37.0"}) {
		t.Errorf("after Retain: %v", got)
	}
	if got := hits(t, x, "openssl@1.0"); got != nil {
		t.Errorf("a component only SBOM 1 held is still there: %v", got)
	}
	if x.Len() != 2 || x.Has(sbomDigest(1)) || x.Retain(func(digest.Digest) bool { return true }) != 0 {
		t.Error("Retain kept the wrong SBOMs")
	}
	var seen []digest.Digest
	x.Each(func(d digest.Digest, cs []bom.Component) bool { seen = append(seen, d); return true })
	if !slices.Equal(seen, []digest.Digest{sbomDigest(2), sbomDigest(3)}) {
		t.Errorf("Each: %v", seen)
	}
}

// TestIndexRoundTrip: an index read back answers as the one written, and
// writes the same bytes.
func TestIndexRoundTrip(t *testing.T) {
	x := testIndex()
	var buf bytes.Buffer
	n, err := x.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d, %v (%d bytes)", n, err, buf.Len())
	}
	y, err := bom.ReadIndex(bytes.NewReader(buf.Bytes()), bom.IndexLimits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"openssl", "pkg:golang/golang.org/x/net@<0.38.0", "*a*", "Django-REST-Framework"} {
		if a, b := hits(t, x, q), hits(t, y, q); !slices.Equal(a, b) {
			t.Errorf("%s: %v, read back %v", q, a, b)
		}
	}
	for i := 1; i <= 3; i++ {
		if a, b := x.Components(sbomDigest(i)), y.Components(sbomDigest(i)); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("SBOM %d: %v, read back %v", i, a, b)
		}
	}
	var again bytes.Buffer
	if _, err := y.WriteTo(&again); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("written again: other bytes (%v)", err)
	}
	empty := bom.NewIndex()
	buf.Reset()
	if _, err := empty.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if y, err := bom.ReadIndex(&buf, bom.IndexLimits{}); err != nil || y.Len() != 0 {
		t.Errorf("empty index: %v", err)
	}
}

// TestReadIndexRefuses: every truncation and every changed byte of an
// index is an error wrapping ErrIndex, never a panic; another version is
// ErrIndexVersion; limits are checked.
func TestReadIndexRefuses(t *testing.T) {
	var buf bytes.Buffer
	if _, err := testIndex().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	check := func(name string, data []byte, lim bom.IndexLimits, want string) {
		t.Helper()
		_, err := bom.ReadIndex(bytes.NewReader(data), lim)
		if err == nil || !errors.Is(err, bom.ErrIndex) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	for i := range len(good) {
		check(fmt.Sprintf("truncated at %d", i), good[:i], bom.IndexLimits{}, "")
		bad := slices.Clone(good)
		bad[i] ^= 0x41
		check(fmt.Sprintf("byte %d changed", i), bad, bom.IndexLimits{}, "")
	}
	check("trailing", append(slices.Clone(good), 0), bom.IndexLimits{}, "data after the index")
	v2 := slices.Clone(good)
	v2[len("FERRYBOMIDX")] = 2
	if _, err := bom.ReadIndex(bytes.NewReader(v2), bom.IndexLimits{}); !errors.Is(err, bom.ErrIndexVersion) {
		t.Errorf("version 2: %v", err)
	}
	check("bytes", good, bom.IndexLimits{MaxBytes: 100}, "more than 100 bytes")
	check("strings", good, bom.IndexLimits{MaxStrings: 3}, "more than 3 strings")
	check("components", good, bom.IndexLimits{MaxComponents: 3}, "more than 3 components")
	check("SBOMs", good, bom.IndexLimits{MaxSBOMs: 2}, "more than 2 SBOMs")
	check("SBOM components", good, bom.IndexLimits{MaxSBOMComponents: 2}, "more than 2 components in an SBOM")
	check("string", good, bom.IndexLimits{MaxString: 10}, "more than 10 bytes in a string")
	// A count claiming 2^60 strings is refused before anything is made for it.
	huge := append([]byte("FERRYBOMIDX\x01"), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10)
	check("huge count", huge, bom.IndexLimits{}, "more than 16000000 strings")
}

// FuzzReadIndex: any bytes read as an index give an index or an error,
// never a panic, and an index read writes an index that reads back.
func FuzzReadIndex(f *testing.F) {
	var buf bytes.Buffer
	if _, err := testIndex().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("FERRYBOMIDX\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := bom.ReadIndex(bytes.NewReader(data), bom.IndexLimits{MaxBytes: 1 << 20})
		if err != nil {
			if !errors.Is(err, bom.ErrIndex) {
				t.Fatalf("error not ErrIndex: %v", err)
			}
			return
		}
		var out bytes.Buffer
		if _, err := x.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		if y, err := bom.ReadIndex(&out, bom.IndexLimits{}); err != nil || y.Len() != x.Len() {
			t.Fatalf("written again: %v", err)
		}
	})
}
