package yamlbound

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Bound is an upper bound on the nodes yaml.v3 makes of any text: random
// texts of YAML's indicators and a few hand-made ones.
func TestBound(t *testing.T) {
	count := func(data []byte) int {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		total := 0
		var walk func(*yaml.Node)
		walk = func(n *yaml.Node) {
			total++
			for _, c := range n.Content {
				walk(c)
			}
		}
		for {
			var n yaml.Node
			if err := dec.Decode(&n); err != nil {
				if err != io.EOF {
					walk(&n)
				}
				return total
			}
			walk(&n)
		}
	}
	check := func(data []byte) {
		if bound, _ := Bound(data); count(data) > bound {
			t.Fatalf("%q: %d nodes, bound %d", data, count(data), bound)
		}
	}
	for _, s := range []string{"a", "[:,:,:]", "? \n? \n", "- \n- \n- \n", "{? : }", "- - - - a", "{{{{a}}}}", "[{a}, {b}]", "{a, b, c}", "--- \n--- \n", "&a [*a, *a]", "a: [&b {c: d}, *b]"} {
		check([]byte(s))
	}
	alphabet := []byte("a:-?,[]{}\"' \n#&*!|>.\t")
	r := rand.New(rand.NewPCG(49, 49))
	for range 100_000 {
		b := make([]byte, 1+r.IntN(24))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if r.IntN(4) == 0 {
			b = append([]byte("&a x\n"), b...)
		}
		check(b)
	}
}

func TestCheckAndCount(t *testing.T) {
	many := []byte("a:\n" + strings.Repeat("- 1\n", 100_000))
	if err := Check(many, 200_000); !errors.Is(err, ErrTooMany) {
		t.Fatalf("100,000 list items at most 200,000 nodes: %v", err)
	}
	if err := Check([]byte("a: [1, 2, 3]\n"), 200_000); err != nil {
		t.Fatal(err)
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, n := range "bcdefghi" {
		name := string(n)
		laughs += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 8) + "*" + prev + "]\n"
		prev = name
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(laughs), &doc); err != nil {
		t.Fatal(err)
	}
	if _, line, err := Count(&doc, 200_000); !errors.Is(err, ErrTooMany) || line == 0 {
		t.Fatalf("an alias bomb: line %d, %v", line, err)
	}
	var small yaml.Node
	if err := yaml.Unmarshal([]byte("a: &x [1, 2]\nb: *x\n"), &small); err != nil {
		t.Fatal(err)
	}
	if n, _, err := Count(&small, 100); err != nil || n < 7 {
		t.Fatalf("aliases counted as what they stand for: %d, %v", n, err)
	}
}

func TestKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"image", "image"},
		{strings.Repeat("k", 64), strings.Repeat("k", 64)},
		{strings.Repeat("k", 1000), strings.Repeat("k", 64) + "…"},
		// A character across the cut is left out whole.
		{strings.Repeat("k", 63) + "é" + strings.Repeat("k", 10), strings.Repeat("k", 63) + "…"},
	} {
		if got := Key(c.in); got != c.want {
			t.Errorf("Key(%.20q… %d bytes) = %q, want %q", c.in, len(c.in), got, c.want)
		}
	}
}
