package zarf

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/konfig"

	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/redact"
	"github.com/ferrypkg/ferry/internal/yamlbound"
)

// errRemote ends the refusal of a kustomization that names something
// kustomize would fetch from the network: convert works offline, from the
// definition's folder only.
var errRemote = errors.New("is remote: convert reads only the definition's folder; vendor it into the folder")

// kustomization holds the fields of a kustomization file that kustomize
// hands to its loader: each names a file or folder to read, or a URL it
// would fetch (http(s) with no bound on size or time) or a git repository
// it would clone with the git binary. Everything else is left unread.
type kustomization struct {
	// Loaded as a file, else as a folder or a git repository.
	Resources    []string `yaml:"resources"`
	Bases        []string `yaml:"bases"`
	Generators   []string `yaml:"generators"`
	Transformers []string `yaml:"transformers"`
	Validators   []string `yaml:"validators"`
	// Loaded as a folder or a git repository.
	Components []string `yaml:"components"`
	// Loaded as a file (or, where kustomize allows, inline text).
	Crds                  []string          `yaml:"crds"`
	Configurations        []string          `yaml:"configurations"`
	PatchesStrategicMerge []string          `yaml:"patchesStrategicMerge"`
	OpenAPI               map[string]string `yaml:"openapi"`
	Patches               []kustomizePath   `yaml:"patches"`
	PatchesJSON6902       []kustomizePath   `yaml:"patchesJson6902"`
	Replacements          []kustomizePath   `yaml:"replacements"`
	ConfigMapGenerator    []kustomizeKV     `yaml:"configMapGenerator"`
	SecretGenerator       []kustomizeKV     `yaml:"secretGenerator"`
	HelmCharts            []struct {
		Repo                  string   `yaml:"repo"`
		ValuesFile            string   `yaml:"valuesFile"`
		AdditionalValuesFiles []string `yaml:"additionalValuesFiles"`
	} `yaml:"helmCharts"`
	HelmChartInflationGenerator []struct {
		ChartRepoURL string `yaml:"chartRepoUrl"`
	} `yaml:"helmChartInflationGenerator"`
}

type kustomizePath struct {
	Path string `yaml:"path"`
}

// kustomizeEntry is a field of a kustomization and the paths it names.
type kustomizeEntry struct {
	field  string
	values []string
}

type kustomizeKV struct {
	Files []string `yaml:"files"`
	Envs  []string `yaml:"envs"`
	Env   string   `yaml:"env"`
}

// kustomizeOffline refuses the kustomization in dir (slash-separated,
// relative to odir), or one it reaches through its resources, bases,
// components, generators, transformers or validators, if it names
// anything kustomize would fetch instead of reading it from the folder: a
// URL, a git repository (git::…, user@host:path, github.com/…), a Helm
// chart repository. The refusal names the kustomization file and the URL,
// redacted. Kustomize itself cannot be told to stay offline (its loader
// fetches http(s) with a client of its own and clones with the git
// binary), so this runs before it does. Kustomization files are read
// through the folder and count towards what kustomize may read.
func (c *converter) kustomizeOffline(dir string) error {
	if c.kfs == nil {
		kfs, err := newKustomizeFS(c.root, c.odir)
		if err != nil {
			return err
		}
		c.kfs = kfs
	}
	seen := map[string]bool{}
	todo := []string{path.Clean(dir)}
	for len(todo) > 0 {
		d := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[d] {
			continue
		}
		seen[d] = true
		file, k, err := c.readKustomization(d)
		if err != nil || k == nil {
			return err
		}
		more, err := c.checkKustomization(d, file, k)
		if err != nil {
			return err
		}
		todo = append(todo, more...)
	}
	return nil
}

// readKustomization reads and parses the kustomization file in dir, with
// the node bound of a zarf.yaml (MaxNodes); nil if dir holds none (kustomize says
// so, when it runs).
func (c *converter) readKustomization(dir string) (string, *kustomization, error) {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		file := path.Join(dir, name)
		data, err := c.kfs.ReadFile(c.display(file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		var n yaml.Node
		var k kustomization
		if err := yamlbound.Check(data, MaxNodes); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
		if err := yaml.Unmarshal(data, &n); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
		if _, _, err := yamlbound.Count(&n, MaxNodes); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
		if err := n.Decode(&k); err != nil {
			return "", nil, fmt.Errorf("%s: %w", file, err)
		}
		return file, &k, nil
	}
	return "", nil, nil
}

// checkKustomization refuses a remote entry of k (read from file, in
// dir) and returns the folders inside odir it reaches, whose
// kustomizations are checked in turn.
func (c *converter) checkKustomization(dir, file string, k *kustomization) ([]string, error) {
	refuse := func(field, v string) error {
		return fmt.Errorf("%s: %s %s %w", c.display(file), field, clip(redact.URL(v)), errRemote)
	}
	var folders []string
	// Loaded as a file first: a file of the folder is read even if its
	// name looks like a git repository.
	for _, l := range []struct {
		field  string
		values []string
		file   bool
	}{
		{"resources", k.Resources, true}, {"bases", k.Bases, true},
		{"generators", k.Generators, true}, {"transformers", k.Transformers, true},
		{"validators", k.Validators, true}, {"components", k.Components, false},
	} {
		for i, v := range l.values {
			if inline(v) {
				continue
			}
			field := fmt.Sprintf("%s[%d]", l.field, i)
			p := path.Join(dir, filepath.ToSlash(v))
			local := filepath.IsLocal(p) && !filepath.IsAbs(v)
			var fi fs.FileInfo
			if local {
				if f, info, err := confine.Open(c.root, p); err == nil {
					f.Close()
					fi = info
				}
			}
			switch {
			case fetched(v):
				return nil, refuse(field, v)
			case cloned(v) && (!l.file || fi == nil || fi.IsDir()):
				return nil, refuse(field, v)
			case fi != nil && fi.IsDir():
				folders = append(folders, p)
			}
		}
	}
	files := []kustomizeEntry{
		{"crds", k.Crds}, {"configurations", k.Configurations}, {"patchesStrategicMerge", k.PatchesStrategicMerge},
		{"openapi.path", []string{k.OpenAPI["path"]}},
	}
	for _, l := range []struct {
		field string
		paths []kustomizePath
	}{{"patches", k.Patches}, {"patchesJson6902", k.PatchesJSON6902}, {"replacements", k.Replacements}} {
		for i, p := range l.paths {
			files = append(files, kustomizeEntry{fmt.Sprintf("%s[%d].path", l.field, i), []string{p.Path}})
		}
	}
	for _, l := range []struct {
		field string
		gens  []kustomizeKV
	}{{"configMapGenerator", k.ConfigMapGenerator}, {"secretGenerator", k.SecretGenerator}} {
		for i, g := range l.gens {
			f := fmt.Sprintf("%s[%d]", l.field, i)
			files = append(files, kustomizeEntry{f + ".files", g.Files}, kustomizeEntry{f + ".envs", g.Envs}, kustomizeEntry{f + ".env", []string{g.Env}})
		}
	}
	for i, h := range k.HelmCharts {
		f := fmt.Sprintf("helmCharts[%d]", i)
		if h.Repo != "" {
			return nil, refuse(f+".repo", h.Repo)
		}
		files = append(files, kustomizeEntry{f + ".valuesFile", []string{h.ValuesFile}}, kustomizeEntry{f + ".additionalValuesFiles", h.AdditionalValuesFiles})
	}
	for i, h := range k.HelmChartInflationGenerator {
		if h.ChartRepoURL != "" {
			return nil, refuse(fmt.Sprintf("helmChartInflationGenerator[%d].chartRepoUrl", i), h.ChartRepoURL)
		}
	}
	for _, e := range files {
		for _, v := range e.values {
			// A generator's file may be given as key=path.
			_, after, _ := strings.Cut(v, "=")
			if !inline(v) && (fetched(v) || fetched(after)) {
				return nil, refuse(e.field, v)
			}
		}
	}
	return folders, nil
}

// inline is an entry that holds YAML rather than naming a file: kustomize
// takes those for patches, generators and transformers.
func inline(v string) bool {
	v = strings.TrimSpace(v)
	return strings.ContainsAny(v, "\n") || strings.HasPrefix(v, "{")
}

// fetched is a URL: kustomize fetches http(s) ones and clones the rest
// (ssh://, file://); git:: forces a clone.
func fetched(v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	return strings.Contains(v, "://") || strings.HasPrefix(v, "git::")
}

// scpLike is kustomize's user@host:path or user@host/path git address.
var scpLike = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]*@[^/:]+[:/]`)

// cloned is a git repository in a form kustomize clones without a scheme
// (sigs.k8s.io/kustomize/api/internal/git's repospec).
func cloned(v string) bool {
	l := strings.ToLower(strings.TrimSpace(v))
	return fetched(v) || scpLike.MatchString(strings.TrimSpace(v)) ||
		strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "github.com:")
}
