package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestRegistryMatrix runs the whole suite against `ferry registry serve` (a
// real process on the filesystem) and Debian's docker-registry (distribution
// 2.8) as a reference, and prints a workflow × registry table. Any failed or
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
	targets := []target{
		{"ferry registry serve", startFerryServe(t), true},
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

// startFerryServe runs `ferry registry serve` on a free loopback port with a
// temporary root and returns its URL. FERRY_BIN names the binary; otherwise
// it is built.
func startFerryServe(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("FERRY_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "ferry")
		_, file, _, _ := runtime.Caller(0)
		build := exec.Command("go", "build", "-o", bin, "./cmd/ferry")
		build.Dir = filepath.Join(filepath.Dir(file), "..")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/ferry: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "registry", "serve", "--root", t.TempDir(), "--addr", "127.0.0.1:0", "--output", "json")
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
