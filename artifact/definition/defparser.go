package definition

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// defParser reads a definition's YAML nodes into its types: each error a
// Error that names the file, the line and the field (the
// sections themselves are in defsections.go).
type defParser struct {
	file string
	// fields, when set, collects every field path the parser knows of the
	// mappings it walks, present in the document or not (Fields).
	fields map[string]bool
	// collect, when set, makes the parser go on past a mistake: each is
	// recorded in problems (see fail) and the walk continues (Check).
	collect  bool
	problems []error
	// more counts the problems past MaxProblems, not recorded.
	more int
}

// MaxProblems bounds the problems Check records of one definition; past
// it they are counted, not kept.
const MaxProblems = 100

// fail returns err when the parser stops at the first mistake; when it
// collects them, it records err and returns nil, so the caller goes on.
// A mistake in a field already reported, or in a field holding one that
// is (a list item whose ref was refused), is a consequence of the first
// and is dropped.
func (p *defParser) fail(err error) error {
	if !p.collect || err == nil {
		return err
	}
	var e *Error
	if errors.As(err, &e) && e.Field != "" {
		for _, prev := range p.problems {
			var pe *Error
			if errors.As(prev, &pe) && (pe.Field == e.Field || strings.HasPrefix(pe.Field, e.Field+".") || strings.HasPrefix(pe.Field, e.Field+"[")) {
				return nil
			}
		}
	}
	if len(p.problems) < MaxProblems {
		p.problems = append(p.problems, err)
	} else {
		p.more++
	}
	return nil
}

func (p *defParser) errf(line int, field, format string, args ...any) error {
	return &Error{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (p *defParser) yamlError(err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return p.errf(line, "", "invalid YAML: %s", m[2])
	}
	if errors.Is(err, errEOF) || err.Error() == "EOF" {
		return p.errf(0, "", "empty definition")
	}
	return p.errf(0, "", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

var errEOF = errors.New("EOF")

// listIndex is a list index in a field path (components[3]).
var listIndex = regexp.MustCompile(`\[\d+\]`)

func join(parent, key string) string {
	if parent == "" {
		return yamlbound.Key(key)
	}
	return parent + "." + yamlbound.Key(key)
}

// mapping walks a mapping node, calling the handler of each key and
// rejecting unknown and duplicate keys.
func (p *defParser) mapping(n *yaml.Node, field string, handlers map[string]func(*yaml.Node, string) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n.Line, field, "must be a mapping")
	}
	if p.fields != nil {
		for k := range handlers {
			p.fields[join(listIndex.ReplaceAllString(field, "[]"), k)] = true
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			if err := p.fail(p.errf(k.Line, join(field, k.Value), "unknown field")); err != nil {
				return err
			}
			continue
		}
		if seen[k.Value] {
			if err := p.fail(p.errf(k.Line, join(field, k.Value), "duplicate field")); err != nil {
				return err
			}
			continue
		}
		seen[k.Value] = true
		if err := p.fail(h(v, join(field, k.Value))); err != nil {
			return err
		}
	}
	return nil
}

func (p *defParser) valueOf(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func (p *defParser) lineOf(n *yaml.Node, key string) int {
	if v := p.valueOf(n, key); v != nil {
		return v.Line
	}
	return n.Line
}

func (p *defParser) seq(n *yaml.Node, field string, each func(*yaml.Node, string) error) error {
	if n.Kind != yaml.SequenceNode {
		if n.Tag == "!!null" {
			return nil
		}
		return p.errf(n.Line, field, "must be a list")
	}
	for i, item := range n.Content {
		if err := p.fail(each(item, fmt.Sprintf("%s[%d]", field, i))); err != nil {
			return err
		}
	}
	return nil
}

func (p *defParser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errf(n.Line, field, "must be a string")
	}
	// A terminal escape in a name or description would act on the
	// terminal of whoever inspects the package.
	if i := strings.IndexFunc(n.Value, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' }); i >= 0 {
		return p.errf(n.Line, field, "holds the control character %q", n.Value[i:i+1])
	}
	*dst = n.Value
	return nil
}

var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,51}[a-z0-9])?$`)

// dnsLabel reads a Kubernetes namespace or Helm release name: a DNS label
// of at most 53 characters (Helm's limit for release names).
func (p *defParser) dnsLabel(n *yaml.Node, field string, dst *string) error {
	if err := p.str(n, field, dst); err != nil {
		return err
	}
	if !labelRE.MatchString(*dst) {
		return p.errf(n.Line, field, "%.64q is not a valid name (lowercase letters, digits and '-', at most 53)", *dst)
	}
	return nil
}

func (p *defParser) boolean(n *yaml.Node, field string, dst *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errf(n.Line, field, "must be true or false")
	}
	return n.Decode(dst)
}
