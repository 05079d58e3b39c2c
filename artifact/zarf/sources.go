package zarf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/yamlbound"
	"gopkg.in/yaml.v3"
	"sigs.k8s.io/kustomize/api/krusty"
	krustytypes "sigs.k8s.io/kustomize/api/types"
)

// The folders convert names for what Zarf fetches at create time and ferry
// reads from the definition's folder.
const (
	ChartsDir     = "zarf-charts"
	ManifestsDir  = "zarf-manifests"
	FilesDir      = "zarf-files"
	KustomizeDir  = "zarf-kustomize"
	gitChartMsg   = "a chart in a git repository (Zarf clones it at create)"
	helmRepoMsg   = "a chart of an HTTP Helm repository (Zarf pulls it at create)"
	kustomizeNote = "rendered now with kustomize's library (as zarf package create renders it) into %s, named in files; convert again when the kustomization changes"
)

// gitURLRE is Zarf's own (src/pkg/transform/git.go): URL@ref.
var gitURLRE = regexp.MustCompile(`^(?P<proto>[a-z]+:\/\/)(?P<hostPath>.+?)\/(?P<repo>[\w\-\.]+?)?(?P<git>\.git)?(\/)?(?P<atRef>@(?P<force>\+)?(?P<ref>[\/\+\w\-\.]+))?(?P<gitPath>\/(?P<gitPathId>info\/.*|git-upload-pack|git-receive-pack))?$`)

// gitSplitRef is Zarf's GitURLSplitRef: the URL without its @ref, and the ref.
func gitSplitRef(u string) (string, string, bool) {
	m := gitURLRE.FindStringSubmatch(u)
	if m == nil {
		return "", "", false
	}
	get := func(name string) string { return m[gitURLRE.SubexpIndex(name)] }
	return get("proto") + get("hostPath") + "/" + get("repo") + get("git"), get("ref"), true
}

func (c *converter) chart(n *yaml.Node, field string) (*definition.Chart, error) {
	o, err := c.object(n, field, "ZarfChart")
	if err != nil {
		return nil, err
	}
	get := func(k string) string { s, _ := c.str(o, k); return s }
	name, version, u, local := get("name"), get("version"), get("url"), get("localPath")
	if name == "" {
		return nil, c.errf(n.Line, o.f("name"), "missing")
	}
	ch := &definition.Chart{Namespace: get("namespace"), ReleaseName: get("releaseName")}
	// Zarf names the release after the chart's Zarf name; ferry after
	// Chart.yaml's: say it.
	if ch.ReleaseName == "" {
		ch.ReleaseName = name
	}
	if !labelRE.MatchString(ch.ReleaseName) {
		return nil, c.errf(o.line("releaseName"), o.f("releaseName"), "release name %q is not valid for ferry (a DNS label of at most 53 characters)", ch.ReleaseName)
	}
	if ch.Namespace != "" && !labelRE.MatchString(ch.Namespace) {
		return nil, c.errf(o.line("namespace"), o.f("namespace"), "namespace %q is not valid for ferry (a DNS label of at most 53 characters)", ch.Namespace)
	}
	switch {
	case c.built:
		ch.Path = fmt.Sprintf("components/%s/charts/%s-%s.tgz", c.comp, name, version)
		f, _, err := c.open(ch.Path)
		if err != nil {
			return nil, c.errf(n.Line, field, "the package lacks the chart: %v", err)
		}
		f.Close()
	case local != "" && u != "":
		return nil, c.errf(n.Line, field, "url and localPath are exclusive")
	case local != "":
		p, err := c.rel(o.line("localPath"), o.f("localPath"), local)
		if err != nil {
			return nil, err
		}
		ch.Path = p
		if err := c.checkLocalChart(o, p, version); err != nil {
			return nil, c.errf(o.line("localPath"), o.f("localPath"), "%v", err)
		}
	case strings.HasPrefix(u, "oci://"):
		if version == "" {
			return nil, c.errf(n.Line, o.f("version"), "missing: ferry pins an OCI chart to a version")
		}
		ch.URL, ch.Version = u, version
	case u != "":
		base, ref, _ := gitSplitRef(u)
		if strings.HasSuffix(base, ".git") {
			if ref == "" {
				ref = version
			}
			sub := get("gitPath")
			tgz := fmt.Sprintf("%s/%s-%s.tgz", ChartsDir, name, sanitize(ref))
			ch.Path = tgz
			c.gap(o.line("url"), o.f("url"), fmt.Sprintf("%s: %s at %s, folder %q", gitChartMsg, base, ref, sub),
				fmt.Sprintf("path %s: make it with `git clone --depth 1 --branch %s %s /tmp/%s && helm package /tmp/%s/%s -d /tmp/%s-chart && mv /tmp/%s-chart/*.tgz %s` (or carry the repository itself under repositories)", tgz, ref, base, name, name, sub, name, name, tgz))
			break
		}
		repoName := get("repoName")
		if repoName == "" {
			repoName = name
		}
		if version == "" {
			return nil, c.errf(n.Line, o.f("version"), "missing: a chart of a Helm repository needs a version")
		}
		tgz := fmt.Sprintf("%s/%s-%s.tgz", ChartsDir, repoName, version)
		ch.Path = tgz
		c.gap(o.line("url"), o.f("url"), fmt.Sprintf("%s: %s %s from %s", helmRepoMsg, repoName, version, u),
			fmt.Sprintf("path %s: make it with `helm pull %s --repo %s --version %s -d %s` (ferry charts are folders, .tgz files or oci:// URLs)", tgz, repoName, u, version, ChartsDir))
	default:
		return nil, c.errf(n.Line, field, "needs a url or a localPath")
	}
	if !o.isZero("noWait") {
		c.gap(o.line("noWait"), o.f("noWait"), "install without waiting for the chart's objects", "none: ferry deploy always waits until they are ready (--timeout bounds it)")
	}
	vfs, lines, err := c.strs(o, "valuesFiles")
	if err != nil {
		return nil, err
	}
	for i, vf := range vfs {
		c.gap(lines[i], fmt.Sprintf("%s[%d]", o.f("valuesFiles"), i), fmt.Sprintf("values file %s", vf), "none in ferry.yaml: merge it into the chart's values.yaml (a local chart), or give the values at deploy with `ferry deploy --set`")
		vff := fmt.Sprintf("%s[%d]", o.f("valuesFiles"), i)
		if c.built {
			if err := c.scanTokens(fmt.Sprintf("components/%s/values/%s-%s-%d", c.comp, name, version, i)); err != nil {
				return nil, c.errf(lines[i], vff, "%v", err)
			}
		} else if !isURL(vf) {
			if p, err := c.rel(lines[i], vff, vf); err == nil {
				if err := c.scanTokens(p); err != nil {
					return nil, c.errf(lines[i], vff, "%v", err)
				}
			}
		}
	}
	if err := c.list(o, "variables", func(item *yaml.Node, f string) error {
		vo, err := c.object(item, f, "ZarfChartVariable")
		if err != nil {
			return err
		}
		nm, _ := c.str(vo, "name")
		p, _ := c.str(vo, "path")
		c.gap(item.Line, f, fmt.Sprintf("chart variable %s sets the value %s", nm, p), fmt.Sprintf("`ferry deploy --set %s=VALUE`", strings.TrimPrefix(p, ".")))
		return nil
	}); err != nil {
		return nil, err
	}
	if b, _ := c.boolean(o, "schemaValidation"); b != nil && !*b {
		c.gap(o.line("schemaValidation"), o.f("schemaValidation"), "values schema validation turned off", "none: ferry deploy validates values against values.schema.json as Helm does; a schema that fetches from the internet fails in the air gap")
	}
	return ch, nil
}

// checkLocalChart reports a version that differs from the chart's own
// (ferry takes the chart's), and dependencies that Zarf would build; dir
// is the chart's folder (relative to odir). A Chart.yaml that is not a
// regular file inside odir is an error; one too large to look into is
// left to create.
func (c *converter) checkLocalChart(o *object, dir, version string) error {
	data, err := c.readFile(path.Join(dir, "Chart.yaml"), definition.MaxSize)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, confine.ErrTooLarge), errors.Is(err, errIsFolder):
		return nil // a .tgz, or missing: create says so
	case err != nil:
		return err
	}
	var meta struct {
		Version      string `yaml:"version"`
		Dependencies []struct {
			Name string `yaml:"name"`
		} `yaml:"dependencies"`
	}
	if bound, _ := yamlbound.Bound(data); bound > MaxNodes || yaml.Unmarshal(data, &meta) != nil {
		return nil
	}
	if version != "" && version != meta.Version {
		c.gap(o.line("version"), o.f("version"), fmt.Sprintf("version %s, but the chart's Chart.yaml says %s", version, meta.Version), "ferry takes the chart's own version")
	}
	if len(meta.Dependencies) > 0 {
		entries, _ := fs.ReadDir(c.fsys(), path.Join(dir, "charts"))
		if len(entries) < len(meta.Dependencies) {
			c.gap(o.line("localPath"), o.f("localPath"), "a chart whose dependencies are not in its charts/ folder (zarf package create runs helm dependency build)", "run `helm dependency build "+filepath.Join(c.odir, filepath.FromSlash(dir))+"` before `ferry package create`")
		}
	}
	return c.scanTokens(path.Join(dir, "values.yaml"))
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '+' {
			return '-'
		}
		return r
	}, s)
}

func (c *converter) manifest(n *yaml.Node, field string) (*definition.Manifest, error) {
	o, err := c.object(n, field, "ZarfManifest")
	if err != nil {
		return nil, err
	}
	name, _ := c.str(o, "name")
	ns, _ := c.str(o, "namespace")
	if !nameRE.MatchString(name) {
		return nil, c.errf(o.line("name"), o.f("name"), "%q is not a valid ferry manifest name (lowercase letters, digits, '-' and '.')", name)
	}
	m := &definition.Manifest{Name: name, Namespace: ns}
	files, lines, err := c.strs(o, "files")
	if err != nil {
		return nil, err
	}
	for i, f := range files {
		ff := fmt.Sprintf("%s[%d]", o.f("files"), i)
		if c.built {
			p := fmt.Sprintf("components/%s/manifests/%s-%d.yaml", c.comp, name, i)
			m.Files = append(m.Files, p)
			if err := c.scanTokens(p); err != nil {
				return nil, c.errf(lines[i], ff, "%v", err)
			}
			continue
		}
		if isURL(f) {
			u, sum := splitShasum(f)
			p := localPlaceholder(ManifestsDir, u)
			m.Files = append(m.Files, p)
			c.gap(lines[i], ff, "a manifest downloaded at create: "+u, fmt.Sprintf("files %s: download it there first (`curl -fLo %s %s`%s)", p, p, u, shaCheck(sum, p)))
			continue
		}
		p, err := c.rel(lines[i], ff, f)
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, p)
		if err := c.scanTokens(p); err != nil {
			return nil, c.errf(lines[i], ff, "%v", err)
		}
	}
	anyDir, err := c.boolean(o, "kustomizeAllowAnyDirectory")
	if err != nil {
		return nil, err
	}
	ks, klines, err := c.strs(o, "kustomizations")
	if err != nil {
		return nil, err
	}
	for i, k := range ks {
		kf := fmt.Sprintf("%s[%d]", o.f("kustomizations"), i)
		if c.built {
			p := fmt.Sprintf("components/%s/manifests/kustomization-%s-%d.yaml", c.comp, name, i)
			m.Files = append(m.Files, p)
			if err := c.scanTokens(p); err != nil {
				return nil, c.errf(klines[i], kf, "%v", err)
			}
			continue
		}
		out := fmt.Sprintf("%s/%s-%d.yaml", KustomizeDir, name, i)
		if isURL(k) || strings.HasPrefix(k, "github.com/") {
			m.Files = append(m.Files, out)
			c.gap(klines[i], kf, "a remote kustomization "+k, fmt.Sprintf("files %s: render it where the network is (`kustomize build %s > %s`)", out, k, out))
			continue
		}
		src, err := c.rel(klines[i], kf, k)
		if err != nil {
			return nil, err
		}
		if err := c.kustomizeOffline(src); err != nil {
			return nil, c.errf(klines[i], kf, "%v", err)
		}
		y, err := c.kustomizeBuild(src, anyDir != nil && *anyDir)
		if err != nil {
			return nil, c.errf(klines[i], kf, "kustomize build %s: %v", k, err)
		}
		c.files[out] = y
		m.Files = append(m.Files, out)
		c.gap(klines[i], kf, "a kustomization "+k, fmt.Sprintf(kustomizeNote, out))
		c.scanBytes(out, y)
	}
	if len(m.Files) == 0 {
		c.gap(n.Line, field, "a manifest entry with no files", "left out (ferry needs at least one file)")
		return nil, nil
	}
	if !o.isZero("noWait") {
		c.gap(o.line("noWait"), o.f("noWait"), "apply without waiting for the objects", "none: ferry deploy always waits until they are ready (--timeout bounds it)")
	}
	return m, nil
}

// kustomizeBuild renders the kustomization in dir (relative to odir) as
// Zarf does (src/internal/packager/kustomize): krusty's default options,
// load restrictions lifted by kustomizeAllowAnyDirectory. Its files are
// read through odir (kustomizeFS): it may reach no file outside it, and
// what it reads and renders is bounded.
func (c *converter) kustomizeBuild(dir string, anyDir bool) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	if anyDir {
		opts.LoadRestrictions = krustytypes.LoadRestrictionsNone
	}
	if c.kfs == nil {
		kfs, err := newKustomizeFS(c.root, c.odir)
		if err != nil {
			return nil, err
		}
		c.kfs = kfs
	}
	res, err := krusty.MakeKustomizer(opts).Run(c.kfs, filepath.Join(c.odir, filepath.FromSlash(dir)))
	if err != nil {
		return nil, err
	}
	y, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	if c.rendered += int64(len(y)); c.rendered > artifact.MaxManifestBundleSize {
		return nil, fmt.Errorf("the kustomizations render more than %s bytes together", count(artifact.MaxManifestBundleSize))
	}
	return y, nil
}

func shaCheck(sum, p string) string {
	if sum == "" {
		return ""
	}
	return fmt.Sprintf(" && echo '%s  %s' | sha256sum -c", sum, p)
}

// fileEntry converts one Zarf file: a local file, a local folder (one
// ferry file per regular file below it), or a URL (a placeholder path).
func (c *converter) fileEntry(n *yaml.Node, field string, idx int) ([]definition.File, error) {
	o, err := c.object(n, field, "ZarfFile")
	if err != nil {
		return nil, err
	}
	src, _ := c.str(o, "source")
	target, _ := c.str(o, "target")
	sum, _ := c.str(o, "shasum")
	exe, err := c.boolean(o, "executable")
	if err != nil {
		return nil, err
	}
	if src == "" || target == "" {
		return nil, c.errf(n.Line, field, "needs a source and a target")
	}
	// Zarf's modes (src/pkg/packager/layout/assemble.go): 0700 for an
	// executable file or a folder, else 0600.
	mode := int64(0o600)
	if exe != nil && *exe {
		mode = 0o700
	}
	c.gap(o.line("target"), o.f("target"), fmt.Sprintf("zarf package deploy writes it to %s on the machine that deploys", target), "ferry carries it with its target and mode and writes it nowhere: take it out on the machine that needs it (`ferry package inspect` lists it; see examples/node-files)")
	if syms, _, _ := c.strs(o, "symlinks"); len(syms) > 0 {
		c.gap(o.line("symlinks"), o.f("symlinks"), "symbolic links to the file: "+firstOf(syms), "none: make them where the file is taken out")
	}
	if c.built {
		// Zarf stored it (downloaded, extracted) as files/IDX/BASE(target),
		// its mode set.
		return c.localFiles(o, fmt.Sprintf("components/%s/files/%d/%s", c.comp, idx, path.Base(filepath.ToSlash(target))), target, -1)
	}
	if ep, _ := c.str(o, "extractPath"); ep != "" {
		return c.extracted(o, idx, src, ep, sum, target, mode), nil
	}
	if isURL(src) {
		u, s := splitShasum(src)
		if sum == "" {
			sum = s
		}
		p := localPlaceholder(FilesDir, u)
		c.gap(o.line("source"), o.f("source"), "a file downloaded at create: "+u, fmt.Sprintf("source %s: download it there first (`curl -fLo %s %s`%s)", p, p, u, shaCheck(sum, p)))
		return []definition.File{{Source: p, Target: target, Mode: mode}}, nil
	}
	p, err := c.rel(o.line("source"), o.f("source"), src)
	if err != nil {
		return nil, err
	}
	if sum != "" {
		err := c.checkSHA256(p, sum)
		switch {
		case errors.Is(err, errShasum):
			return nil, c.errf(o.line("shasum"), o.f("shasum"), "%v (zarf package create aborts too)", err)
		case err != nil && !errors.Is(err, errIsFolder) && !errors.Is(err, fs.ErrNotExist):
			return nil, c.errf(o.line("source"), o.f("source"), "%v", err)
		}
	}
	return c.localFiles(o, p, target, mode)
}

// extracted is the ferry file of a Zarf file that zarf package create
// takes out of the archive src (a URL or a local file; sum its sha256):
// a path under FilesDir, named as the file's source so that create
// refuses the definition until it is there, and the command that puts it
// there.
func (c *converter) extracted(o *object, idx int, src, ep, sum, target string, mode int64) []definition.File {
	p := fmt.Sprintf("%s/%s/%d/%s", FilesDir, c.comp, idx, path.Base(filepath.ToSlash(ep)))
	archive, fetch := src, ""
	if isURL(src) {
		u, s := splitShasum(src)
		if sum == "" {
			sum = s
		}
		archive = "/tmp/" + path.Base(strings.SplitN(u, "?", 2)[0])
		fetch = fmt.Sprintf("curl -fLo %s %s%s && ", archive, u, shaCheck(sum, archive))
	} else if sum != "" {
		fetch = strings.TrimPrefix(shaCheck(sum, archive), " && ") + " && "
	}
	take := fmt.Sprintf("tar -xOf %s %s > %s", archive, ep, p)
	if strings.HasSuffix(strings.ToLower(archive), ".zip") {
		take = fmt.Sprintf("unzip -p %s %s > %s", archive, ep, p)
	}
	c.gap(o.line("extractPath"), o.f("extractPath"), fmt.Sprintf("%s taken out of the archive %s at create", ep, src),
		fmt.Sprintf("source %s: extract it there first (`%smkdir -p %s && %s`)", p, fetch, path.Dir(p), take))
	return []definition.File{{Source: p, Target: target, Mode: mode}}
}

// localFiles is the ferry files of the file or folder p (relative to
// odir): mode for a file (-1: its own), each its own below a folder. It is
// read through odir; a folder's entries count to MaxFiles.
func (c *converter) localFiles(o *object, p, target string, mode int64) ([]definition.File, error) {
	f, fi, err := c.open(p)
	if err != nil {
		return nil, c.errf(o.line("source"), o.f("source"), "%v", err)
	}
	f.Close()
	if !fi.IsDir() {
		if c.nfiles++; c.nfiles > MaxFiles {
			return nil, c.errf(o.line("source"), o.f("source"), "more than %s files in the files entries", count(MaxFiles))
		}
		if mode < 0 {
			mode = int64(fi.Mode().Perm())
		}
		if err := c.scanTokens(p); err != nil {
			return nil, c.errf(o.line("source"), o.f("source"), "%v", err)
		}
		return []definition.File{{Source: p, Target: target, Mode: mode}}, nil
	}
	// A folder: Zarf copies it whole to target; ferry carries files.
	var out []definition.File
	var links []string
	err = fs.WalkDir(c.fsys(), p, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if c.nfiles++; c.nfiles > MaxFiles {
			return fmt.Errorf("more than %s files and folders in the files entries", count(MaxFiles))
		}
		if d.Type()&fs.ModeSymlink != 0 {
			links = append(links, fp)
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		r := strings.TrimPrefix(strings.TrimPrefix(fp, p), "/")
		out = append(out, definition.File{Source: fp, Target: path.Join(target, r), Mode: int64(info.Mode().Perm())})
		return c.scanTokens(fp)
	})
	if err != nil {
		return nil, c.errf(o.line("source"), o.f("source"), "%v", pathError(err))
	}
	if len(links) > 0 {
		c.gap(o.line("source"), o.f("source"), fmt.Sprintf("%s in the folder: %s", plural(len(links), "symbolic link"), firstOf(links)), "left out: ferry carries regular files")
	}
	c.gap(o.line("source"), o.f("source"), fmt.Sprintf("a folder (%d files)", len(out)), "one ferry file per regular file below it, each with its target under "+target+" and its own mode")
	return out, nil
}

// errShasum is a local file whose sha256 is not the shasum zarf.yaml gives.
var errShasum = errors.New("the shasum does not match")

// checkSHA256 hashes the regular file p (relative to odir), read through
// odir up to the size it had when opened.
func (c *converter) checkSHA256(p, want string) error {
	f, fi, err := c.open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi.IsDir() {
		return errIsFolder
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, fi.Size())); err != nil {
		return pathError(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, want) {
		return fmt.Errorf("%w: %s has sha256 %s, not %s", errShasum, c.display(p), got, clip(want))
	}
	return nil
}

var (
	fullCommit  = regexp.MustCompile(`^[0-9a-f]{40}$`)
	shortCommit = regexp.MustCompile(`^[0-9a-f]{7,39}$`)
)

func (c *converter) repo(n *yaml.Node, field string) (*definition.Repository, error) {
	if n.Kind != yaml.ScalarNode {
		return nil, c.errf(n.Line, field, "must be a string")
	}
	base, ref, ok := gitSplitRef(n.Value)
	if !ok {
		return nil, c.errf(n.Line, field, "%q is not a git URL Zarf accepts (scheme://host/path[@ref])", n.Value)
	}
	r := &definition.Repository{URL: base, History: true}
	if c.built {
		// Zarf's folder (transform.GitURLtoFolderName): the repository's
		// name and the CRC-32 of the URL with its @ref.
		m := gitURLRE.FindStringSubmatch(n.Value)
		get := func(name string) string { return m[gitURLRE.SubexpIndex(name)] }
		folder := fmt.Sprintf("%s-%d", get("repo"), crc32.ChecksumIEEE([]byte(get("proto")+get("hostPath")+"/"+get("repo")+get("git")+get("atRef"))))
		r.Path = "components/" + c.comp + "/repos/" + folder
	}
	if strings.HasPrefix(base, "file://") && !c.built {
		c.gap(n.Line, field, "a local repository "+base, "set url to the repository's identity (what GitRepository objects name) and path to the clone inside the definition's folder")
		return nil, nil
	}
	switch {
	case ref == "":
		c.gap(n.Line, field, "no ref: Zarf mirrors every branch and tag of "+base, "ferry carries one ref per entry (the remote's HEAD when none): add an entry with ref for each branch or tag the cluster needs")
	case shortCommit.MatchString(ref) && !fullCommit.MatchString(ref):
		r.Ref = ref
		c.gap(n.Line, field, "an abbreviated commit "+ref, "ferry refuses abbreviated commits as ambiguous: write the full 40-hex commit")
	default:
		r.Ref = strings.TrimPrefix(ref, "+")
	}
	return r, nil
}
