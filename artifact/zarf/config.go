package zarf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// ConfigName is the name of Zarf's config file without its extension:
// zarf-config.toml, .yaml, .yml or .json.
const ConfigName = "zarf-config"

// ConfigExts are the extensions of a Zarf config file ferry reads, in the
// order Zarf (viper) looks for them in a folder.
var ConfigExts = []string{".json", ".toml", ".yaml", ".yml"}

// Config is what convert takes from a Zarf config file: the values Zarf's
// `package create` and `package deploy` take from it as if given with
// --set. Keys are upper-cased, as Zarf upper-cases them.
type Config struct {
	// File is the config file as named.
	File string
	// CreateSet is package.create.set: package template values
	// (###ZARF_PKG_TMPL_KEY###).
	CreateSet map[string]string
	// DeploySet is package.deploy.set: variable values (###ZARF_VAR_KEY###).
	DeploySet map[string]string
}

// FindConfig returns the Zarf config file in dir (the first of
// zarf-config.json, .toml, .yaml and .yml there, as Zarf looks for it), or
// "" when it holds none.
func FindConfig(dir string) (string, error) {
	for _, ext := range ConfigExts {
		p := filepath.Join(dir, ConfigName+ext)
		if _, err := os.Lstat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", pathError(err)
		}
	}
	return "", nil
}

// ReadConfig reads the Zarf config file p (TOML, YAML or JSON by its
// extension), held to MaxConfigSize bytes and, before it is parsed, to
// MaxConfigNesting and MaxConfigBrackets: a regular file, opened without
// blocking. Keys are matched without regard to case, as Zarf (viper)
// matches them; a value of
// package.create.set or package.deploy.set must be a string, a number or a
// boolean. Other keys (log_level, package.deploy.components…) are not
// read.
func ReadConfig(p string) (*Config, error) {
	data, err := confine.ReadPath(p, MaxConfigSize)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, pe.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("Zarf config file %w", err)
	}
	return readConfig(p, data)
}

// ReadConfigIn reads the Zarf config file name in the folder dir as
// ReadConfig does, confined to dir: a link that leads out of it is
// refused, as the files a zarf.yaml names are (FindConfig's file, which
// nobody named, must not read what lies elsewhere).
func ReadConfigIn(dir, name string) (*Config, error) {
	p := filepath.Join(dir, name)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, confine.Wrap(dir, err))
	}
	defer root.Close()
	data, err := confine.ReadFile(root, name, MaxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, err)
	}
	return readConfig(p, data)
}

// readConfig parses the config file p's data.
func readConfig(p string, data []byte) (*Config, error) {
	doc, err := parseConfig(p, data)
	if err != nil {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, err)
	}
	cfg := &Config{File: p}
	pkg := child(doc, "package")
	if cfg.CreateSet, err = setValues(child(child(pkg, "create"), "set"), "package.create.set"); err != nil {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, err)
	}
	if cfg.DeploySet, err = setValues(child(child(pkg, "deploy"), "set"), "package.deploy.set"); err != nil {
		return nil, fmt.Errorf("Zarf config file %s: %w", p, err)
	}
	return cfg, nil
}

// parseConfig parses data by p's extension into nested maps.
func parseConfig(p string, data []byte) (map[string]any, error) {
	doc := map[string]any{}
	switch ext := strings.ToLower(filepath.Ext(p)); ext {
	case ".toml":
		// The TOML library's time grows with the square of inline-table
		// and dotted-key depth: bound both before it runs.
		if n := bytes.Count(data, []byte("{")); n > MaxConfigNesting {
			return nil, fmt.Errorf("%s '{', more than %d", count(n), MaxConfigNesting)
		}
		// Nested arrays cost it memory with their depth (262,000 '[' deep:
		// 320 MiB); a table header is one or two.
		if n := bytes.Count(data, []byte("[")); n > MaxConfigBrackets {
			return nil, fmt.Errorf("%s '[', more than %s", count(n), count(MaxConfigBrackets))
		}
		for i, l := range bytes.Split(data, []byte("\n")) {
			if n := bytes.Count(l, []byte(".")); n > MaxConfigNesting {
				return nil, fmt.Errorf("line %d: %s '.', more than %d", i+1, count(n), MaxConfigNesting)
			}
		}
		if _, err := toml.Decode(string(data), &doc); err != nil {
			return nil, fmt.Errorf("invalid TOML: %s", clip(err.Error()))
		}
	case ".yaml", ".yml":
		if err := yamlbound.Check(data, MaxNodes); err != nil {
			return nil, err
		}
		var n yaml.Node
		if err := yaml.Unmarshal(data, &n); err != nil {
			return nil, fmt.Errorf("invalid YAML: %s", clip(strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		if _, line, err := yamlbound.Count(&n, MaxNodes); err != nil {
			return nil, fmt.Errorf("line %d: %s", line, clip(err.Error()))
		}
		if err := n.Decode(&doc); err != nil && n.Kind != 0 {
			return nil, fmt.Errorf("invalid YAML: %s", clip(strings.TrimPrefix(err.Error(), "yaml: ")))
		}
	case ".json":
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("invalid JSON: %s", clip(err.Error()))
		}
	default:
		return nil, fmt.Errorf("%q: a Zarf config file is .toml, .yaml, .yml or .json", clip(ext))
	}
	return doc, nil
}

// child is the map under key of m, matched without regard to case; nil
// when there is none.
func child(m map[string]any, key string) map[string]any {
	for _, k := range sortedKeys(m) {
		if strings.EqualFold(k, key) {
			if c, ok := m[k].(map[string]any); ok {
				return c
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setValues is the values of a set table, keys upper-cased, as Zarf
// (viper's GetStringMapString, then strings.ToUpper) takes them.
func setValues(m map[string]any, field string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range sortedKeys(m) {
		var s string
		switch v := m[k].(type) {
		case string:
			s = v
		case bool:
			s = strconv.FormatBool(v)
		case int:
			s = strconv.Itoa(v)
		case int64:
			s = strconv.FormatInt(v, 10)
		case uint64:
			s = strconv.FormatUint(v, 10)
		case float64:
			s = strconv.FormatFloat(v, 'f', -1, 64)
		case fmt.Stringer: // a TOML or YAML date
			s = v.String()
		default:
			return nil, fmt.Errorf("%s.%s: a %s, not a string, a number or a boolean", field, clip(k), kindOf(v))
		}
		out[strings.ToUpper(k)] = s
	}
	return out, nil
}

// isControl reports whether r is a control character other than a tab.
func isControl(r rune) bool { return r != '\t' && unicode.IsControl(r) }

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "list"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", v)
}

// ErrNoTemplateValue is a package template (###ZARF_PKG_TMPL_KEY###) of a
// zarf.yaml that neither ConvertOptions.Set nor the Zarf config file gives
// a value.
var ErrNoTemplateValue = errors.New("package templates without a value")

// fillPackageTemplates replaces ###ZARF_PKG_TMPL_KEY### (and the deprecated
// ###ZARF_PKG_VAR_KEY###) with opts.Set, else the config file's
// package.create.set, in the text of zarf.yaml, as Zarf does in its YAML,
// so lines stay; comment lines are left as they are. A template without a
// value is an error, as with `zarf package create --confirm`, naming the
// first and counting the others.
func (c *converter) fillPackageTemplates(data []byte) ([]byte, error) {
	if !bytes.Contains(data, []byte("###ZARF_PKG_")) {
		return data, nil
	}
	set, from := map[string]string{}, map[string]string{}
	if cfg := c.opts.Config; cfg != nil {
		for k, v := range cfg.CreateSet {
			set[k], from[k] = v, cfg.File+"'s package.create.set"
		}
	}
	for k, v := range c.opts.Set {
		set[strings.ToUpper(k)], from[strings.ToUpper(k)] = v, "the value set"
	}
	var missing []string
	var bad error
	out := make([]byte, 0, len(data))
	for i, rest := 0, data; len(rest) > 0 && bad == nil; i++ {
		l, next, found := bytes.Cut(rest, []byte("\n"))
		rest = next
		var matches [][]int
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			matches = pkgTemplate.FindAllSubmatchIndex(l, -1)
		}
		last := 0
		for _, m := range matches {
			out = append(out, l[last:m[0]]...)
			last = m[1]
			tmpl, key := string(l[m[0]:m[1]]), string(l[m[4]:m[5]])
			v, ok := set[key]
			if !ok {
				missing = append(missing, fmt.Sprintf("%s (line %d)", clip(tmpl), i+1))
				out = append(out, tmpl...)
				continue
			}
			if j := strings.IndexFunc(v, isControl); j >= 0 {
				bad = c.errf(i+1, "", "%s: the value %s gives %s holds a control character (%U): a package template's value is written into the YAML's text", clip(tmpl), from[key], key, []rune(v[j:])[0])
				break
			}
			// A value fills every template that names it: bound the text
			// it makes as a zarf.yaml is bounded, before making it (256 KiB
			// under 180,000 templates would be 44 GiB).
			if len(out)+len(v) > definition.MaxSize {
				bad = c.errf(i+1, "", "filled with its package templates' values, it would be more than %s bytes, more than a zarf.yaml may hold", count(definition.MaxSize))
				break
			}
			if string(l[m[2]:m[3]]) == "VAR" {
				c.gap(i+1, "", tmpl+" is Zarf's deprecated package variable syntax", "filled from "+from[key]+" for "+key+" as ###ZARF_PKG_TMPL_"+key+"### would be")
			}
			out = append(out, v...)
		}
		out = append(out, l[last:]...)
		if found {
			out = append(out, '\n')
		}
	}
	if bad != nil {
		return nil, bad
	}
	if len(missing) > 0 {
		msg := ErrNoTemplateValue.Error()
		if c.opts.Config != nil {
			msg += " (" + c.opts.Config.File + "'s package.create.set gives none either)"
		}
		return nil, &definition.Error{File: c.shown, Msg: clipLine(msg + ": " + firstOf(missing)), Err: ErrNoTemplateValue}
	}
	return out, nil
}

// FindDefinitions returns the zarf.yaml of dir, or, when dir holds none,
// every zarf.yaml in the folders below it, in lexical order: links are
// not followed and folders whose names start with '.' are skipped. The
// walk visits at most MaxWalk entries and finds at most MaxDefinitions;
// finding none is an error naming dir.
func FindDefinitions(dir string) ([]string, error) {
	own := filepath.Join(dir, ZarfYAML)
	if _, err := os.Lstat(own); err == nil {
		return []string{own}, nil
	}
	w := &walker{root: dir}
	if err := w.walk(dir); err != nil {
		return nil, err
	}
	found := w.found
	if len(found) == 0 {
		return nil, fmt.Errorf("%s holds no %s, nor does any folder below it", dir, ZarfYAML)
	}
	return found, nil
}

// walker finds the zarf.yaml files below a folder for FindDefinitions.
type walker struct {
	root  string
	seen  int
	found []string
}

// walk looks through dir, reading its entries a batch at a time so that
// a folder of millions is refused at MaxWalk, before it is held whole
// (os.ReadDir, and so filepath.WalkDir, reads a folder whole first).
// Entries are visited in lexical order; links are neither followed nor
// taken as a zarf.yaml.
func (w *walker) walk(dir string) error {
	if w.seen++; w.seen > MaxWalk {
		return fmt.Errorf("%s: more than %s files and folders below it", clip(w.root), count(MaxWalk))
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", clip(dir), bare(err))
	}
	var entries []fs.DirEntry
	for {
		batch, err := f.ReadDir(1024)
		entries = append(entries, batch...)
		if w.seen+len(entries) > MaxWalk {
			f.Close()
			return fmt.Errorf("%s: more than %s files and folders below it", clip(w.root), count(MaxWalk))
		}
		if errors.Is(err, io.EOF) || err == nil && len(batch) == 0 {
			break
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", clip(dir), bare(err))
		}
	}
	f.Close()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, d := range entries {
		p := filepath.Join(dir, d.Name())
		switch {
		case d.IsDir():
			if strings.HasPrefix(d.Name(), ".") {
				w.seen++
				continue
			}
			if err := w.walk(p); err != nil {
				return err
			}
		default:
			w.seen++
			if d.Name() == ZarfYAML && d.Type()&fs.ModeSymlink == 0 {
				if w.found = append(w.found, p); len(w.found) > MaxDefinitions {
					return fmt.Errorf("%s: more than %s zarf.yaml files below it", clip(w.root), count(MaxDefinitions))
				}
			}
		}
	}
	return nil
}
