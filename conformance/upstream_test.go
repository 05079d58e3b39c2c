package conformance_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
)

// upstreamSuite is one version of the OCI distribution-spec conformance
// suite (github.com/opencontainers/distribution-spec/conformance), built
// into .bin/ by `make upstream-conformance` (mk/conformance.mk) from its own
// module under tools/oci-conformance/.
type upstreamSuite struct {
	name string
	env  string // the variable naming the binary
	// run runs the binary against the registry at hostPort in dir and
	// returns its counts, its output and the error of its exit.
	run func(ctx context.Context, bin, hostPort, dir string) (upstreamCounts, []byte, error)
}

// upstreamCounts are the results of one run of a suite.
type upstreamCounts struct {
	Passed, Failed, Skipped int
}

var upstreamSuites = []upstreamSuite{
	{"v1.1", "FERRY_OCI_CONFORMANCE_V1_1", runUpstreamV11},
	{"main", "FERRY_OCI_CONFORMANCE_MAIN", runUpstreamMain},
}

// TestUpstreamConformance runs the upstream OCI distribution-spec
// conformance suite, of the v1.1 release line (the newest the module proxy
// serves of it: 2023-11-01; it serves nothing of the v1.1.1 tag) and the
// newest main, against
// `ferry registry serve` on the filesystem and on S3 (MinIO on loopback),
// with every workflow enabled (pull, push, content discovery, content
// management), and fails on any failed test. `make upstream-conformance`
// runs it (FERRY_UPSTREAM_CONFORMANCE=1 and the suites' binaries in
// FERRY_OCI_CONFORMANCE_V1_1 and FERRY_OCI_CONFORMANCE_MAIN).
func TestUpstreamConformance(t *testing.T) {
	if os.Getenv("FERRY_UPSTREAM_CONFORMANCE") != "1" {
		t.Skip("set FERRY_UPSTREAM_CONFORMANCE=1 (make upstream-conformance) to run the upstream suites")
	}
	for _, s := range upstreamSuites {
		if os.Getenv(s.env) == "" {
			t.Fatalf("%s: set %s to the suite's binary (make upstream-conformance builds it)", s.name, s.env)
		}
	}
	bin := ferryBinary(t)
	ms := miniotest.Start(t)
	drivers := []struct {
		name string
		args func() []string
		env  []string
	}{
		{"filesystem", func() []string { return []string{"--root", t.TempDir()} }, nil},
		{"s3", func() []string { return []string{"--storage", s3URL(ms.Bucket(t))} }, ms.Env()},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s  %-10s  %6s  %6s  %7s\n", "suite", "storage", "passed", "failed", "skipped")
	for _, s := range upstreamSuites {
		for _, d := range drivers {
			t.Run(s.name+"/"+d.name, func(t *testing.T) {
				// A registry of its own per run: one suite's leftovers
				// never meet the other's.
				u, err := url.Parse(startFerryServe(t, bin, d.args(), d.env))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				dir := t.TempDir()
				c, out, err := s.run(ctx, os.Getenv(s.env), u.Host, dir)
				fmt.Fprintf(&table, "%-8s  %-10s  %6d  %6d  %7d\n", s.name, d.name, c.Passed, c.Failed, c.Skipped)
				if err != nil || c.Failed > 0 || c.Passed == 0 {
					if rd := os.Getenv("FERRY_CONFORMANCE_OUT"); rd != "" {
						_ = os.MkdirAll(rd, 0o755)
						_ = os.WriteFile(filepath.Join(rd, "upstream-"+s.name+"-"+d.name+".log"), out, 0o644)
					}
					t.Errorf("%s on %s: %d passed, %d failed (%v)\n%s", s.name, d.name, c.Passed, c.Failed, err, tail(out, 60))
				}
			})
		}
	}
	fmt.Printf("\nOCI distribution-spec conformance suite (upstream) against ferry registry serve:\n%s\n", table.String())
}

// runUpstreamV11 runs the v1.1 suite, a Ginkgo test binary configured
// by environment variables (its README), with all four workflows and the
// mount without from (OCI_AUTOMATIC_CROSSMOUNT=0: ferry opens an upload
// session, 202).
func runUpstreamV11(ctx context.Context, bin, hostPort, dir string) (upstreamCounts, []byte, error) {
	cmd := exec.CommandContext(ctx, bin, "-ginkgo.no-color")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"OCI_ROOT_URL=http://"+hostPort,
		"OCI_NAMESPACE=conformance/repo1",
		"OCI_CROSSMOUNT_NAMESPACE=conformance/other",
		"OCI_TEST_PULL=1", "OCI_TEST_PUSH=1", "OCI_TEST_CONTENT_DISCOVERY=1", "OCI_TEST_CONTENT_MANAGEMENT=1",
		"OCI_AUTOMATIC_CROSSMOUNT=0",
		"OCI_HIDE_SKIPPED_WORKFLOWS=0",
		"OCI_REPORT_DIR="+dir,
	)
	out, err := cmd.CombinedOutput()
	// "Ran 75 of 79 Specs in 0.967 seconds" … "73 Passed | 2 Failed | 0 Pending | 4 Skipped"
	var c upstreamCounts
	m := regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| \d+ Pending \| (\d+) Skipped`).FindSubmatch(out)
	if m == nil {
		return c, out, fmt.Errorf("no Ginkgo summary in the output (exit: %v)", err)
	}
	c.Passed, _ = strconv.Atoi(string(m[1]))
	c.Failed, _ = strconv.Atoi(string(m[2]))
	c.Skipped, _ = strconv.Atoi(string(m[3]))
	return c, out, err
}

// runUpstreamMain runs the newest suite, a program configured by
// environment variables (its README), with its defaults for spec 1.1: every
// API and data test of the spec, pull, push, content discovery (tags,
// referrers) and content management (deletes).
func runUpstreamMain(ctx context.Context, bin, hostPort, dir string) (upstreamCounts, []byte, error) {
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"OCI_REGISTRY="+hostPort,
		"OCI_TLS=disabled",
		"OCI_REPO1=conformance/repo1",
		"OCI_REPO2=conformance/repo2",
		"OCI_API_PULL=true", "OCI_API_PUSH=true",
		"OCI_API_TAGS_LIST=true", "OCI_API_REFERRER=true",
		"OCI_API_TAGS_DELETE=true", "OCI_API_MANIFESTS_DELETE=true", "OCI_API_BLOBS_DELETE=true",
		"OCI_RESULTS_DIR="+dir,
	)
	out, err := cmd.CombinedOutput()
	// The summary: "  Pass....: 846", "  FAIL....: 0", "  Error...: 0", …
	var c upstreamCounts
	found := 0
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		n, nerr := strconv.Atoi(strings.TrimSpace(v))
		if !ok || nerr != nil {
			continue
		}
		switch strings.TrimRight(k, ".") {
		case "Pass":
			c.Passed, found = n, found+1
		case "FAIL", "Error":
			c.Failed += n
			found++
		case "Skip", "Disabled":
			c.Skipped += n
		}
	}
	if found < 3 {
		return c, out, fmt.Errorf("no result summary in the output (exit: %v)", err)
	}
	return c, out, err
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
