package zarf

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// decode parses the zarf.yaml content data (file names it in errors) held
// to MaxNodes: its text is bounded before the parse and its nodes, aliases
// expanded, counted after, so that neither the parse nor a walk of the
// result costs more than a few tens of MiB whatever data holds. It returns
// the document's node; a second document, an alias that contains itself
// or an empty file is an error.
func decode(file string, data []byte) (*yaml.Node, error) {
	errf := func(line int, format string, args ...any) error {
		return &definition.Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if bound, n := yamlbound.Bound(data); bound > MaxNodes {
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
	if _, line, err := yamlbound.Count(&doc, MaxNodes); errors.Is(err, yamlbound.ErrTooMany) {
		return nil, errf(line, "its aliases make more than %s YAML nodes", count(MaxNodes))
	} else if err != nil {
		return nil, errf(line, "%s", clip(err.Error()))
	}
	return doc.Content[0], nil
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
