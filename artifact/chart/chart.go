// Package chart packages Helm charts for ferry packages with Helm's SDK:
// Packager is the artifact.ChartPackager that `ferry package create` uses.
// It lives apart from package artifact so that what does not create
// packages does not link Helm.
package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/ferrypkg/ferry/artifact"
)

// Packager packages charts with Helm's SDK. The zero value is ready.
type Packager struct{}

var _ artifact.ChartPackager = Packager{}

// PackageChart loads the chart at path (a folder or a .tgz archive) with
// Helm's loader, which validates it. A folder is packaged as `helm package`
// does, then made reproducible (packageChart); an archive is kept as it is.
// The config is the chart's metadata as JSON, as Helm stores it. Errors
// are Helm's, unprefixed: the caller names the chart.
func (Packager) PackageChart(path string, mtime time.Time) (archive, config []byte, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	var ch *chart.Chart
	if fi.IsDir() {
		if ch, err = loader.LoadDir(path); err != nil {
			return nil, nil, err
		}
		if archive, err = packageChart(ch, mtime); err != nil {
			return nil, nil, fmt.Errorf("package: %w", err)
		}
	} else {
		if fi.Size() > artifact.MaxChartSize {
			return nil, nil, fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
		}
		if archive, err = os.ReadFile(path); err != nil {
			return nil, nil, err
		}
		if ch, err = loader.LoadArchive(bytes.NewReader(archive)); err != nil {
			return nil, nil, err
		}
	}
	config, err = json.Marshal(ch.Metadata)
	if err != nil {
		return nil, nil, err
	}
	return archive, config, nil
}

// packageChart packages a loaded chart with the Helm SDK and rewrites the
// archive with fixed times and ownership, and its entries in one order —
// Chart.yaml first, then by path — so the same chart gives the same bytes.
// The order matters: Helm's loader keeps subcharts (folders or .tgz files
// under charts/) in map order, and chartutil.Save writes them in that order.
func packageChart(ch *chart.Chart, mtime time.Time) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "ferry-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path, err := chartutil.Save(ch, tmp)
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
