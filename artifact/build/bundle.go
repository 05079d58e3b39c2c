package build

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// manifestBundle joins a manifest entry's YAML files (folders walked in
// lexical order, links followed inside the definition's folder) into one
// multi-document stream, checking each parses; together they are at most
// MaxManifestBundleSize bytes.
func manifestBundle(f *definition.Folder, md definition.Manifest) ([]byte, []string, error) {
	var buf bytes.Buffer
	var names []string
	for _, rel := range md.Files {
		fi, err := f.Stat(rel)
		if err != nil {
			return nil, nil, err
		}
		var paths []string
		if fi.IsDir() {
			top, _ := f.CleanPath(rel)
			err := fs.WalkDir(f.FS(), top, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".json")) {
					if len(names)+len(paths) >= artifact.MaxManifestFiles {
						return fmt.Errorf("%s: more than %d manifest files in one manifests entry", rel, artifact.MaxManifestFiles)
					}
					paths = append(paths, p)
				}
				return nil
			})
			if err != nil {
				return nil, nil, err
			}
			sort.Strings(paths)
			if len(paths) == 0 {
				return nil, nil, fmt.Errorf("folder %s holds no .yaml, .yml or .json file", rel)
			}
		} else {
			n, _ := f.CleanPath(rel)
			paths = []string{n}
		}
		for _, p := range paths {
			data, err := f.ReadFile(p, artifact.MaxManifestBundleSize)
			if err != nil {
				return nil, nil, err
			}
			if err := checkYAMLStream(data); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", p, err)
			}
			names = append(names, p)
			fmt.Fprintf(&buf, "---\n# Source: %s\n", p)
			buf.Write(bytes.TrimSuffix(data, []byte("\n")))
			buf.WriteByte('\n')
			if buf.Len() > artifact.MaxManifestBundleSize {
				return nil, nil, fmt.Errorf("the manifests add up to more than %d bytes", artifact.MaxManifestBundleSize)
			}
		}
	}
	return buf.Bytes(), names, nil
}

// checkYAMLStream parses every document of a YAML stream and requires each
// non-empty one to be a Kubernetes object (a mapping with apiVersion and kind).
func checkYAMLStream(data []byte) error {
	if err := yamlbound.Check(data, artifact.MaxManifestNodes); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue
		}
		obj := doc.Content[0]
		var apiVersion, kind bool
		if obj.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(obj.Content); j += 2 {
				apiVersion = apiVersion || obj.Content[j].Value == "apiVersion"
				kind = kind || obj.Content[j].Value == "kind"
			}
		}
		if !apiVersion || !kind {
			return fmt.Errorf("line %d: document %d is not a Kubernetes object (no apiVersion/kind)", obj.Line, i+1)
		}
	}
}
