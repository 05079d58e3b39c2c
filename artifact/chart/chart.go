// Package chart packages Helm charts for ferry packages with Helm's SDK:
// Packager is the artifact.ChartPackager that `ferry package create` uses.
// It lives apart from package artifact so that what does not create
// packages does not link Helm.
package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/ignore"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// Packager packages charts with Helm's SDK. The zero value is ready.
type Packager struct{}

var _ build.ChartPackager = Packager{}

// PackageChart loads the chart at name in fsys (a folder or a .tgz
// archive) with Helm's loader, which validates it: Read, then Package, in
// this process. A folder is read as `helm package` reads it (.helmignore
// honoured, links followed — inside fsys only), packaged, then made
// reproducible (packageChart); an archive is kept as it is. The config is
// the chart's metadata as JSON, as Helm stores it. Errors are Helm's,
// unprefixed: the caller names the chart.
func (Packager) PackageChart(ctx context.Context, fsys fs.FS, name string, mtime time.Time) (archive, config []byte, err error) {
	src, err := Read(fsys, name)
	if err != nil {
		return nil, nil, err
	}
	return Package(src, mtime)
}

// Source is a chart as read from disk, before Helm's loader has parsed any
// of it.
type Source struct {
	// Files are a chart folder's files, as `helm package` reads them.
	Files []*loader.BufferedFile
	// Archive is a .tgz chart's bytes (and Files empty).
	Archive []byte
}

// Read reads the chart at name in fsys, a folder or a .tgz archive, parsing
// nothing of it but .helmignore: a folder's files within Helm's limits
// (loader.MaxDecompressedFileSize each, loader.MaxDecompressedChartSize
// together), an archive of at most artifact.MaxChartSize bytes.
func Read(fsys fs.FS, name string) (Source, error) {
	fi, err := fs.Stat(fsys, name)
	if err != nil {
		return Source{}, err
	}
	if fi.IsDir() {
		files, err := readDir(fsys, name)
		return Source{Files: files}, err
	}
	if fi.Size() > artifact.MaxChartSize {
		return Source{}, fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
	}
	archive, err := readFile(fsys, name, artifact.MaxChartSize)
	return Source{Archive: archive}, err
}

// Package loads src with Helm's loader, which validates it, and checks
// that its charts/ folder holds the dependencies its Chart.yaml names. A
// folder's files are packaged (reproducibly, entries' times set to mtime)
// into an archive of at most artifact.MaxChartSize bytes; an archive is
// kept as it is. The config is the chart's metadata as JSON, as Helm
// stores it. What it costs grows with what the chart's YAML holds (a
// values.yaml of millions of nodes costs gigabytes): package
// artifact/chartrender runs it in a child process under limits.
func Package(src Source, mtime time.Time) (archive, config []byte, err error) {
	var ch *chart.Chart
	if src.Archive == nil {
		if ch, err = loader.LoadFiles(src.Files); err != nil {
			return nil, nil, err
		}
		if archive, err = packageChart(ch, mtime); err != nil {
			return nil, nil, fmt.Errorf("package: %w", err)
		}
		if len(archive) > artifact.MaxChartSize {
			return nil, nil, fmt.Errorf("packaged, larger than %d bytes", artifact.MaxChartSize)
		}
	} else {
		archive = src.Archive
		if ch, err = loader.LoadArchive(bytes.NewReader(archive)); err != nil {
			return nil, nil, err
		}
	}
	if err := checkDependencies(ch, ""); err != nil {
		return nil, nil, err
	}
	if config, err = json.Marshal(ch.Metadata); err != nil {
		return nil, nil, err
	}
	return archive, config, nil
}

// checkDependencies refuses a chart whose Chart.yaml names dependencies
// that its charts/ folder does not hold, at any depth: what `helm install`
// and `helm template` refuse (`helm dependency build` fetches them), and
// what Helm's SDK, which deploy uses, would install silently without them.
// A condition that disables a dependency does not excuse it, as in Helm.
func checkDependencies(ch *chart.Chart, at string) error {
	have := map[string]bool{}
	for _, d := range ch.Dependencies() {
		have[d.Name()] = true
	}
	var missing []string
	for _, d := range ch.Metadata.Dependencies {
		if d != nil && !have[d.Name] {
			missing = append(missing, d.Name)
		}
	}
	where := "charts/"
	if at != "" {
		where = at + "/charts/"
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("Chart.yaml names dependencies missing from %s: %s (run `helm dependency build` where their repositories can be reached, then create again)", where, strings.Join(missing, ", "))
	}
	for _, d := range ch.Dependencies() {
		if err := checkDependencies(d, path.Join(at, "charts", d.Name())); err != nil {
			return err
		}
	}
	return nil
}

// maxLinkDepth bounds how many linked folders deep readDir follows (a link
// to a parent folder would otherwise loop forever).
const maxLinkDepth = 16

// Limits on reading a chart folder, which happens in ferry itself: each
// rule of its .helmignore is matched against every path of the folder, so
// the time taken grows with both (a 5 MiB .helmignore over 1,000 files
// takes minutes).
const (
	// MaxHelmIgnore bounds a chart's .helmignore (16 KiB; real ones are
	// under 1 KiB).
	MaxHelmIgnore = 16 << 10
	// MaxChartEntries bounds the files and folders of a chart folder that
	// are looked at, ignored ones and those reached again through links
	// included (10,000; kyverno's chart has about 200).
	MaxChartEntries = 10_000
)

// readDir reads the chart folder top of fsys as Helm's loader.LoadDir reads
// one from disk: .helmignore's rules (and Helm's defaults) applied, links
// followed, irregular files refused, each file at most Helm's
// MaxDecompressedFileSize and all of them at most its
// MaxDecompressedChartSize, a UTF-8 byte order mark dropped.
func readDir(fsys fs.FS, top string) ([]*loader.BufferedFile, error) {
	rules := ignore.Empty()
	if data, err := readFile(fsys, path.Join(top, ignore.HelmIgnore), MaxHelmIgnore); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	rules.AddDefaults()
	var files []*loader.BufferedFile
	var total int64
	seen := 0
	var walk func(dir, rel string, links int) error
	walk = func(dir, rel string, links int) error {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return err
		}
		if seen += len(entries); seen > MaxChartEntries {
			return fmt.Errorf("more than %d files and folders", MaxChartEntries)
		}
		for _, e := range entries {
			p, n := path.Join(dir, e.Name()), path.Join(rel, e.Name())
			fi, err := fs.Stat(fsys, p) // links followed, inside fsys
			if err != nil {
				return err
			}
			depth := links
			if e.Type()&fs.ModeSymlink != 0 {
				depth++
			}
			if fi.IsDir() {
				if rules.Ignore(n, fi) {
					continue
				}
				if depth > maxLinkDepth {
					return fmt.Errorf("%s: links to folders more than %d deep", n, maxLinkDepth)
				}
				if err := walk(p, n, depth); err != nil {
					return err
				}
				continue
			}
			if rules.Ignore(n, fi) {
				continue
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("cannot load irregular file %s as it has file mode type bits set", n)
			}
			if fi.Size() > loader.MaxDecompressedFileSize {
				return fmt.Errorf("chart file %q is larger than the maximum file size %d", n, loader.MaxDecompressedFileSize)
			}
			data, err := readFile(fsys, p, loader.MaxDecompressedFileSize)
			if err != nil {
				return err
			}
			if total += int64(len(data)); total > loader.MaxDecompressedChartSize {
				return fmt.Errorf("chart files add up to more than %d bytes", loader.MaxDecompressedChartSize)
			}
			files = append(files, &loader.BufferedFile{Name: n, Data: bytes.TrimPrefix(data, utf8bom)})
		}
		return nil
	}
	if err := walk(top, "", 0); err != nil {
		return nil, err
	}
	return files, nil
}

var utf8bom = []byte{0xEF, 0xBB, 0xBF}

// readFile reads name from fsys, refusing more than max bytes.
func readFile(fsys fs.FS, name string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return confine.ReadAll(f, name, max)
}

// packageChart packages a loaded chart with the Helm SDK and rewrites the
// archive with fixed times and ownership, and its entries in one order —
// Chart.yaml first, then by path — so the same chart gives the same bytes.
// The order matters: Helm's loader keeps subcharts (folders or .tgz files
// under charts/) in map order, and chartutil.Save writes them in that order.
func packageChart(ch *chart.Chart, mtime time.Time) ([]byte, error) {
	tmp, err := scratch.MkdirTemp("", "ferry-chart-")
	if err != nil {
		return nil, err
	}
	defer tmp.Remove()
	path, err := chartutil.Save(ch, tmp.Path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	type entry struct {
		h    *tar.Header
		data []byte
	}
	var entries []entry
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		nh := &tar.Header{Typeflag: h.Typeflag, Name: h.Name, Mode: h.Mode, Size: h.Size, ModTime: mtime, Format: tar.FormatPAX}
		entries = append(entries, entry{nh, data})
	}
	chartYAML := ch.Name() + "/" + chartutil.ChartfileName
	sort.SliceStable(entries, func(i, j int) bool {
		a, b := entries[i].h.Name, entries[j].h.Name
		if (a == chartYAML) != (b == chartYAML) {
			return a == chartYAML
		}
		if a != b {
			return a < b
		}
		return bytes.Compare(entries[i].data, entries[j].data) < 0
	})
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := tw.WriteHeader(e.h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
