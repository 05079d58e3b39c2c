package zarf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// object is one mapping of zarf.yaml whose keys were checked against the
// fields Zarf v0.60.0 knows for it: an unknown key is a gap, never ignored.
type object struct {
	n     *yaml.Node
	field string
	keys  map[string]*yaml.Node
	vals  map[string]*yaml.Node
	order []string
}

// object reads n as a mapping of the fields Zarf v0.60.0 knows for its
// type (knownFields): an unknown one is a gap (Zarf's own schema refuses
// it), a repeated one an error. Aliases and merge keys (<<: *anchor) are
// followed; x- fields, which Zarf's schema allows everywhere for anchors
// and gives no meaning, are skipped.
func (c *converter) object(n *yaml.Node, field, typ string) (*object, error) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return nil, c.errf(n.Line, field, "must be a mapping")
	}
	known, ok := knownFields[typ]
	if !ok {
		panic("zarf: no fields for " + typ)
	}
	o := &object{n: n, field: field, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	merged := map[string]bool{}
	var add func(n *yaml.Node, fromMerge bool) error
	add = func(n *yaml.Node, fromMerge bool) error {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], deref(n.Content[i+1])
			if k.Value == "<<" && k.Tag == "!!merge" {
				srcs := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					srcs = v.Content
				}
				for _, src := range srcs {
					if src = deref(src); src.Kind == yaml.MappingNode {
						if err := add(src, true); err != nil {
							return err
						}
					}
				}
				continue
			}
			f := join(field, k.Value)
			if _, dup := o.keys[k.Value]; dup {
				if fromMerge {
					continue // the mapping's own field wins over a merged one
				}
				if !merged[k.Value] {
					return c.errf(k.Line, f, "duplicate field")
				}
			}
			if strings.HasPrefix(k.Value, "x-") {
				continue
			}
			if !slices.Contains(known, k.Value) {
				c.gap(k.Line, f, "unknown field (Zarf v0.60.0's schema has none of this name)", "not converted: remove it or say what it means")
				continue
			}
			if _, seen := o.keys[k.Value]; !seen {
				o.order = append(o.order, k.Value)
			}
			o.keys[k.Value], o.vals[k.Value] = k, v
			merged[k.Value] = fromMerge
		}
		return nil
	}
	if err := add(n, false); err != nil {
		return nil, err
	}
	return o, nil
}

// deref follows YAML aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func join(parent, key string) string {
	if parent == "" {
		return yamlbound.Key(key)
	}
	return parent + "." + yamlbound.Key(key)
}

func (o *object) has(key string) bool { _, ok := o.vals[key]; return ok }

// line is the line of key, or of the mapping when it is absent.
func (o *object) line(key string) int {
	if k, ok := o.keys[key]; ok {
		return k.Line
	}
	return o.n.Line
}

func (o *object) f(key string) string { return join(o.field, key) }

// isZero reports whether key is absent or holds its zero value (false, 0,
// "", an empty list or mapping): Zarf's omitempty fields that say nothing.
func (o *object) isZero(key string) bool {
	v, ok := o.vals[key]
	if !ok {
		return true
	}
	switch v.Kind {
	case yaml.ScalarNode:
		return v.Tag == "!!null" || v.Value == "" || v.Value == "false" || v.Value == "0"
	case yaml.SequenceNode, yaml.MappingNode:
		return len(v.Content) == 0
	}
	return false
}

func (c *converter) str(o *object, key string) (string, error) {
	v, ok := o.vals[key]
	if !ok || v.Tag == "!!null" {
		return "", nil
	}
	if v.Kind != yaml.ScalarNode {
		return "", c.errf(v.Line, o.f(key), "must be a string")
	}
	return v.Value, nil
}

func (c *converter) boolean(o *object, key string) (*bool, error) {
	v, ok := o.vals[key]
	if !ok || v.Tag == "!!null" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		return nil, c.errf(v.Line, o.f(key), "must be true or false")
	}
	return &b, nil
}

// list calls each for every item of the sequence at key.
func (c *converter) list(o *object, key string, each func(item *yaml.Node, field string) error) error {
	v, ok := o.vals[key]
	if !ok || v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		return c.errf(v.Line, o.f(key), "must be a list")
	}
	for i, item := range v.Content {
		if err := each(deref(item), fmt.Sprintf("%s[%d]", o.f(key), i)); err != nil {
			return err
		}
	}
	return nil
}

// strs reads a list of strings.
func (c *converter) strs(o *object, key string) ([]string, []int, error) {
	var out []string
	var lines []int
	err := c.list(o, key, func(item *yaml.Node, f string) error {
		if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
			return c.errf(item.Line, f, "must be a string")
		}
		out = append(out, item.Value)
		lines = append(lines, item.Line)
		return nil
	})
	return out, lines, err
}

func (c *converter) errf(line int, field, format string, args ...any) error {
	return &definition.Error{File: c.shown, Line: line, Field: clip(field), Msg: clipLine(fmt.Sprintf(format, args...))}
}
