package build

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/podspec"
)

// scan gathers what the objects of a component hold: its images, the
// image-like strings found elsewhere (maybe images), and the known
// placeholders written where an image goes.
type scan struct {
	images, maybe, placeholders imageSet
	parsed                      map[string]parsed
	// parsedBytes counts the bytes of distinct words parsed;
	// maybeLimited says that the scan stopped looking for maybe images,
	// past MaxMaybe of them or maxParsedBytes.
	parsedBytes  int
	maybeLimited bool
}

func newScan() *scan {
	return &scan{images: imageSet{}, maybe: imageSet{}, placeholders: imageSet{}, parsed: map[string]parsed{}}
}

// image adds an image found in an image field, or a placeholder.
func (s *scan) image(ref, where string, test bool) {
	if Placeholders[ref] != "" {
		s.placeholders.add(ref, where, test)
		return
	}
	s.images.add(ref, where, test)
}

// imageSet gathers the images found, by normalized reference.
type imageSet map[string]*foundUse

// foundUse is where an image is used, and whether anything but a test
// hook uses it.
type foundUse struct {
	where   map[string]bool
	notTest bool
}

func (s imageSet) add(ref, where string, test bool) {
	u := s[ref]
	if u == nil {
		u = &foundUse{where: map[string]bool{}}
		s[ref] = u
	}
	u.where[where] = true
	u.notTest = u.notTest || !test
}

// sorted lists where an image is used, sorted.
func (u *foundUse) sorted() []string {
	where := make([]string, 0, len(u.where))
	for w := range u.where {
		where = append(where, w)
	}
	sort.Strings(where)
	return where
}

// scanManifests adds what every object of m holds to found; what names
// where m comes from ("chart kyverno", "manifests web") in found's records
// and in errors, which name the template or file too.
func scanManifests(m RenderedManifest, what string, found *scan) error {
	source := m.Source
	var doc bytes.Buffer
	flush := func() error {
		defer doc.Reset()
		var obj any
		if err := yaml.Unmarshal(doc.Bytes(), &obj); err != nil {
			return fmt.Errorf("%s: invalid YAML: %s", source, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if obj == nil {
			return nil
		}
		o, ok := obj.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: a document is not a Kubernetes object", source)
		}
		return scanObject(o, what, source, m.Test, found)
	}
	sc := bufio.NewScanner(bytes.NewReader(m.Data))
	sc.Buffer(nil, artifact.MaxManifestBundleSize+1)
	for sc.Scan() {
		line := sc.Text()
		if line == "---" || strings.HasPrefix(line, "--- ") {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		if s, ok := strings.CutPrefix(line, "# Source: "); ok && doc.Len() == 0 {
			source = s
		}
		doc.WriteString(line)
		doc.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	return flush()
}

// scanObject adds the images one object uses to found, and unless it is a
// test hook, its maybe images.
func scanObject(obj map[string]any, what, source string, test bool, found *scan) error {
	kind, _ := obj["kind"].(string)
	name := kind
	if md, ok := obj["metadata"].(map[string]any); ok && md["name"] != nil {
		name = fmt.Sprintf("%s %v", kind, md["name"])
	}
	where := what + ": " + name
	switch {
	case kind == "CustomResourceDefinition":
		// Its schema names fields `image`; it runs nothing.
		return nil
	case strings.HasSuffix(kind, "List") && obj["items"] != nil:
		items, _ := obj["items"].([]any)
		for _, it := range items {
			if o, ok := it.(map[string]any); ok {
				if err := scanObject(o, what, source, test, found); err != nil {
					return err
				}
			}
		}
		return nil
	case podspec.IsWorkload(kind):
		for _, c := range podspec.Containers(podspec.Of(obj)) {
			image := c.Image()
			if image == "" {
				continue
			}
			ref, err := definition.NormalizeImageRef(image)
			if err != nil {
				return fmt.Errorf("%s: %s: %s[%d]: %w", source, name, c.Field, c.Index, err)
			}
			found.image(ref, where, test)
		}
		if !test {
			found.maybeObject(obj, kind, where)
		}
		return nil
	}
	if !test {
		found.maybeObject(obj, kind, where)
	}
	for k, v := range obj {
		if k != "metadata" {
			scanImageFields(v, where, test, found)
		}
	}
	return nil
}

// scanImageFields adds the values of the string fields named `image`
// inside v that read as image references: with a registry or path, a tag
// or a digest (a bare word is too often something else).
func scanImageFields(v any, where string, test bool, found *scan) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "image" {
				if strings.ContainsAny(s, "/:@") {
					if ref, err := definition.NormalizeImageRef(s); err == nil {
						found.image(ref, where, test)
					}
				}
				continue
			}
			scanImageFields(e, where, test, found)
		}
	case []any:
		for _, e := range v {
			scanImageFields(e, where, test, found)
		}
	}
}

// compareImages compares the images found with those a component lists.
// A listed image that matches a maybe image is present, and among the
// images; the other maybe images, and the placeholders, are reported
// apart.
func compareImages(component string, listed []string, found *scan) ComponentImages {
	c := ComponentImages{Name: component, Images: []FoundImage{}, Missing: []string{}, Unused: []string{}, Present: []string{}, Test: []string{},
		Maybe: []FoundImage{}, Placeholders: []Placeholder{}, MaybeLimited: found.maybeLimited}
	used := make([]bool, len(listed))
	for ref, u := range found.maybe {
		if found.images[ref] != nil {
			continue
		}
		matched := false
		for i, l := range listed {
			if definition.SameImage(l, ref) {
				used[i], matched = true, true
			}
		}
		if matched {
			c.Images = append(c.Images, FoundImage{Ref: ref, Maybe: true, Where: u.sorted()})
		} else {
			c.Maybe = append(c.Maybe, FoundImage{Ref: ref, Where: u.sorted()})
		}
	}
	for ref, u := range found.placeholders {
		c.Placeholders = append(c.Placeholders, Placeholder{Ref: ref, Why: Placeholders[ref], Where: u.sorted()})
	}
	for ref, u := range found.images {
		c.Images = append(c.Images, FoundImage{Ref: ref, Test: !u.notTest, Where: u.sorted()})
		matched := false
		for i, l := range listed {
			if definition.SameImage(l, ref) {
				used[i], matched = true, true
			}
		}
		switch {
		case matched:
		case u.notTest:
			c.Missing = append(c.Missing, ref)
		default:
			c.Test = append(c.Test, ref)
		}
	}
	seen := map[string]bool{}
	for i, l := range listed {
		switch {
		case seen[l]:
		case used[i]:
			c.Present = append(c.Present, l)
		default:
			c.Unused = append(c.Unused, l)
		}
		seen[l] = true
	}
	for _, l := range [][]FoundImage{c.Images, c.Maybe} {
		sort.Slice(l, func(i, j int) bool { return l[i].Ref < l[j].Ref })
	}
	sort.Slice(c.Placeholders, func(i, j int) bool { return c.Placeholders[i].Ref < c.Placeholders[j].Ref })
	for _, s := range [][]string{c.Missing, c.Unused, c.Present, c.Test} {
		sort.Strings(s)
	}
	return c
}
