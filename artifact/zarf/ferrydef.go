package zarf

import (
	"bytes"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// ferryDef is the ferry.yaml Convert writes, its fields in the order of
// docs/definition.md.
type ferryDef struct {
	APIVersion string      `yaml:"apiVersion"`
	Kind       string      `yaml:"kind"`
	Metadata   ferryMeta   `yaml:"metadata"`
	Platforms  []string    `yaml:"platforms,omitempty"`
	Components []ferryComp `yaml:"components,omitempty"`

	source   string
	comments []string
}

type ferryMeta struct {
	Name        string `yaml:"name"`
	Version     string `yaml:"version"`
	Description string `yaml:"description,omitempty"`
}

type ferryComp struct {
	Name         string          `yaml:"name"`
	Description  string          `yaml:"description,omitempty"`
	Required     *bool           `yaml:"required,omitempty"`
	Images       []any           `yaml:"images,omitempty"`
	Charts       []ferryChart    `yaml:"charts,omitempty"`
	Manifests    []ferryManifest `yaml:"manifests,omitempty"`
	Files        []ferryFile     `yaml:"files,omitempty"`
	Repositories []ferryRepo     `yaml:"repositories,omitempty"`
}

// ferryImage is an image of a local OCI layout.
type ferryImage struct {
	Ref    string `yaml:"ref"`
	Layout string `yaml:"layout"`
}

type ferryChart struct {
	Path        string `yaml:"path,omitempty"`
	URL         string `yaml:"url,omitempty"`
	Version     string `yaml:"version,omitempty"`
	Namespace   string `yaml:"namespace,omitempty"`
	ReleaseName string `yaml:"releaseName,omitempty"`
}

type ferryManifest struct {
	Name      string   `yaml:"name"`
	Namespace string   `yaml:"namespace,omitempty"`
	Files     []string `yaml:"files"`
}

type ferryFile struct {
	Source string   `yaml:"source"`
	Target string   `yaml:"target"`
	Mode   fileMode `yaml:"mode"`
}

type ferryRepo struct {
	URL  string `yaml:"url"`
	Path string `yaml:"path,omitempty"`
	Ref  string `yaml:"ref,omitempty"`
}

// fileMode is written in octal, as ferry.yaml reads it (0644).
type fileMode int32

func (m fileMode) MarshalYAML() (any, error) {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprintf("0%03o", int32(m))}, nil
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
		item, err := encodeYAML([]ferryComp{d.Components[i]})
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
