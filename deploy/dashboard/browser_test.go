package dashboard

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/browser"
)

// The upload page in a real browser, with no cluster behind it: the
// script runs under the CSP (no console error), picking a file that is
// not a package and inspecting it says so, and an upload the cluster
// cannot take is refused in one line. (e2e's TestDashboard does the rest
// against a cluster.)
func TestUploadPageInBrowser(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: HostsFor(ts.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	defer ts.Close()
	junk := filepath.Join(t.TempDir(), "junk.tar")
	if err := os.WriteFile(junk, []byte("not a package"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, console := browser.New(t)
	ctx, cancel := context.WithTimeout(b, 2*time.Minute)
	defer cancel()
	text := func(sel string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			page, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s: %v; the page says:\n%s", sel, err, page)
		}
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/c/lab/upload"),
		chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{junk}),
		chromedp.Click(chromedp.CSS("#inspect-btn"))); err != nil {
		t.Fatal(err)
	}
	if v := text("#verdict"); !strings.Contains(v, "not a ferry package") {
		t.Errorf("inspect of junk: %q", v)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#upload-btn"))); err != nil {
		t.Fatal(err)
	}
	if v := text("#refusal"); !strings.Contains(v, "refused (502)") || !strings.Contains(v, "127.0.0.1:1") {
		t.Errorf("upload to an unreachable cluster: %q", v)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "upload-refused.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if errs := console.Errors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}

// A split package picked in the browser, its index and all its parts: the
// parts are sent one after the other and read as the one archive; a part
// left out of the pick is named before anything is sent.
func TestUploadPartsInBrowser(t *testing.T) {
	ts := httptest.NewUnstartedServer(nil)
	srv, err := New(Options{Clusters: []Cluster{unreachable()}, Namespace: "ferry", Hosts: HostsFor(ts.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	defer ts.Close()
	src := t.TempDir()
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i*7919 + i>>9) // not compressible into one part
	}
	for name, body := range map[string][]byte{
		"ferry.yaml": []byte("apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: parted, version: 1.0.0}\ncomponents:\n  - name: c\n    files: [{source: data.bin, target: /data.bin}]\n"),
		"data.bin":   data,
	} {
		if err := os.WriteFile(filepath.Join(src, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := build.Create(context.Background(), def, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(out, "parted.tar")})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := artifact.Split(context.Background(), res.Path, artifact.SplitOptions{PartSize: artifact.MinPartSize})
	if err != nil {
		t.Fatal(err)
	}
	picked := []string{res.Path + artifact.PartsIndexSuffix}
	for _, p := range ps.Parts {
		picked = append(picked, filepath.Join(out, p.Name))
	}
	b, console := browser.New(t)
	ctx, cancel := context.WithTimeout(b, 2*time.Minute)
	defer cancel()
	text := func(sel string) string {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			page, _ := chromedp.Run(b, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s: %v; the page says:\n%s", sel, err, page)
		}
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Every part but the second: named, nothing sent.
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/c/lab/upload"),
		chromedp.SetUploadFiles(chromedp.CSS("#file"), append([]string{picked[0], picked[1]}, picked[3:]...)),
		chromedp.Click(chromedp.CSS("#inspect-btn"))); err != nil {
		t.Fatal(err)
	}
	if v := text("#phases"); !strings.Contains(v, "part parted.tar.part002 is missing (part 2 of "+strconv.Itoa(len(ps.Parts))+")") {
		t.Errorf("a part left out: %q", v)
	}
	// All of them: read as the archive (the report), then the cluster's
	// keys are out of reach.
	if err := chromedp.Do(ctx, chromedp.SetUploadFiles(chromedp.CSS("#file"), picked),
		chromedp.Click(chromedp.CSS("#inspect-btn"))); err != nil {
		t.Fatal(err)
	}
	if v := text("#inspect-name"); v != "parted 1.0.0" {
		t.Errorf("inspect of the parts: %q", v)
	}
	if errs := console.Errors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}
