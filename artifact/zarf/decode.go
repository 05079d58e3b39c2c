package zarf

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact"
)

// nodesPerIndicator is how many YAML nodes one indicator (':', '-', '?',
// ',', '[', '{') can bring at most: a key, a value, a collection and an
// empty node (TestNodeBound holds yaml.v3 to it). Every node but a
// document's first stands after one of them.
const nodesPerIndicator = 4

// nodeBound is an upper bound on the YAML nodes data can make, read from
// its text without parsing it, and the indicators it counted.
func nodeBound(data []byte) (bound, indicators int) {
	for _, b := range data {
		switch b {
		case ':', '-', '?', ',', '[', '{':
			indicators++
		}
	}
	return nodesPerIndicator * (indicators + 1), indicators
}

// decode parses the zarf.yaml content data (file names it in errors) held
// to MaxNodes: its text is bounded before the parse and its nodes, aliases
// expanded, counted after, so that neither the parse nor a walk of the
// result costs more than a few tens of MiB whatever data holds. It returns
// the document's node; a second document, an alias that contains itself
// or an empty file is an error.
func decode(file string, data []byte) (*yaml.Node, error) {
	errf := func(line int, format string, args ...any) error {
		return &artifact.DefinitionError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if bound, n := nodeBound(data); bound > MaxNodes {
		return nil, errf(0, "too much YAML for a Zarf definition: its %s ':', '-', '?', ',', '[' and '{' could make %s nodes, more than %s", count(n), count(bound), count(MaxNodes))
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, errf(0, "invalid YAML: %s", clip(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, errf(extra.Line, "more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errf(0, "empty zarf.yaml")
	}
	s := sizer{memo: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	n, err := s.size(&doc)
	if err != nil {
		return nil, errf(s.line, "%v", err)
	}
	if n > MaxNodes {
		return nil, errf(s.line, "its aliases make more than %s YAML nodes", count(MaxNodes))
	}
	return doc.Content[0], nil
}

// sizer counts the nodes of a YAML tree with every alias expanded, each
// anchored node counted once and its size remembered, stopping past
// MaxNodes: linear in the nodes parsed.
type sizer struct {
	memo map[*yaml.Node]int
	open map[*yaml.Node]bool // anchored nodes being counted
	line int                 // where it stopped
}

func (s *sizer) size(n *yaml.Node) (int, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		t := n.Alias
		if s.open[t] {
			s.line = n.Line
			return 0, fmt.Errorf("alias *%s stands for a node that holds it", clip(n.Value))
		}
		if size, ok := s.memo[t]; ok {
			if size > MaxNodes {
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
		if total += size; total > MaxNodes {
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

// count writes n with thousands separators (230,000).
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// clip cuts s to MaxQuoted bytes, saying how long it was: a value of
// zarf.yaml or of a package in a message.
func clip(s string) string { return clipTo(s, MaxQuoted) }

// clipLine cuts a whole message to 4×MaxQuoted bytes.
func clipLine(s string) string { return clipTo(s, 4*MaxQuoted) }

func clipTo(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%s bytes)", s[:cut], count(len(s)))
}

// firstOf names the first of a list of offenders and counts the rest, so
// that a message about many stays one short line.
func firstOf(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return clip(items[0])
	}
	return fmt.Sprintf("%s and %s more", clip(items[0]), count(len(items)-1))
}
