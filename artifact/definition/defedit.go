package definition

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/confine"
)

// AddImages returns the ferry.yaml content data (file names it
// in errors) with images added to the `images:` list of components, by
// component name, after the images already listed (a list is made where
// there is none). The rest of the document is kept: comments, the order of
// fields and items, quoting; it is re-indented as its `metadata:` fields
// are. An image already listed (in any spelling), and a component with no
// image to add, are left alone; a component the definition does not have
// is an error, and so is a result that is not a valid definition.
func AddImages(file string, data []byte, images map[string][]string) ([]byte, error) {
	if _, err := Parse(file, data); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	p := &defParser{file: file}
	root := doc.Content[0]
	comps := p.valueOf(root, "components")
	names := make([]string, 0, len(images))
	for name := range images {
		names = append(names, name)
	}
	sort.Strings(names)
	changed := false
	for _, name := range names {
		var comp *yaml.Node
		if comps != nil && comps.Kind == yaml.SequenceNode {
			i := slices.IndexFunc(comps.Content, func(c *yaml.Node) bool {
				n := p.valueOf(c, "name")
				return n != nil && n.Value == name
			})
			if i >= 0 {
				comp = comps.Content[i]
			}
		}
		if comp == nil {
			return nil, &Error{File: file, Field: "components", Msg: fmt.Sprintf("no component %q", name)}
		}
		changed = addImages(p, comp, images[name]) || changed
	}
	if !changed {
		return data, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(indentOf(root))
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if _, err := Parse(file, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("the edited definition: %w", err)
	}
	return buf.Bytes(), nil
}

// addImages appends refs to the `images:` list of the component mapping
// comp, but those it lists already, and reports whether it added any.
func addImages(p *defParser, comp *yaml.Node, refs []string) bool {
	list := p.valueOf(comp, "images")
	var listed []string
	if list != nil {
		for _, item := range list.Content {
			ref := item.Value
			if item.Kind == yaml.MappingNode {
				if r := p.valueOf(item, "ref"); r != nil {
					ref = r.Value
				}
			}
			if norm, err := NormalizeImageRef(ref); err == nil {
				listed = append(listed, norm)
			}
		}
	}
	var add []*yaml.Node
	for _, ref := range refs {
		if slices.ContainsFunc(listed, func(l string) bool { return SameImage(l, ref) }) {
			continue
		}
		listed = append(listed, ref)
		add = append(add, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ref})
	}
	if len(add) == 0 {
		return false
	}
	if list == nil {
		// After the fields that describe the component, before what it
		// carries.
		at := len(comp.Content)
		for i := 0; i+1 < len(comp.Content); i += 2 {
			switch comp.Content[i].Value {
			case "charts", "manifests", "files", "repositories", "advisories":
				at = min(at, i)
			}
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "images"}
		list = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		comp.Content = slices.Insert(comp.Content, at, key, list)
	}
	if list.Kind != yaml.SequenceNode { // `images:` with no value
		*list = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", HeadComment: list.HeadComment, LineComment: list.LineComment}
	}
	list.Content = append(list.Content, add...)
	return true
}

// indentOf is how many spaces the definition indents a nested mapping by
// (its metadata's), 2 when that cannot be told.
func indentOf(root *yaml.Node) int {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 {
			if n := v.Content[0].Column - k.Column; n >= 2 && n <= 8 {
				return n
			}
		}
	}
	return 2
}

// AddImagesToFile adds images to the definition file at path (a
// ferry.yaml, or a folder holding one) as AddImages does, and
// writes it back atomically with its mode, if anything was added: on any
// error the file is left as it was. A link is written through to its target.
func AddImagesToFile(path string, images map[string][]string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, FileName)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("read definition: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("read definition: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return errors.New(path + " is not a regular file")
	}
	data, err := confine.ReadPath(real, MaxSize)
	if err != nil {
		return fmt.Errorf("read definition: %w", err)
	}
	out, err := AddImages(path, data, images)
	if err != nil || bytes.Equal(out, data) {
		return err
	}
	_, err = atomicfile.Write(real, fi.Mode().Perm(), func(w io.Writer) error {
		_, err := w.Write(out)
		return err
	})
	return err
}
