package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/internal/testsupport/miniotest"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestRegistryMatrix runs the whole suite against `ferry registry serve` (a
// real process on the filesystem; one on S3, MinIO on loopback; two on one
// bucket behind a round-robin proxy) and Debian's docker-registry
// (distribution 2.8) as a reference, and prints a workflow × registry table. Any failed or
// skipped check against ferry fails the test; the reference's failures are
// information. `make conformance` runs it (FERRY_CONFORMANCE_MATRIX=1);
// FERRY_CONFORMANCE_OUT=<dir> also writes each report as JSON.
func TestRegistryMatrix(t *testing.T) {
	if os.Getenv("FERRY_CONFORMANCE_MATRIX") != "1" {
		t.Skip("set FERRY_CONFORMANCE_MATRIX=1 (make conformance) to run the registry matrix")
	}
	ctx := context.Background()
	type target struct {
		name     string
		url      string
		required bool
	}
	bin := ferryBinary(t)
	ms := miniotest.Start(t)
	s3Args := func() []string { return []string{"--storage", s3URL(ms.Bucket(t))} }
	shared := s3Args()
	targets := []target{
		{"ferry registry serve", startFerryServe(t, bin, []string{"--root", t.TempDir()}, nil), true},
		{"ferry registry serve (S3)", startFerryServe(t, bin, s3Args(), ms.Env()), true},
		// Two processes on one bucket behind a round-robin proxy: each
		// request of a workflow goes to the other process.
		{"2× ferry registry serve (S3), round-robin", roundRobin(t,
			startFerryServe(t, bin, shared, ms.Env()), startFerryServe(t, bin, shared, ms.Env())), true},
		{"docker-registry 2.8", registrytest.StartDockerRegistry(t), false},
	}
	var names []string
	var reports []conformance.Report
	for _, tg := range targets {
		start := time.Now()
		rep, err := conformance.Run(ctx, conformance.Config{URL: tg.url})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s in %v", tg.name, rep.Total(), time.Since(start).Round(time.Millisecond))
		names, reports = append(names, tg.name), append(reports, rep)
		if dir := os.Getenv("FERRY_CONFORMANCE_OUT"); dir != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			file := strings.NewReplacer(" ", "-", ".", "").Replace(tg.name) + ".json"
			if err := os.MkdirAll(dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(dir, file), b, 0o644)
			}
		}
		for _, r := range rep.Results {
			if r.Status == conformance.Passed {
				continue
			}
			if tg.required {
				t.Errorf("%s: %s %s: %s", tg.name, r.ID, r.Status, r.Detail)
			} else {
				fmt.Printf("  %s (reference): %-7s %-34s %s\n", tg.name, r.Status, r.ID, r.Detail)
			}
		}
	}
	fmt.Println()
	_ = conformance.WriteMatrix(os.Stdout, names, reports)
	fmt.Println()
}

// ferryBinary is FERRY_BIN, or ferry built for the test.
func ferryBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FERRY_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "ferry")
	_, file, _, _ := runtime.Caller(0)
	build := exec.Command("go", "build", "-o", bin, "./cmd/ferry")
	build.Dir = filepath.Join(filepath.Dir(file), "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ferry: %v\n%s", err, out)
	}
	return bin
}

// s3URL is st as `--storage` takes it (credentials go in the environment).
func s3URL(st *registry.S3) string {
	c := *st
	c.AccessKey, c.SecretKey = "", ""
	return c.String()
}

// roundRobin serves on a free loopback port and sends each request to the
// next of the given registries, as a load balancer without affinity does.
func roundRobin(t *testing.T, urls ...string) string {
	t.Helper()
	var proxies []*httputil.ReverseProxy
	for _, u := range urls {
		target, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		// The proxy keeps the client's Host header: the registries'
		// Locations then point at the balancer.
		proxies = append(proxies, httputil.NewSingleHostReverseProxy(target))
	}
	var n atomic.Uint64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[n.Add(1)%uint64(len(proxies))].ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// startFerryServe runs `ferry registry serve` with storageArgs (and env
// added to its environment) on a free loopback port and returns its URL.
func startFerryServe(t *testing.T, bin string, storageArgs, env []string) string {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{"registry", "serve"}, storageArgs...), "--addr", "127.0.0.1:0", "--output", "json")...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ferry registry serve exited with %v after SIGINT", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("ferry registry serve did not stop within 30s of SIGINT")
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the serve address: %v", err)
	}
	var info struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &info); err != nil || info.URL == "" {
		t.Fatalf("serve printed %q, want JSON with a url", line)
	}
	return info.URL
}
