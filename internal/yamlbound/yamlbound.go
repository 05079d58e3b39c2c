// Package yamlbound bounds what a YAML document costs before and after it
// is parsed: yaml.v3 spends about 200 bytes a node and has no limit of its
// own, so a few MiB of "- 1" lines cost hundreds of MiB, and an alias bomb
// expands without end when walked. Text is held to an upper bound of the
// nodes it can make before the parse (Check), and a parsed tree to its
// node count with every alias expanded (Count).
package yamlbound

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// NodesPerIndicator is how many nodes one indicator (':', '-', '?', ',',
// '[', '{') can bring at most: a key, a value, a collection and an empty
// node. Every node but a document's first stands after one of them.
const NodesPerIndicator = 4

// ErrTooMany is wrapped by the errors of a document over its bound.
var ErrTooMany = errors.New("too much YAML")

// Bound is an upper bound on the nodes yaml.v3 can make of data, read from
// its text without parsing it, and the indicators it counted.
func Bound(data []byte) (bound, indicators int) {
	for _, b := range data {
		switch b {
		case ':', '-', '?', ',', '[', '{':
			indicators++
		}
	}
	return NodesPerIndicator * (indicators + 1), indicators
}

// Check refuses data that could make more than max nodes, before it is
// parsed.
func Check(data []byte, max int) error {
	if bound, n := Bound(data); bound > max {
		return fmt.Errorf("%w: its %d ':', '-', '?', ',', '[' and '{' could make %d nodes, more than %d", ErrTooMany, n, bound, max)
	}
	return nil
}

// Count counts the nodes of a parsed tree with every alias expanded, each
// anchored node counted once and its size remembered, stopping past max:
// linear in the nodes parsed. Past max, or for an alias that holds itself,
// it returns an error and the line where it stopped.
func Count(n *yaml.Node, max int) (int, int, error) {
	s := sizer{max: max, memo: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	total, err := s.size(n)
	if err == nil && total > max {
		err = fmt.Errorf("%w: its aliases make more than %d nodes", ErrTooMany, max)
	}
	return total, s.line, err
}

type sizer struct {
	max  int
	memo map[*yaml.Node]int
	open map[*yaml.Node]bool // anchored nodes being counted
	line int                 // where it stopped
}

func (s *sizer) size(n *yaml.Node) (int, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		t := n.Alias
		if s.open[t] {
			s.line = n.Line
			return 0, fmt.Errorf("alias *%.64s stands for a node that holds it", n.Value)
		}
		if size, ok := s.memo[t]; ok {
			if size > s.max {
				s.line = n.Line
			}
			return 1 + size, nil
		}
		size, err := s.size(t)
		return 1 + size, err
	}
	if n.Anchor != "" {
		s.open[n] = true
		defer delete(s.open, n)
	}
	total := 1
	for _, c := range n.Content {
		size, err := s.size(c)
		if err != nil {
			return 0, err
		}
		if total += size; total > s.max {
			if s.line == 0 {
				s.line = c.Line
			}
			break
		}
	}
	if n.Anchor != "" {
		s.memo[n] = total
	}
	return total, nil
}

// MaxKeyShown is how many bytes of a key an error names: a YAML key can be
// 1,024 characters long, more than a refusal's one line can hold.
const MaxKeyShown = 64

// Key is key as a field path in an error names it: cut to MaxKeyShown
// bytes on a character boundary, "…" marking the cut.
func Key(key string) string {
	if len(key) <= MaxKeyShown {
		return key
	}
	n := MaxKeyShown
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return key[:n] + "…"
}
