package artifact_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// hostileMaxRSS is the budget for inspect, verify and push of any
// input.
const hostileMaxRSS = 150 << 20

// hostileFixture is an archive built to cost memory or time, and the
// refusal it must get.
type hostileFixture struct {
	name, want string
	data       []byte
	// blobsMayStay: the refusal comes only after small blobs that could not
	// be told apart from the package's own were uploaded (bounded by the
	// archive); no upload session may stay either way.
	blobsMayStay bool
}

// hostileFixtures builds each hostile archive (a few hundred KB each) from
// a real package's head.
func hostileFixtures(t testing.TB) []hostileFixture {
	out := filepath.Join(t.TempDir(), "small.tar")
	smallPackage(t, out, 64<<10)
	entries := readTar(t, out)
	return []hostileFixture{
		// 269 KB expanding to 8 GiB: the entry's tar header says so.
		{"zstd bomb", "is more than ferry.json accounts for", zeroBomb(t, entries, nil, 8<<30, 0), false},
		// The same, with ferry.json claiming a 1 TiB image.
		{"zstd bomb, ferry.json claims 1 TiB", fmt.Sprintf("more than %d times the archive's", artifact.MaxExpansion),
			zeroBomb(t, entries, liarConfig(t, entries, 1<<40), 8<<30, 0), false},
		// A bomb as large as a lying ferry.json can make it pass those
		// checks: 8 MiB of zeros after 100 KB of ballast, a blob that is
		// not what its name says (its upload cancelled).
		{"zstd bomb within its claim", fmt.Sprintf("does not match its digest|expands to more than %d times", artifact.MaxExpansion),
			zeroBomb(t, entries, liarConfig(t, entries, 9<<20), 8<<20, 100<<10), true},
		// 200 JSON blobs of 4 MiB that look like manifests, in 134 KB.
		{"json flood", fmt.Sprintf("is more than ferry.json accounts for|expands to more than %d times", artifact.MaxExpansion), jsonFlood(t, entries, nil, 200, artifact.MaxManifestSize, false), false},
		// Incompressible ones under a ferry.json claiming room for them.
		{"json flood within its claim", fmt.Sprintf("total more than %d bytes", artifact.MaxGraphSize),
			jsonFlood(t, entries, liarConfig(t, entries, 48<<20), 12, artifact.MaxManifestSize, true), false},
		// A frame that declares a 512 MiB window.
		{"512 MiB window", "needs a window over 8 MiB", windowArchive(t, out, 29), false},
		// More blobs than a package may have.
		{"too many blobs", fmt.Sprintf("more than %d blobs", artifact.MaxBlobs), manyBlobs(t, entries, artifact.MaxBlobs+1), true},
	}
}

// hostileRun is one run of a child process over a fixture.
type hostileRun struct {
	rss    int64 // peak RSS, bytes
	cpu    time.Duration
	stderr string
	code   int
}

// runHostile runs op (inspect, verify, push) over path in a child process
// (this test binary, TestHostileChild), as the CLI would, and measures it:
// the child reports its own peak RSS (VmHWM: a child's rusage would count
// the parent's pages it shared before exec) and the CPU time of the
// operation alone (process start-up is the same for every input).
func runHostile(t testing.TB, op, path, registryHost, pubKey string) hostileRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostileChild$")
	cmd.Env = append(os.Environ(), "FERRY_HOSTILE_OP="+op, "FERRY_HOSTILE_PATH="+path, "FERRY_HOSTILE_REGISTRY="+registryHost, "FERRY_HOSTILE_KEY="+pubKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run := hostileRun{stderr: strings.TrimSpace(stderr.String())}
	if ee, ok := err.(*exec.ExitError); ok {
		run.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var cpu int64
	if _, err := fmt.Sscanf(stdout.String(), "rss %d cpu %d", &run.rss, &cpu); err != nil {
		t.Fatalf("child reported %q (stderr %q)", stdout.String(), run.stderr)
	}
	run.cpu = time.Duration(cpu)
	return run
}

// TestHostileChild is the child of runHostile: it opens the package and
// inspects, verifies or pushes it, prints its peak RSS and the operation's
// CPU time, and exits 3 with the error on stderr when refused.
func TestHostileChild(t *testing.T) {
	op := os.Getenv("FERRY_HOSTILE_OP")
	if op == "" {
		t.Skip("run by runHostile")
	}
	ctx := context.Background()
	var pub *artifact.PublicKey
	if op == "verify" {
		var err error
		if pub, err = artifact.LoadPublicKey(os.Getenv("FERRY_HOSTILE_KEY")); err != nil {
			t.Fatal(err)
		}
	}
	start := selfCPU()
	err := func() error {
		r, err := artifact.Open(ctx, os.Getenv("FERRY_HOSTILE_PATH"))
		if err != nil {
			return err
		}
		switch op {
		case "inspect":
			_, err = artifact.Inspect(ctx, r, "", nil)
		case "verify":
			_, err = artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{pub}})
		case "push":
			_, err = artifact.Push(ctx, r, os.Getenv("FERRY_HOSTILE_REGISTRY")+"/hostile/pkg:1", artifact.PushOptions{})
		}
		return err
	}()
	fmt.Printf("rss %d cpu %d\n", vmHWM(os.Getpid())<<10, selfCPU()-start)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// TestHostileInputsBounded: every hostile archive is refused with its own
// one-line reason by inspect, verify and push, within hostileMaxRSS of
// memory, and a refused push leaves the registry empty: nothing uploaded,
// no upload session. CPU time is reported here and budgeted in
// BenchmarkHostile.
func TestHostileInputsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hostile archives and runs child processes")
	}
	dir := t.TempDir()
	keyPair(t, dir, "k")
	for _, f := range hostileFixtures(t) {
		p := filepath.Join(dir, strings.ReplaceAll(f.name, " ", "-")+".tar.zst")
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"inspect", "verify", "push"} {
			t.Run(f.name+"/"+op, func(t *testing.T) {
				root := t.TempDir()
				host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
				run := runHostile(t, op, p, host, filepath.Join(dir, "k.pub"))
				t.Logf("%s of %d KB: refused in %v CPU, peak RSS %d MiB: %s", op, len(f.data)>>10, run.cpu.Round(time.Millisecond), run.rss>>20, run.stderr)
				if run.code != 3 || !regexp.MustCompile(f.want).MatchString(run.stderr) || strings.Contains(run.stderr, "\n") {
					t.Fatalf("exit %d, error %q; want a one-line refusal containing %q", run.code, run.stderr, f.want)
				}
				if run.rss > hostileMaxRSS {
					t.Errorf("peak RSS %d MiB, budget %d MiB", run.rss>>20, hostileMaxRSS>>20)
				}
				if s := readStorage(t, root); (len(s.blobs) > 0 && !f.blobsMayStay) || len(s.uploads) > 0 || len(s.tags) > 0 {
					t.Errorf("the refused push left %d blobs, uploads %v, tags %v", len(s.blobs), s.uploads, s.tags)
				}
			})
		}
	}
}

// BenchmarkHostile: the worst CPU per MiB of archive read and the worst
// peak RSS over every hostile fixture and inspect, verify and push.
// Budgets: 1 s of CPU per MiB read, 150 MiB. (The fixtures are one zstd
// frame each, as a hostile archive would be: push reads them twice, with
// two streams.)
func BenchmarkHostile(b *testing.B) {
	dir := b.TempDir()
	host := registrytest.New(b)
	keyPair(b, dir, "k")
	var worstCPU float64
	var worstRSS int64
	var worstCPUName, worstRSSName string
	for range b.N {
		for _, f := range hostileFixtures(b) {
			p := filepath.Join(dir, strings.ReplaceAll(f.name, " ", "-")+".tar.zst")
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				b.Fatal(err)
			}
			for _, op := range []string{"inspect", "verify", "push"} {
				run := runHostile(b, op, p, host, filepath.Join(dir, "k.pub"))
				if run.code != 3 {
					b.Fatalf("%s %s: exit %d: %s", op, f.name, run.code, run.stderr)
				}
				// Every fixture is one zstd frame, which push reads with two
				// streams, each decompressing it whole.
				mib := float64(len(f.data)) / (1 << 20)
				if op == "push" {
					mib *= 2
				}
				b.Logf("%-36s %-7s %6d KB  CPU %6.3f s (%.2f s per MiB read)  RSS %3d MiB", f.name, op, len(f.data)>>10, run.cpu.Seconds(), run.cpu.Seconds()/mib, run.rss>>20)
				if c := run.cpu.Seconds() / mib; c > worstCPU {
					worstCPU, worstCPUName = c, f.name+"/"+op
				}
				if run.rss > worstRSS {
					worstRSS, worstRSSName = run.rss, f.name+"/"+op
				}
			}
		}
	}
	b.ReportMetric(worstCPU, "worst-cpu-s/MiB")
	b.ReportMetric(float64(worstRSS>>20), "worst-rss-MiB")
	b.Logf("worst CPU %.2f s per MiB read (%s), budget 1; worst peak RSS %d MiB (%s), budget 150", worstCPU, worstCPUName, worstRSS>>20, worstRSSName)
	if worstCPU > 1 || worstRSS > hostileMaxRSS {
		b.Fatal("over budget")
	}
}
