package definition

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/yamlbound"
	"gopkg.in/yaml.v3"
)

// FileName is the file a package definition folder holds.
const FileName = "ferry.yaml"

// APIVersion and Kind are the only accepted header values of a definition.
const (
	APIVersion = "ferry.dev/v1alpha1"
	Kind       = "Package"
)

// Definition is a parsed, validated ferry.yaml.
type Definition struct {
	// File is the definition's path as given; Dir is the folder relative paths
	// are resolved against.
	File, Dir  string
	Metadata   Metadata
	Platforms  []Platform
	Components []Component
	// SBOM says whether and how create makes SBOMs (top-level `sbom:`).
	SBOM SBOM
	// ImagePolicies are the image verification policies (`imagePolicies:`);
	// Verify names the one every image is checked against unless its
	// component or itself names another (`verify:`; VerifyNone for none).
	ImagePolicies []ImagePolicy
	Verify        string
	verifyLine    int
}

// SBOM is the definition's `sbom:` section. The zero value makes SPDX
// SBOMs (when create is given an SBOMGenerator).
type SBOM struct {
	// Disabled is `enabled: false`.
	Disabled bool
	// Format is the document format; "" is SBOMFormatSPDX.
	Format SBOMFormat
	Line   int
}

// Metadata names and describes a package.
type Metadata struct {
	Name        string `yaml:"name"`
	Version     string `yaml:"version"`
	Description string `yaml:"description,omitempty"`
}

// Component is one component of a definition.
type Component struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
	Required    bool   `yaml:"required"`
	// FindImages (`findImages: true`) makes create add the images the
	// component's charts and manifests use that Images does not list (as
	// FindImages finds them, charts rendered with their default values).
	FindImages bool `yaml:"findImages,omitempty"`
	// Verify names the image policy of the component's images (see
	// Definition.Verify).
	Verify       string       `yaml:"verify,omitempty"`
	Images       []Image      `yaml:"images,omitempty"`
	Charts       []Chart      `yaml:"charts,omitempty"`
	Manifests    []Manifest   `yaml:"manifests,omitempty"`
	Files        []File       `yaml:"files,omitempty"`
	Repositories []Repository `yaml:"repositories,omitempty"`
	// Advisories are vulnerability databases to carry (OSV records).
	Advisories []Advisories `yaml:"advisories,omitempty"`
	Line       int          `yaml:"-"`
}

// Advisories is a vulnerability database to carry: Source is a zip of OSV
// records (osv.dev's all.zip layout) or a folder of *.json records
// (golang.org/x/vulndb's data/osv), inside the definition's folder. Create
// loads it (bounded, package artifact/advisory) and stores it as one zip
// layer; deploy installs nothing of it.
type Advisories struct {
	Source string `yaml:"source"`
	Line   int    `yaml:"-"`
}

// Repository is a git repository to carry at one commit. URL is its
// identity (what GitRepository and Argo CD Application objects name):
// https://, http://, ssh:// or scp-like git@host:path; it is cloned
// unless Path names a local clone (inside the definition's folder) to
// read instead. Ref is a branch, a tag, a full ref or a full 40-hex
// commit (the remote's HEAD when empty); create resolves it once. History
// (default true) carries every commit up to it too, as a git bundle, so
// that the in-cluster git server can serve it.
type Repository struct {
	URL, Path, Ref string
	History        bool
	Line           int
}

// Image is an image source: a registry reference, or (with Layout) a
// manifest inside a local OCI layout directory found by Tag.
type Image struct {
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
	// Verify names the image policy of this image (see Definition.Verify).
	Verify string
	Line   int
}

// Chart is a Helm chart source: a chart folder or .tgz (Path), or an OCI
// registry (URL oci://… with Version).
type Chart struct {
	Path    string `yaml:"path,omitempty"`
	URL     string `yaml:"url,omitempty"`
	Version string `yaml:"version,omitempty"`
	// Namespace and ReleaseName say where deploy installs the chart: the
	// namespace "default" and the chart's name when empty.
	Namespace   string `yaml:"namespace,omitempty"`
	ReleaseName string `yaml:"releaseName,omitempty"`
	Line        int    `yaml:"-"`
}

// Manifest is a bundle of Kubernetes manifests: YAML files and folders.
type Manifest struct {
	Name      string   `yaml:"name"`
	Namespace string   `yaml:"namespace,omitempty"`
	Files     []string `yaml:"files"`
	Line      int      `yaml:"-"`
}

// File is a plain file carried to Target.
type File struct {
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
		return Platform{}, fmt.Errorf("invalid platform %.64q: want os/arch[/variant]", s)
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

// Error is a problem in a definition, located by file, line and
// field. Err, when set, is the cause (an item create could not resolve or
// read), which errors.Is and errors.As see through it; Msg says it.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return loc + ": " + e.Field + ": " + e.Msg
	}
	return loc + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// MaxSize bounds a definition file (ferry.yaml, zarf.yaml).
const MaxSize = 4 << 20

// MaxNodes bounds the YAML nodes of a ferry.yaml (200,000, an
// alias counted as what it stands for), and before it is parsed, its text
// to what can make no more (internal/yamlbound): a definition of 10,000
// images has about 40,000.
const MaxNodes = 200_000

// Load reads and validates a definition from a ferry.yaml file or
// a folder holding one.
func Load(path string) (*Definition, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, FileName)
	}
	data, err := confine.ReadPath(path, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("read definition: %w", err)
	}
	return Parse(path, data)
}

// Check reads a definition as Load does, but goes on past its mistakes:
// it returns every problem it finds (at most MaxProblems, then one saying
// how many more), each an *Error naming the file, the line and the field,
// with the definition as far as it could be read. A definition that cannot
// be read, is not YAML or passes its bounds gives one problem and no
// definition; one without problems is what Load returns.
func Check(path string) (*Definition, []error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, FileName)
	}
	data, err := confine.ReadPath(path, MaxSize)
	if err != nil {
		return nil, []error{fmt.Errorf("read definition: %w", err)}
	}
	p := &defParser{file: path, collect: true}
	def, err := p.definition(path, data)
	if err != nil {
		return nil, append(p.problems, err)
	}
	// In the file's order, as an editor goes through them.
	slices.SortStableFunc(p.problems, func(a, b error) int { return cmp.Compare(lineOf(a), lineOf(b)) })
	if p.more > 0 {
		p.problems = append(p.problems, p.errf(0, "", "%d more problems", p.more))
	}
	return def, p.problems
}

// lineOf is the line an *Error names, 0 for another error.
func lineOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Line
	}
	return 0
}

// Parse parses and validates ferry.yaml content. file names the
// definition in errors; relative paths resolve against its folder.
func Parse(file string, data []byte) (*Definition, error) {
	return (&defParser{file: file}).definition(file, data)
}

func (p *defParser) definition(file string, data []byte) (*Definition, error) {
	def := &Definition{File: file, Dir: filepath.Dir(file)}
	if err := yamlbound.Check(data, MaxNodes); err != nil {
		return nil, p.errf(0, "", "%v", err)
	}
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
	if _, line, err := yamlbound.Count(&doc, MaxNodes); err != nil {
		return nil, p.errf(line, "", "%v", err)
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
		"imagePolicies": func(n *yaml.Node, f string) error {
			return p.imagePolicies(n, f, &def.ImagePolicies)
		},
		"verify": func(n *yaml.Node, f string) error {
			def.verifyLine = n.Line
			return p.str(n, f, &def.Verify)
		},
		"components": func(n *yaml.Node, f string) error {
			return p.seq(n, f, func(item *yaml.Node, f string) error {
				// Kept even when refused, so that the indexes of the
				// components after it stay those of the file (Check).
				c, err := p.component(item, f)
				def.Components = append(def.Components, c)
				return err
			})
		},
	})
	if err != nil {
		return nil, err
	}
	if apiVersion != APIVersion {
		if err := p.fail(p.errf(p.lineOf(root, "apiVersion"), "apiVersion", "must be %q, got %.64q", APIVersion, apiVersion)); err != nil {
			return nil, err
		}
	}
	if kind != Kind {
		if err := p.fail(p.errf(p.lineOf(root, "kind"), "kind", "must be %q, got %.64q", Kind, kind)); err != nil {
			return nil, err
		}
	}
	if !seen["metadata"] {
		if err := p.fail(p.errf(root.Line, "metadata", "missing")); err != nil {
			return nil, err
		}
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
			if err := p.fail(p.errf(line, fmt.Sprintf("components[%d].name", i), "duplicate component name %.64q (also components[%d])", c.Name, prev)); err != nil {
				return nil, err
			}
			continue
		}
		names[c.Name] = i
	}
	if err := p.fail(p.checkVerifyNames(def)); err != nil {
		return nil, err
	}
	return def, nil
}
