// Package zarf brings Zarf's work to ferry: Convert turns a zarf.yaml
// (Zarf v0.60.0's zarf.dev/v1alpha1 ZarfPackageConfig) into a ferry.yaml,
// reporting, line by line, everything that has no ferry equivalent with
// the nearest ferry form, and dropping nothing silently.
//
// zarf.yaml is read with ferry's own YAML code (no Zarf module): every
// field Zarf v0.60.0 knows is handled or reported, and a field it does not
// know is reported too.
package zarf

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// Zarf's header values.
const (
	APIVersion        = "zarf.dev/v1alpha1"
	KindPackageConfig = "ZarfPackageConfig"
	KindInitConfig    = "ZarfInitConfig"
)

// ConvertOptions says how Convert resolves what zarf package create would
// resolve. The zero value converts for no flavor and the architecture of
// metadata.architecture (else the host's, as Zarf does).
type ConvertOptions struct {
	// Dir is the folder the ferry.yaml is written to; paths are made
	// relative to it and must stay inside it. Default: zarf.yaml's folder.
	Dir string
	// Flavor keeps the components whose only.flavor is Flavor or empty, as
	// `zarf package create --flavor` does.
	Flavor string
	// Architecture is the package's architecture (zarf package create
	// --architecture): it wins over metadata.architecture, which wins over
	// the host's. Components whose only.cluster.architecture differs are
	// left out, as Zarf leaves them out.
	Architecture string
	// Set holds package template values (###ZARF_PKG_TMPL_KEY###), as
	// `zarf package create --set KEY=VALUE`; keys are upper-cased as Zarf
	// does. They win over Config's. A template without a value is an
	// error (ErrNoTemplateValue).
	Set map[string]string
	// Config is the Zarf config file's values (ReadConfig), as zarf
	// package create and deploy take them: package.create.set fills
	// package templates where Set does not, package.deploy.set is named
	// in the report of the variables it gives values to. Nil: none.
	Config *Config
}

// Gap is something of a zarf.yaml (or of a file it names) that the ferry
// definition does not carry as Zarf would: What it is, and the Nearest
// ferry form. File is the zarf.yaml, or the manifest, values file or file
// holding a deploy-time Zarf template.
type Gap struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Field   string `json:"field,omitempty"`
	What    string `json:"what"`
	Nearest string `json:"nearest"`
}

// String is the gap as `convert` prints it: file:line: field: what — nearest.
func (g Gap) String() string {
	s := g.File
	if g.Line > 0 {
		s += ":" + strconv.Itoa(g.Line)
	}
	s += ": "
	if g.Field != "" {
		s += g.Field + ": "
	}
	return s + g.What + " — " + g.Nearest
}

// Result is a converted definition.
type Result struct {
	// Definition is the ferry.yaml content; it parses as a valid definition.
	Definition []byte
	// Files are files the definition names that Convert made (kustomizations
	// rendered as zarf package create renders them), by path relative to
	// Dir (slash-separated), to write beside it.
	Files map[string][]byte
	// Gaps, in the order of the zarf.yaml (then of the files it names).
	Gaps []Gap
	// SBOMs are the Syft documents Zarf made of a built package's images
	// (Import only), for SBOMs to serve to artifact.Create.
	SBOMs []ImageSBOM
}

// converter holds one conversion's state.
type converter struct {
	file       string   // zarf.yaml as named
	shown      string   // zarf.yaml as errors name it (ARCHIVE:zarf.yaml, for Import)
	root       *os.Root // odir, which every file zarf.yaml names is read through; nil when it does not exist
	zdir, odir string   // zarf.yaml's folder, ferry.yaml's folder
	opts       ConvertOptions
	arch       string
	gaps       []Gap
	tokenGaps  []Gap
	scanned    map[string]bool
	files      map[string][]byte
	// built: the zarf.yaml of a built package extracted in zdir (Import):
	// sources are read from the package's layout, nothing is filtered.
	built  bool
	comp   string
	images []string // normalized, when built
	// kfs reads kustomizations; rendered counts what they render, nfiles
	// the files and folders the files entries carry.
	kfs      *kustomizeFS
	rendered int64
	nfiles   int
}

func (c *converter) gap(line int, field, what, nearest string) {
	c.gaps = append(c.gaps, Gap{File: c.file, Line: line, Field: field, What: clipLine(what), Nearest: clipLine(nearest)})
}

// archTemplate is filled with the package's architecture.
const archTemplate = "###ZARF_PKG_ARCH###"

var (
	pkgTemplate = regexp.MustCompile(`###ZARF_PKG_(TMPL|VAR)_([A-Z0-9_]+)###`)
	nameRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	labelRE     = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,51}[a-z0-9])?$`)
)

// Convert turns the zarf.yaml content data (file names it; relative paths
// resolve against its folder, whose files Convert reads) into a ferry
// definition. An error is what makes a definition impossible (invalid YAML,
// an init package, a package template without a value, a path that leaves
// the definition's folder); everything else is converted or reported as a
// Gap.
func Convert(file string, data []byte, opts ConvertOptions) (*Result, error) {
	c := &converter{file: file, shown: file, zdir: filepath.Dir(file), opts: opts, scanned: map[string]bool{}, files: map[string][]byte{}}
	c.odir = opts.Dir
	if c.odir == "" {
		c.odir = c.zdir
	}
	data, err := c.fillPackageTemplates(data)
	if err != nil {
		return nil, err
	}
	doc, err := decode(file, data)
	if err != nil {
		return nil, err
	}
	// The architecture is known only once metadata is read; Zarf fills
	// ###ZARF_PKG_ARCH### the same way, in the text.
	c.arch = opts.Architecture
	if c.arch == "" {
		var probe struct {
			Metadata struct {
				Architecture string `yaml:"architecture"`
			} `yaml:"metadata"`
		}
		_ = doc.Decode(&probe)
		c.arch = probe.Metadata.Architecture
	}
	if c.arch == "" {
		c.arch = runtime.GOARCH
	}
	if n := bytes.Count(data, []byte(archTemplate)); n > 0 {
		// metadata.architecture fills every ###ZARF_PKG_ARCH###: bound
		// what it makes before making it.
		if size := len(data) + n*(len(c.arch)-len(archTemplate)); size > definition.MaxSize {
			return nil, c.errf(0, "", "filled with the architecture %q, its %s %s would make %s bytes, more than a zarf.yaml may hold (%s)", clip(c.arch), count(n), archTemplate, count(size), count(definition.MaxSize))
		}
		if doc, err = decode(file, bytes.ReplaceAll(data, []byte(archTemplate), []byte(c.arch))); err != nil {
			return nil, err
		}
	}
	if c.root, err = os.OpenRoot(c.odir); err == nil {
		defer c.root.Close()
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return c.run(doc)
}

// Import converts the zarf.yaml of a built Zarf package extracted by
// Extract into a ferry definition whose sources are the package's own
// content, read from p.Dir (where the definition belongs): its images
// (the OCI layout images/, by reference, so by the same digests), chart
// archives, manifests (kustomizations as Zarf rendered them), files (with
// the modes Zarf gave them) and git repositories. Flavors, architecture
// and package templates were resolved when Zarf built it. Zarf's SBOMs of
// its images (Syft JSON, in sboms.tar) are listed in Result.SBOMs, for
// create to carry as referrers (see SBOMs). What ferry does not carry as
// Zarf deploys it is reported as Convert reports it. Every file is read
// through p.Dir (internal/confine): a link out of it is refused.
func Import(p *Package) (*Result, error) {
	file := filepath.Join(p.Dir, ZarfYAML)
	c := &converter{file: file, shown: file, zdir: p.Dir, odir: p.Dir, built: true, scanned: map[string]bool{}, files: map[string][]byte{}}
	if p.Archive != "" {
		c.shown = p.Archive + ":" + ZarfYAML
	}
	doc, err := decode(c.shown, p.Definition)
	if err != nil {
		return nil, err
	}
	var probe struct {
		Build struct {
			Architecture string `yaml:"architecture"`
		} `yaml:"build"`
	}
	_ = doc.Decode(&probe)
	c.arch = probe.Build.Architecture
	if c.root, err = os.OpenRoot(p.Dir); err != nil {
		return nil, err
	}
	defer c.root.Close()
	res, err := c.run(doc)
	if err != nil {
		return nil, err
	}
	c.gaps = nil
	if res.SBOMs, err = c.sboms(c.images); err != nil {
		return nil, err
	}
	res.Gaps = append(res.Gaps, c.gaps...)
	return res, nil
}

func (c *converter) run(doc *yaml.Node) (*Result, error) {
	def, err := c.pkg(doc)
	if err != nil {
		return nil, err
	}
	out, err := def.encode()
	if err != nil {
		return nil, err
	}
	if len(out) > definition.MaxSize {
		return nil, c.errf(0, "", "the ferry definition it converts to would be %s bytes, more than a definition may hold (%s)", count(len(out)), count(definition.MaxSize))
	}
	if _, err := definition.Parse(filepath.Join(c.odir, definition.FileName), out); err != nil {
		return nil, fmt.Errorf("%s: the converted definition is not valid: %w", c.shown, err)
	}
	// The zarf.yaml's gaps in the order of its lines, then those of the
	// files it names.
	sort.SliceStable(c.gaps, func(i, j int) bool { return c.gaps[i].Line < c.gaps[j].Line })
	return &Result{Definition: out, Files: c.files, Gaps: append(c.gaps, c.tokenGaps...)}, nil
}

// pkg converts the top level.
func (c *converter) pkg(root *yaml.Node) (*ferryDef, error) {
	o, err := c.object(root, "", "ZarfPackage")
	if err != nil {
		return nil, err
	}
	apiVersion, err := c.str(o, "apiVersion")
	if err != nil {
		return nil, err
	}
	if apiVersion != "" && apiVersion != APIVersion {
		return nil, c.errf(o.line("apiVersion"), "apiVersion", "%q: Zarf v0.60.0 definitions are %s", apiVersion, APIVersion)
	}
	kind, err := c.str(o, "kind")
	if err != nil {
		return nil, err
	}
	switch kind {
	case KindPackageConfig:
	case KindInitConfig:
		return nil, c.errf(o.line("kind"), "kind", "a Zarf init package sets up Zarf's own registry, agent and git server: `ferry init` sets up ferry's; convert the packages deployed after it")
	default:
		return nil, c.errf(o.line("kind"), "kind", "must be %s, got %q", KindPackageConfig, kind)
	}
	source := filepath.Base(c.file)
	if r, err := filepath.Rel(c.odir, c.file); err == nil {
		source = filepath.ToSlash(r)
	}
	def := &ferryDef{source: source}
	if !o.has("metadata") {
		return nil, c.errf(root.Line, "metadata", "missing")
	}
	if err := c.metadata(o.vals["metadata"], def); err != nil {
		return nil, err
	}
	if o.has("build") && !c.built {
		c.gap(o.line("build"), "build", "the build record of a built package (zarf package create wrote it)", "not converted: convert the source zarf.yaml, or bring the built package with `ferry package import`")
	}
	if err := c.list(o, "constants", func(item *yaml.Node, f string) error {
		co, err := c.object(item, f, "Constant")
		if err != nil {
			return err
		}
		name, _ := c.str(co, "name")
		c.gap(item.Line, f, fmt.Sprintf("constant %s: zarf package deploy replaces ###ZARF_CONST_%s### in manifests, values files and files", name, name), "ferry replaces nothing: write the value into those files (each use is reported below)")
		return nil
	}); err != nil {
		return nil, err
	}
	if err := c.list(o, "variables", func(item *yaml.Node, f string) error {
		vo, err := c.object(item, f, "InteractiveVariable")
		if err != nil {
			return err
		}
		name, _ := c.str(vo, "name")
		dflt, _ := c.str(vo, "default")
		given := fmt.Sprintf("default %q", dflt)
		if _, ok := c.deployValue(name); ok {
			given += "; " + c.opts.Config.File + "'s package.deploy.set gives it a value"
		}
		c.gap(item.Line, f, fmt.Sprintf("variable %s (%s): zarf package deploy asks for it or takes --set and replaces ###ZARF_VAR_%s###", name, given, name), "ferry templates nothing: a chart value given with `ferry deploy --set`, or the value written into the manifest (each use is reported below)")
		return nil
	}); err != nil {
		return nil, err
	}
	if !o.has("components") {
		c.gap(root.Line, "components", "no components (Zarf requires at least one)", "an empty ferry package")
	}
	if v, ok := o.vals["components"]; ok && v.Kind == yaml.SequenceNode && len(v.Content) > MaxComponents {
		return nil, c.errf(o.line("components"), "components", "%s components, more than %s", count(len(v.Content)), count(MaxComponents))
	}
	names := map[string]string{}
	if err := c.list(o, "components", func(item *yaml.Node, f string) error {
		comp, err := c.component(item, f)
		if err != nil || comp == nil {
			return err
		}
		if prev, dup := names[comp.Name]; dup {
			return c.errf(item.Line, f+".name", "duplicate component name %q (also %s) after flavor and architecture filtering: choose a flavor with --flavor", comp.Name, prev)
		}
		names[comp.Name] = f
		def.Components = append(def.Components, *comp)
		return nil
	}); err != nil {
		return nil, err
	}
	return def, nil
}

func (c *converter) metadata(n *yaml.Node, def *ferryDef) error {
	o, err := c.object(n, "metadata", "ZarfMetadata")
	if err != nil {
		return err
	}
	md := &def.Metadata
	if md.Name, err = c.str(o, "name"); err != nil {
		return err
	}
	if md.Name == "" {
		return c.errf(n.Line, "metadata.name", "missing")
	}
	if !nameRE.MatchString(md.Name) {
		return c.errf(o.line("name"), "metadata.name", "%q is not a valid ferry package name (1–63 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)", md.Name)
	}
	if md.Description, err = c.str(o, "description"); err != nil {
		return err
	}
	if md.Version, err = c.str(o, "version"); err != nil {
		return err
	}
	if md.Version == "" {
		md.Version = "0.0.0"
		c.gap(n.Line, "metadata.version", "no version (optional in Zarf)", "ferry needs one: wrote 0.0.0; set the package's real version")
	}
	if arch, _ := c.str(o, "architecture"); arch != "" || c.opts.Architecture != "" {
		if c.arch == "skeleton" {
			return c.errf(o.line("architecture"), "metadata.architecture", "a skeleton package (zarf package publish of a definition) carries no content: convert the definition it was published from")
		}
		def.Platforms = []definition.Platform{{OS: "linux", Architecture: c.arch}}
	}
	for _, k := range []string{"url", "image", "authors", "documentation", "source", "vendor"} {
		if v, _ := c.str(o, k); v != "" {
			def.comments = append(def.comments, fmt.Sprintf("zarf metadata.%s: %s", k, v))
			c.gap(o.line(k), "metadata."+k, "no ferry field", "kept as a comment at the top of ferry.yaml (put it in metadata.description to show it in `ferry package inspect`)")
		}
	}
	if v, ok := o.vals["annotations"]; ok && v.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(v.Content); i += 2 {
			def.comments = append(def.comments, fmt.Sprintf("zarf metadata.annotations.%s: %s", v.Content[i].Value, v.Content[i+1].Value))
		}
		c.gap(o.line("annotations"), "metadata.annotations", "package annotations: ferry's package has none of its own", "kept as comments at the top of ferry.yaml")
	}
	if !o.isZero("uncompressed") {
		c.gap(o.line("uncompressed"), "metadata.uncompressed", "an uncompressed package", "`ferry package create --format tar`")
	}
	if !o.isZero("yolo") {
		c.gap(o.line("yolo"), "metadata.yolo", "YOLO: deploy to a cluster without Zarf's registry, workloads pulling from their original registries", "none: ferry always pushes images into the cluster's registry and runs them from there by digest")
	}
	if o.has("aggregateChecksum") && !c.built {
		c.gap(o.line("aggregateChecksum"), "metadata.aggregateChecksum", "the checksum of a built package's content", "not converted: ferry records every digest itself when it creates the package")
	}
	if b, _ := c.boolean(o, "allowNamespaceOverride"); b != nil && *b {
		c.gap(o.line("allowNamespaceOverride"), "metadata.allowNamespaceOverride", "allows `zarf package deploy --namespace` to move every chart and manifest", "none: ferry deploys into the namespaces the definition names; change them in ferry.yaml")
	}
	return nil
}

// component converts one component; nil when Zarf would leave it out
// (flavor, architecture).
func (c *converter) component(n *yaml.Node, field string) (*definition.Component, error) {
	o, err := c.object(n, field, "ZarfComponent")
	if err != nil {
		return nil, err
	}
	name, err := c.str(o, "name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, c.errf(n.Line, o.f("name"), "missing")
	}
	if !nameRE.MatchString(name) {
		return nil, c.errf(o.line("name"), o.f("name"), "%q is not a valid ferry component name (1–63 lowercase letters, digits, '-' and '.', ending with a letter or digit)", name)
	}
	if keep, err := c.only(o, name); err != nil || !keep {
		return nil, err
	}
	c.comp = name
	comp := &definition.Component{Name: name}
	if comp.Description, err = c.str(o, "description"); err != nil {
		return nil, err
	}
	req, err := c.boolean(o, "required")
	if err != nil {
		return nil, err
	}
	dflt, err := c.boolean(o, "default")
	if err != nil {
		return nil, err
	}
	required := req != nil && *req
	comp.Required = required
	if !required && dflt != nil && *dflt {
		c.gap(o.line("default"), o.f("default"), fmt.Sprintf("component %s is selected by default: zarf package deploy --components a,b deploys it too unless the list excludes it (-%s)", name, name), "ferry deploy --components a,b deploys the required components and those named: name it too")
	}
	if !required && (dflt == nil || !*dflt) {
		c.gap(o.line("name"), field, fmt.Sprintf("component %s is optional and not selected by default (Zarf: required and default both false): `zarf package deploy --confirm` leaves it out", name), "ferry deploys optional components unless --components is given: deploy with --components naming the components to deploy")
	}
	if !o.isZero("group") {
		g, _ := c.str(o, "group")
		c.gap(o.line("group"), o.f("group"), fmt.Sprintf("component group %q (deploy one component of the group)", g), "none: ferry has no groups; name the one to deploy with --components")
	}
	if !o.isZero("cosignKeyPath") {
		c.gap(o.line("cosignKeyPath"), o.f("cosignKeyPath"), "a key to verify downloaded sources with", "none: verify what you download before converting; ferry signs the package and checks every digest")
	}
	if o.has("import") {
		io, err := c.object(o.vals["import"], o.f("import"), "ZarfComponentImport")
		if err != nil {
			return nil, err
		}
		what := "a component imported from another package"
		if p, _ := c.str(io, "path"); p != "" {
			what += " (" + p + ")"
		} else if u, _ := c.str(io, "url"); u != "" {
			what += " (" + u + ")"
		}
		c.gap(o.line("import"), o.f("import"), what+": not resolved, only this component's own fields are converted", "flatten first: `zarf dev inspect definition . > flat/zarf.yaml` (Zarf composes imports, flavors and templates) and convert that")
	}
	var sigs []cosignArtifact
	if err := c.list(o, "images", func(item *yaml.Node, f string) error {
		if item.Kind != yaml.ScalarNode {
			return c.errf(item.Line, f, "must be a string")
		}
		ref, err := definition.NormalizeImageRef(item.Value)
		if err != nil {
			return c.errf(item.Line, f, "%v", err)
		}
		if cosignTag.MatchString(ref) {
			sigs = append(sigs, cosignArtifact{ref: ref, line: item.Line, field: f})
			return nil
		}
		if c.built {
			comp.Images = append(comp.Images, definition.Image{Ref: item.Value, Layout: "images"})
			ref, _ := definition.NormalizeImageRef(item.Value)
			c.images = append(c.images, ref)
		} else {
			comp.Images = append(comp.Images, definition.Image{Ref: item.Value})
		}
		return nil
	}); err != nil {
		return nil, err
	}
	c.cosignGaps(sigs, comp.Images)
	if err := c.list(o, "charts", func(item *yaml.Node, f string) error {
		ch, err := c.chart(item, f)
		if ch != nil {
			comp.Charts = append(comp.Charts, *ch)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := c.list(o, "manifests", func(item *yaml.Node, f string) error {
		m, err := c.manifest(item, f)
		if m != nil {
			comp.Manifests = append(comp.Manifests, *m)
		}
		return err
	}); err != nil {
		return nil, err
	}
	idx := 0
	if err := c.list(o, "files", func(item *yaml.Node, f string) error {
		fs, err := c.fileEntry(item, f, idx)
		idx++
		comp.Files = append(comp.Files, fs...)
		return err
	}); err != nil {
		return nil, err
	}
	if err := c.list(o, "repos", func(item *yaml.Node, f string) error {
		r, err := c.repo(item, f)
		if r != nil {
			comp.Repositories = append(comp.Repositories, *r)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := c.list(o, "dataInjections", func(item *yaml.Node, f string) error {
		do, err := c.object(item, f, "ZarfDataInjection")
		if err != nil {
			return err
		}
		src, _ := c.str(do, "source")
		c.gap(item.Line, f, fmt.Sprintf("data injection of %s into a running container", src), "none: carry the data as a file (files:) or in an image, and copy it in with an init container or a Job of the component's manifests")
		return nil
	}); err != nil {
		return nil, err
	}
	if o.has("scripts") {
		c.gap(o.line("scripts"), o.f("scripts"), "scripts (Zarf's deprecated actions)", "none: ferry runs no commands; see actions below")
	}
	if o.has("actions") {
		if err := c.actions(o.vals["actions"], o.f("actions")); err != nil {
			return nil, err
		}
	}
	if err := c.list(o, "healthChecks", func(item *yaml.Node, f string) error {
		ho, err := c.object(item, f, "NamespacedObjectKindReference")
		if err != nil {
			return err
		}
		kind, _ := c.str(ho, "kind")
		ns, _ := c.str(ho, "namespace")
		nm, _ := c.str(ho, "name")
		c.gap(item.Line, f, fmt.Sprintf("health check of %s %s/%s", kind, ns, nm), "ferry deploy waits until every object of the package's charts and manifests is ready (--timeout); an object the package does not apply is not waited for")
		return nil
	}); err != nil {
		return nil, err
	}
	return comp, nil
}
