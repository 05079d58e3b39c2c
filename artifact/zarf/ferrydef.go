package zarf

import (
	"bytes"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// ferryDef is the ferry.yaml Convert writes: the definition, and the
// header comments saying where it came from.
type ferryDef struct {
	definition.Definition

	source   string
	comments []string
}

// encode writes the definition with a header saying where it came from.
// Each component is encoded on its own, its lines indented as the list's
// items: yaml.v3's encoder holds every event of a document until its end
// (about 8 KiB a component), so one document of MaxComponents components
// would hold tens of MiB.
func (d *ferryDef) encode() ([]byte, error) {
	top := *d
	top.Components = nil
	var n yaml.Node
	if err := n.Encode(&top); err != nil {
		return nil, err
	}
	head := []string{"Converted from " + d.source + " by `ferry package convert`: read its report of what ferry does differently."}
	head = append(head, d.comments...)
	n.HeadComment = strings.Join(head, "\n")
	out, err := encodeYAML(&n)
	if err != nil || len(d.Components) == 0 {
		return out, err
	}
	out = append(out, "components:\n"...)
	for i := range d.Components {
		item, err := encodeYAML([]definition.Component{d.Components[i]})
		if err != nil {
			return nil, err
		}
		for len(item) > 0 {
			line, rest, _ := bytes.Cut(item, []byte("\n"))
			if len(line) > 0 {
				out = append(out, "  "...)
			}
			out = append(append(out, line...), '\n')
			item = rest
		}
	}
	return out, nil
}

func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
