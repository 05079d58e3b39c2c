package definition

import (
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"
)

// Encoding a definition with gopkg.in/yaml.v3 writes ferry.yaml as Parse
// reads it, fields in the order of docs/definition.md and defaults left
// out: what a converter (artifact/zarf) writes. Line, File and Dir are not
// written; neither are image policies, which MarshalYAML refuses.

// errPoliciesNotWritten is MarshalYAML's error for a definition with
// image policies.
var errPoliciesNotWritten = errors.New("writing a definition's imagePolicies is not supported")

// MarshalYAML writes d with its apiVersion and kind. A definition with
// ImagePolicies is refused.
func (d Definition) MarshalYAML() (any, error) {
	if len(d.ImagePolicies) > 0 {
		return nil, errPoliciesNotWritten
	}
	return struct {
		APIVersion string      `yaml:"apiVersion"`
		Kind       string      `yaml:"kind"`
		Metadata   Metadata    `yaml:"metadata"`
		Platforms  []Platform  `yaml:"platforms,omitempty"`
		SBOM       *SBOM       `yaml:"sbom,omitempty"`
		Verify     string      `yaml:"verify,omitempty"`
		Components []Component `yaml:"components,omitempty"`
	}{APIVersion, Kind, d.Metadata, d.Platforms, sbomOrNil(d.SBOM), d.Verify, d.Components}, nil
}

func sbomOrNil(s SBOM) *SBOM {
	if !s.Disabled && s.Format == "" {
		return nil
	}
	return &s
}

// MarshalYAML writes the `sbom:` section: `enabled: false` when Disabled,
// and the format when set.
func (s SBOM) MarshalYAML() (any, error) {
	var enabled *bool
	if s.Disabled {
		enabled = new(bool)
	}
	return struct {
		Enabled *bool      `yaml:"enabled,omitempty"`
		Format  SBOMFormat `yaml:"format,omitempty"`
	}{enabled, s.Format}, nil
}

// MarshalYAML writes p as os/arch[/variant].
func (p Platform) MarshalYAML() (any, error) { return p.String(), nil }

// MarshalYAML writes an image as its reference alone when nothing else is
// set, else as a mapping.
func (img Image) MarshalYAML() (any, error) {
	if img.Layout == "" && img.Tag == "" && img.Platform == nil && img.Verify == "" {
		return img.Ref, nil
	}
	return struct {
		Ref      string    `yaml:"ref"`
		Layout   string    `yaml:"layout,omitempty"`
		Tag      string    `yaml:"tag,omitempty"`
		Verify   string    `yaml:"verify,omitempty"`
		Platform *Platform `yaml:"platform,omitempty"`
	}{img.Ref, img.Layout, img.Tag, img.Verify, img.Platform}, nil
}

// MarshalYAML writes a file with its mode in octal (0644), as Parse reads
// it.
func (f File) MarshalYAML() (any, error) {
	return struct {
		Source string    `yaml:"source"`
		Target string    `yaml:"target"`
		Mode   yaml.Node `yaml:"mode"`
	}{f.Source, f.Target, yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprintf("0%03o", f.Mode)}}, nil
}

// MarshalYAML writes a repository; history only when it is false (true is
// the default).
func (r Repository) MarshalYAML() (any, error) {
	var history *bool
	if !r.History {
		history = new(bool)
	}
	return struct {
		URL     string `yaml:"url"`
		Path    string `yaml:"path,omitempty"`
		Ref     string `yaml:"ref,omitempty"`
		History *bool  `yaml:"history,omitempty"`
	}{r.URL, r.Path, r.Ref, history}, nil
}
