package gitrepo

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestMain runs createChild when this binary is started as runCreate's child.
func TestMain(m *testing.M) {
	if dir := os.Getenv("FERRY_GITREPO_CREATE"); dir != "" {
		createChild(dir, os.Getenv("FERRY_GITREPO_OUT"))
		return
	}
	os.Exit(m.Run())
}

// createChild creates the package dir/ferry.yaml defines at out, then
// prints its peak RSS (VmHWM, bytes); it exits 3 with the error on stderr
// when create fails.
func createChild(dir, out string) {
	def, err := definition.Load(dir)
	if err == nil {
		_, err = build.Create(context.Background(), def, build.CreateOptions{Output: out, Git: Fetcher{}})
	}
	fmt.Printf("rss %d\n", peakRSS())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// peakRSS is this process's peak resident set (VmHWM), in bytes.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// runCreate creates, in a child process (this test binary), the package
// the definition in dir describes, and returns its peak RSS.
func runCreate(t testing.TB, dir string) int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FERRY_GITREPO_CREATE="+dir, "FERRY_GITREPO_OUT="+filepath.Join(t.TempDir(), "pkg.tar.zst"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("create: %v: %s", err, stderr.String())
	}
	var rss int64
	if _, err := fmt.Sscanf(stdout.String(), "rss %d", &rss); err != nil {
		t.Fatalf("child said %q", stdout.String())
	}
	return rss
}

// largeRepository makes, with Debian's git, a definition folder holding a
// repository whose one commit has a file of size bytes (written by fill),
// and a ferry.yaml carrying it with its history.
func largeRepository(t testing.TB, size int64, fill func(*os.File, int64) error) string {
	t.Helper()
	def := t.TempDir()
	repo := filepath.Join(def, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(repo, "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(f, size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.WriteFile(filepath.Join(repo, "README"), []byte("large\n"), 0o644)
	gitRun(t, repo, "init", "-q", "-b", "main")
	gitRun(t, repo, "-c", "core.compression=0", "-c", "core.looseCompression=1", "add", ".")
	gitRun(t, repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "large")
	yaml := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: large, version: 1.0.0}\ncomponents:\n  - name: c\n    repositories:\n      - {url: \"https://git.example/o/large.git\", path: repo}\n"
	if err := os.WriteFile(filepath.Join(def, "ferry.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return def
}

func zeros(f *os.File, size int64) error { return f.Truncate(size) }

// TestLargeRepositoryBounded: create of a repository holding a 256 MiB
// file (tree and history), read from a folder or cloned over HTTP, stays
// within 150 MiB: objects over LargeObject are streamed, never held. (make
// bench measures 3 GiB of random bytes: BenchmarkCreateLargeRepository.)
func TestLargeRepositoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("makes a 256 MiB repository")
	}
	dir := largeRepository(t, 256<<20, zeros)
	rss := runCreate(t, dir)
	t.Logf("create of a local repository with a 256 MiB file: peak RSS %d MiB", rss>>20)
	if rss > 150<<20 {
		t.Errorf("local: peak RSS %d MiB, budget 150 MiB", rss>>20)
	}
	url := gitServer(t, filepath.Join(dir, "repo"), "u", "p")
	netrc := filepath.Join(t.TempDir(), "netrc")
	os.WriteFile(netrc, []byte("machine 127.0.0.1 login u password p\n"), 0o600)
	t.Setenv("NETRC", netrc)
	yaml := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: large, version: 1.0.0}\ncomponents:\n  - name: c\n    repositories:\n      - {url: \"" + url + "\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "ferry.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	rss = runCreate(t, dir)
	t.Logf("create of the same repository cloned over HTTP: peak RSS %d MiB", rss>>20)
	if rss > 150<<20 {
		t.Errorf("clone: peak RSS %d MiB, budget 150 MiB", rss>>20)
	}
}

// random fills f with size pseudo-random bytes (incompressible, as a real
// large file is).
func random(f *os.File, size int64) error {
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	for size > 0 {
		n := min(size, int64(len(buf)))
		rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}

// BenchmarkCreateLargeRepository (make bench): create of a repository
// holding a 3 GiB file of random bytes, tree and history, by the real
// create in a child process. Budget: 150 MiB of peak RSS.
func BenchmarkCreateLargeRepository(b *testing.B) {
	dir := largeRepository(b, 3<<30, random)
	for b.Loop() {
		start := time.Now()
		rss := runCreate(b, dir)
		b.ReportMetric(float64(rss>>20), "peak-MiB")
		b.Logf("create of a repository with a 3 GiB file: %v, peak RSS %d MiB (budget 150 MiB)", time.Since(start).Round(time.Second), rss>>20)
		if rss > 150<<20 {
			b.Errorf("peak RSS %d MiB, budget 150 MiB", rss>>20)
		}
	}
}
