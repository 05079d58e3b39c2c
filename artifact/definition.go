package artifact

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/internal/redact"
)

// DefinitionFileName is the file a package definition folder holds.
const DefinitionFileName = "ferry.yaml"

// APIVersion and Kind are the only accepted header values of a definition.
const (
	APIVersion     = "ferry.dev/v1alpha1"
	DefinitionKind = "Package"
)

// Definition is a parsed, validated ferry.yaml.
type Definition struct {
	// File is the definition's path as given; Dir is the folder relative paths
	// are resolved against.
	File, Dir  string
	Metadata   Metadata
	Platforms  []Platform
	Components []ComponentDef
	// SBOM says whether and how create makes SBOMs (top-level `sbom:`).
	SBOM SBOMDef
}

// SBOMDef is the definition's `sbom:` section. The zero value makes SPDX
// SBOMs (when create is given an SBOMGenerator).
type SBOMDef struct {
	// Disabled is `enabled: false`.
	Disabled bool
	// Format is the document format; "" is SBOMFormatSPDX.
	Format SBOMFormat
	Line   int
}

// Metadata names and describes a package.
type Metadata struct {
	Name, Version, Description string
}

// ComponentDef is one component of a definition.
type ComponentDef struct {
	Name, Description string
	Required          bool
	Images            []ImageDef
	Charts            []ChartDef
	Manifests         []ManifestDef
	Files             []FileDef
	Repositories      []RepositoryDef
}

// RepositoryDef is a git repository to carry at one commit. URL is its
// identity (what GitRepository and Argo CD Application objects name):
// https://, http://, ssh:// or scp-like git@host:path; it is cloned
// unless Path names a local clone (inside the definition's folder) to
// read instead. Ref is a branch, a tag, a full ref or a full 40-hex
// commit (the remote's HEAD when empty); create resolves it once. History
// (default true) carries every commit up to it too, as a git bundle, so
// that the in-cluster git server can serve it.
type RepositoryDef struct {
	URL, Path, Ref string
	History        bool
	Line           int
}

// ImageDef is an image source: a registry reference, or (with Layout) a
// manifest inside a local OCI layout directory found by Tag.
type ImageDef struct {
	// Ref is the normalized original reference, e.g. docker.io/library/nginx:1.27.
	Ref string
	// Layout is the OCI layout directory, relative to the definition; empty
	// for a registry source.
	Layout string
	// Tag is the name of the image inside Layout (its ref.name); defaults to
	// Ref's tag or digest.
	Tag string
	// Platform, when set, says which platform a single-platform image is
	// for when its config does not (an image config with no os or
	// architecture); a config that names another platform is an error.
	Platform *Platform
	Line     int
}

// ChartDef is a Helm chart source: a chart folder or .tgz (Path), or an OCI
// registry (URL oci://… with Version).
type ChartDef struct {
	Path, URL, Version string
	// Namespace and ReleaseName say where deploy installs the chart: the
	// namespace "default" and the chart's name when empty.
	Namespace, ReleaseName string
	Line                   int
}

// ManifestDef is a bundle of Kubernetes manifests: YAML files and folders.
type ManifestDef struct {
	Name      string
	Namespace string
	Files     []string
	Line      int
}

// FileDef is a plain file carried to Target.
type FileDef struct {
	Source, Target string
	Mode           int64
	Line           int
}

// Platform is an os/architecture[/variant] triple.
type Platform struct {
	OS, Architecture, Variant string
}

// String formats p as os/arch[/variant].
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform parses os/arch[/variant].
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("invalid platform %q: want os/arch[/variant]", s)
	}
	p := Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

// HostPlatform is the platform ferry runs on, the default of `platforms:`.
func HostPlatform() Platform {
	return Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// DefinitionError is a problem in a definition, located by file, line and field.
type DefinitionError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *DefinitionError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return loc + ": " + e.Field + ": " + e.Msg
	}
	return loc + ": " + e.Msg
}

// LoadDefinition reads and validates a definition from a ferry.yaml file or
// a folder holding one.
func LoadDefinition(path string) (*Definition, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, DefinitionFileName)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read definition: %w", err)
	}
	return ParseDefinition(path, data)
}

// ParseDefinition parses and validates ferry.yaml content. file names the
// definition in errors; relative paths resolve against its folder.
func ParseDefinition(file string, data []byte) (*Definition, error) {
	p := &defParser{file: file}
	def := &Definition{File: file, Dir: filepath.Dir(file)}
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		return nil, p.yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errf(extra.Line, "", "more than one YAML document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errf(doc.Line, "", "empty definition")
	}
	root := doc.Content[0]
	var apiVersion, kind string
	seen := map[string]bool{}
	err := p.mapping(root, "", map[string]func(*yaml.Node, string) error{
		"apiVersion": func(n *yaml.Node, f string) error { return p.str(n, f, &apiVersion) },
		"kind":       func(n *yaml.Node, f string) error { return p.str(n, f, &kind) },
		"metadata": func(n *yaml.Node, f string) error {
			seen["metadata"] = true
			return p.metadata(n, f, &def.Metadata)
		},
		"platforms": func(n *yaml.Node, f string) error { return p.platforms(n, f, &def.Platforms) },
		"sbom":      func(n *yaml.Node, f string) error { return p.sbom(n, f, &def.SBOM) },
		"components": func(n *yaml.Node, f string) error {
			return p.seq(n, f, func(item *yaml.Node, f string) error {
				c, err := p.component(item, f)
				if err == nil {
					def.Components = append(def.Components, c)
				}
				return err
			})
		},
	})
	if err != nil {
		return nil, err
	}
	if apiVersion != APIVersion {
		return nil, p.errf(p.lineOf(root, "apiVersion"), "apiVersion", "must be %q, got %q", APIVersion, apiVersion)
	}
	if kind != DefinitionKind {
		return nil, p.errf(p.lineOf(root, "kind"), "kind", "must be %q, got %q", DefinitionKind, kind)
	}
	if !seen["metadata"] {
		return nil, p.errf(root.Line, "metadata", "missing")
	}
	if len(def.Platforms) == 0 {
		def.Platforms = []Platform{HostPlatform()}
	}
	names := map[string]int{}
	for i, c := range def.Components {
		line := root.Line
		if n := p.valueOf(root, "components"); n != nil && i < len(n.Content) {
			line = n.Content[i].Line
		}
		if prev, dup := names[c.Name]; dup {
			return nil, p.errf(line, fmt.Sprintf("components[%d].name", i), "duplicate component name %q (also components[%d])", c.Name, prev)
		}
		names[c.Name] = i
	}
	return def, nil
}

type defParser struct{ file string }

func (p *defParser) errf(line int, field, format string, args ...any) error {
	return &DefinitionError{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
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

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// mapping walks a mapping node, calling the handler of each key and
// rejecting unknown and duplicate keys.
func (p *defParser) mapping(n *yaml.Node, field string, handlers map[string]func(*yaml.Node, string) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errf(n.Line, field, "must be a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			return p.errf(k.Line, join(field, k.Value), "unknown field")
		}
		if seen[k.Value] {
			return p.errf(k.Line, join(field, k.Value), "duplicate field")
		}
		seen[k.Value] = true
		if err := h(v, join(field, k.Value)); err != nil {
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
		if err := each(item, fmt.Sprintf("%s[%d]", field, i)); err != nil {
			return err
		}
	}
	return nil
}

func (p *defParser) str(n *yaml.Node, field string, dst *string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return p.errf(n.Line, field, "must be a string")
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
		return p.errf(n.Line, field, "%q is not a valid name (lowercase letters, digits and '-', at most 53)", *dst)
	}
	return nil
}

func (p *defParser) boolean(n *yaml.Node, field string, dst *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errf(n.Line, field, "must be true or false")
	}
	return n.Decode(dst)
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$`)
)

func (p *defParser) metadata(n *yaml.Node, field string, md *Metadata) error {
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":        func(v *yaml.Node, f string) error { return p.str(v, f, &md.Name) },
		"version":     func(v *yaml.Node, f string) error { return p.str(v, f, &md.Version) },
		"description": func(v *yaml.Node, f string) error { return p.str(v, f, &md.Description) },
	})
	if err != nil {
		return err
	}
	switch {
	case md.Name == "":
		return p.errf(n.Line, join(field, "name"), "missing")
	case !nameRE.MatchString(md.Name):
		return p.errf(p.lineOf(n, "name"), join(field, "name"), "%q is not a valid name (lowercase letters, digits, '-' and '.')", md.Name)
	case md.Version == "":
		return p.errf(n.Line, join(field, "version"), "missing")
	case !versionRE.MatchString(md.Version):
		return p.errf(p.lineOf(n, "version"), join(field, "version"), "%q is not a valid version (it must be usable as an OCI tag)", md.Version)
	}
	return nil
}

func (p *defParser) platforms(n *yaml.Node, field string, dst *[]Platform) error {
	seen := map[string]bool{}
	return p.seq(n, field, func(item *yaml.Node, f string) error {
		var s string
		if err := p.str(item, f, &s); err != nil {
			return err
		}
		pl, err := ParsePlatform(s)
		if err != nil {
			return p.errf(item.Line, f, "%v", err)
		}
		if seen[pl.String()] {
			return p.errf(item.Line, f, "duplicate platform %q", s)
		}
		seen[pl.String()] = true
		*dst = append(*dst, pl)
		return nil
	})
}

func (p *defParser) component(n *yaml.Node, field string) (ComponentDef, error) {
	c := ComponentDef{Required: true}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":        func(v *yaml.Node, f string) error { return p.str(v, f, &c.Name) },
		"description": func(v *yaml.Node, f string) error { return p.str(v, f, &c.Description) },
		"required":    func(v *yaml.Node, f string) error { return p.boolean(v, f, &c.Required) },
		"images": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				img, err := p.image(item, f)
				c.Images = append(c.Images, img)
				return err
			})
		},
		"charts": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				ch, err := p.chart(item, f)
				c.Charts = append(c.Charts, ch)
				return err
			})
		},
		"manifests": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				m, err := p.manifest(item, f)
				c.Manifests = append(c.Manifests, m)
				return err
			})
		},
		"files": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				fd, err := p.fileDef(item, f)
				c.Files = append(c.Files, fd)
				return err
			})
		},
		"repositories": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				rd, err := p.repository(item, f)
				c.Repositories = append(c.Repositories, rd)
				return err
			})
		},
	})
	if err != nil {
		return c, err
	}
	if c.Name == "" {
		return c, p.errf(n.Line, join(field, "name"), "missing")
	}
	if !nameRE.MatchString(c.Name) {
		return c, p.errf(p.lineOf(n, "name"), join(field, "name"), "%q is not a valid component name (lowercase letters, digits, '-' and '.')", c.Name)
	}
	return c, nil
}

// NormalizeImageRef turns a docker-style reference (nginx:1.27) into its full
// form (docker.io/library/nginx:1.27). A reference without tag or digest
// gets ":latest".
func NormalizeImageRef(s string) (string, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return "", fmt.Errorf("invalid image reference %q", s)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", s, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

func (p *defParser) image(n *yaml.Node, field string) (ImageDef, error) {
	img := ImageDef{Line: n.Line}
	var ref string
	if n.Kind == yaml.ScalarNode {
		if err := p.str(n, field, &ref); err != nil {
			return img, err
		}
	} else {
		err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
			"ref":    func(v *yaml.Node, f string) error { return p.str(v, f, &ref) },
			"layout": func(v *yaml.Node, f string) error { return p.path(v, f, &img.Layout) },
			"tag":    func(v *yaml.Node, f string) error { return p.str(v, f, &img.Tag) },
			"platform": func(v *yaml.Node, f string) error {
				var s string
				if err := p.str(v, f, &s); err != nil {
					return err
				}
				pl, err := ParsePlatform(s)
				if err != nil {
					return p.errf(v.Line, f, "%v", err)
				}
				img.Platform = &pl
				return nil
			},
		})
		if err != nil {
			return img, err
		}
		if ref == "" {
			return img, p.errf(n.Line, join(field, "ref"), "missing")
		}
		if img.Tag != "" && img.Layout == "" {
			return img, p.errf(p.lineOf(n, "tag"), join(field, "tag"), "only valid with layout")
		}
	}
	norm, err := NormalizeImageRef(ref)
	if err != nil {
		return img, p.errf(n.Line, field, "%v", err)
	}
	img.Ref = norm
	if img.Layout != "" && img.Tag == "" {
		named, _ := reference.ParseNormalizedNamed(norm)
		switch r := named.(type) {
		case reference.Digested:
			img.Tag = r.Digest().String()
		case reference.Tagged:
			img.Tag = r.Tag()
		}
	}
	return img, nil
}

func (p *defParser) chart(n *yaml.Node, field string) (ChartDef, error) {
	ch := ChartDef{Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"path":    func(v *yaml.Node, f string) error { return p.path(v, f, &ch.Path) },
		"url":     func(v *yaml.Node, f string) error { return p.str(v, f, &ch.URL) },
		"version": func(v *yaml.Node, f string) error { return p.str(v, f, &ch.Version) },
		"namespace": func(v *yaml.Node, f string) error {
			return p.dnsLabel(v, f, &ch.Namespace)
		},
		"releaseName": func(v *yaml.Node, f string) error {
			return p.dnsLabel(v, f, &ch.ReleaseName)
		},
	})
	if err != nil {
		return ch, err
	}
	switch {
	case ch.Path == "" && ch.URL == "":
		return ch, p.errf(n.Line, field, "needs a path (chart folder or .tgz) or a url (oci://…)")
	case ch.Path != "" && ch.URL != "":
		return ch, p.errf(n.Line, field, "path and url are exclusive")
	case ch.URL != "":
		if !strings.HasPrefix(ch.URL, "oci://") {
			return ch, p.errf(p.lineOf(n, "url"), join(field, "url"), "unsupported chart source %q: only oci:// URLs", ch.URL)
		}
		rest := strings.TrimPrefix(ch.URL, "oci://")
		if _, err := reference.ParseNamed(rest); err != nil || strings.ContainsAny(rest, "@") {
			return ch, p.errf(p.lineOf(n, "url"), join(field, "url"), "invalid chart URL %q: want oci://host/path/chart", ch.URL)
		}
		if ch.Version == "" {
			return ch, p.errf(n.Line, join(field, "version"), "missing (required with url)")
		}
	case ch.Version != "":
		return ch, p.errf(p.lineOf(n, "version"), join(field, "version"), "only valid with url (a local chart carries its version)")
	}
	return ch, nil
}

// gitURL matches the URL forms git itself clones (besides local paths).
// A query or fragment names no repository (and a token there would end up
// in the package): none is accepted.
var gitURL = regexp.MustCompile(`^((https?|ssh|git)://[^/?#]+/[^?#]*[^/?#]|[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:[^/?#][^?#]*|[A-Za-z0-9.-]+\.[A-Za-z]+:[^/?#][^?#]*)$`)

func (p *defParser) repository(n *yaml.Node, field string) (RepositoryDef, error) {
	rd := RepositoryDef{Line: n.Line, History: true}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"url":     func(v *yaml.Node, f string) error { return p.str(v, f, &rd.URL) },
		"path":    func(v *yaml.Node, f string) error { return p.path(v, f, &rd.Path) },
		"ref":     func(v *yaml.Node, f string) error { return p.str(v, f, &rd.Ref) },
		"history": func(v *yaml.Node, f string) error { return p.boolean(v, f, &rd.History) },
	})
	if err != nil {
		return rd, err
	}
	switch {
	case rd.URL == "":
		return rd, p.errf(n.Line, join(field, "url"), "missing: the repository's URL is its identity in the cluster (add path to read a local clone)")
	case !gitURL.MatchString(rd.URL):
		return rd, p.errf(p.lineOf(n, "url"), join(field, "url"), "%q is not a git URL (https://, http://, ssh://, git:// or user@host:path, without a query or fragment)", redact.URL(rd.URL))
	case strings.ContainsAny(rd.Ref, " \t~^:?*[\\") || strings.Contains(rd.Ref, ".."):
		return rd, p.errf(p.lineOf(n, "ref"), join(field, "ref"), "%q is not a branch, tag, ref or commit", rd.Ref)
	}
	if u, err := url.Parse(rd.URL); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return rd, p.errf(p.lineOf(n, "url"), join(field, "url"), "%s carries a password: credentials belong to git's credential helpers or ~/.netrc, never to a package", redact.URL(rd.URL))
		}
	}
	return rd, nil
}

func (p *defParser) manifest(n *yaml.Node, field string) (ManifestDef, error) {
	m := ManifestDef{Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":      func(v *yaml.Node, f string) error { return p.str(v, f, &m.Name) },
		"namespace": func(v *yaml.Node, f string) error { return p.str(v, f, &m.Namespace) },
		"files": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				var s string
				err := p.path(item, f, &s)
				m.Files = append(m.Files, s)
				return err
			})
		},
	})
	if err != nil {
		return m, err
	}
	if m.Name == "" {
		return m, p.errf(n.Line, join(field, "name"), "missing")
	}
	if !nameRE.MatchString(m.Name) {
		return m, p.errf(p.lineOf(n, "name"), join(field, "name"), "%q is not a valid name", m.Name)
	}
	if len(m.Files) == 0 {
		return m, p.errf(n.Line, join(field, "files"), "missing")
	}
	return m, nil
}

func (p *defParser) fileDef(n *yaml.Node, field string) (FileDef, error) {
	fd := FileDef{Line: n.Line, Mode: 0o644}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"source": func(v *yaml.Node, f string) error { return p.path(v, f, &fd.Source) },
		"target": func(v *yaml.Node, f string) error { return p.str(v, f, &fd.Target) },
		"mode": func(v *yaml.Node, f string) error {
			if v.Kind != yaml.ScalarNode {
				return p.errf(v.Line, f, "must be an octal number such as 0644")
			}
			mode, err := strconv.ParseInt(v.Value, 8, 32)
			if err != nil || mode < 0 || mode > 0o777 {
				return p.errf(v.Line, f, "%q is not a file mode such as 0644", v.Value)
			}
			fd.Mode = mode
			return nil
		},
	})
	if err != nil {
		return fd, err
	}
	if fd.Source == "" {
		return fd, p.errf(n.Line, join(field, "source"), "missing")
	}
	if fd.Target == "" {
		return fd, p.errf(n.Line, join(field, "target"), "missing")
	}
	if strings.Contains(fd.Target, "\x00") {
		return fd, p.errf(p.lineOf(n, "target"), join(field, "target"), "invalid target")
	}
	return fd, nil
}

// path reads a relative path that must stay inside the definition's folder.
func (p *defParser) path(n *yaml.Node, field string, dst *string) error {
	var s string
	if err := p.str(n, field, &s); err != nil {
		return err
	}
	if err := checkRelPath(s); err != nil {
		return p.errf(n.Line, field, "%v", err)
	}
	*dst = filepath.Clean(filepath.FromSlash(s))
	return nil
}

func checkRelPath(s string) error {
	switch {
	case s == "":
		return errors.New("empty path")
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("invalid path %q", s)
	case filepath.IsAbs(s) || strings.HasPrefix(s, "/"):
		return fmt.Errorf("path %q must be relative to the definition's folder", s)
	case !filepath.IsLocal(filepath.FromSlash(s)):
		return fmt.Errorf("path %q escapes the definition's folder", s)
	}
	return nil
}

// sbom parses the `sbom:` section: enabled (default true) and format.
func (p *defParser) sbom(n *yaml.Node, field string, dst *SBOMDef) error {
	enabled := true
	var format string
	dst.Line = n.Line
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"enabled": func(v *yaml.Node, f string) error { return p.boolean(v, f, &enabled) },
		"format": func(v *yaml.Node, f string) error {
			if err := p.str(v, f, &format); err != nil {
				return err
			}
			sf, err := ParseSBOMFormat(format)
			if err != nil || format == "" {
				return p.errf(v.Line, f, "must be %s or %s, not %q", SBOMFormatSPDX, SBOMFormatCycloneDX, format)
			}
			dst.Format = sf
			return nil
		},
	})
	dst.Disabled = !enabled
	return err
}
