package artifact_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/childproc"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// pinnedPushes times ferry's and crane's pushes of the same content with
// the registry on a core of its own and the client on the others, as a
// registry on another machine is: the registry is a `ferry registry serve`
// process (the embedded registry's code) under `taskset -c 0`, each client
// under `taskset -c 1-`. Each push goes to a new, empty registry; the order
// alternates between rounds. It returns each tool's median run (server is
// the registry process's CPU), or ok false where the machine has one core
// or no taskset.
func pinnedPushes(b *testing.B, ferry, crane, pkg, layout string, rounds int) (f, c benchRun, ok bool) {
	b.Helper()
	taskset, err := exec.LookPath("taskset")
	if err != nil || runtime.NumCPU() < 2 {
		b.Logf("no pinned pushes: taskset %v, %d CPUs", err, runtime.NumCPU())
		return f, c, false
	}
	client := []string{taskset, "-c", "1-" + strconv.Itoa(runtime.NumCPU()-1)}
	runs := map[string][]benchRun{}
	for r := range rounds {
		steps := []struct {
			name string
			args []string
		}{
			{"ferry", []string{ferry, "package", "push", pkg}},
			{"crane", []string{crane, "push", "--index", layout}},
		}
		if r%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, st := range steps {
			host, stop := pinnedRegistry(b, taskset, ferry)
			run := timeRun(b, append(append(client, st.args...), host+"/bench/pkg:1")...)
			run.server = stop()
			runs[st.name] = append(runs[st.name], run)
		}
	}
	return median(runs["ferry"]), median(runs["crane"]), true
}

// pinnedRegistry starts `ferry registry serve` on CPU 0 with empty storage
// and returns its host and a stop that ends it and returns its CPU time.
func pinnedRegistry(b *testing.B, taskset, ferry string) (string, func() time.Duration) {
	b.Helper()
	addr, err := registrytest.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp(b.TempDir(), "pinned")
	if err != nil {
		b.Fatal(err)
	}
	// Tied to the benchmark: killed with it, even by SIGKILL.
	cmd := childproc.Command(context.Background(), taskset, "-c", "0", ferry, "registry", "serve", "--addr", addr, "--root", filepath.Join(root, "storage"))
	log, err := os.Create(filepath.Join(root, "registry.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() time.Duration {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		log.Close()
		os.RemoveAll(root)
		if cmd.ProcessState == nil {
			return 0
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err := registrytest.WaitReady("http://"+addr, 15*time.Second); err != nil {
		out, _ := os.ReadFile(log.Name())
		stop()
		b.Fatalf("ferry registry serve on %s: %v\n%s", addr, err, out)
	}
	return addr, stop
}
