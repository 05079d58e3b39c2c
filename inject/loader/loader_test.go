package loader

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

var update = flag.Bool("update", false, "rewrite testdata/loader_<arch>.lst")

// helperEnv makes the test binary act as a fake stage 1 that prints its
// arguments and one environment variable.
const helperEnv = "FERRY_LOADER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Stdout.WriteString(strings.Join(os.Args, "|") + "|" + os.Getenv("FOO") + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestListingGolden(t *testing.T) {
	for _, arch := range Arches {
		t.Run(arch, func(t *testing.T) {
			l, err := Listing(arch)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join("testdata", "loader_"+arch+".lst")
			if *update {
				if err := os.WriteFile(p, []byte(l), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if l != string(want) {
				t.Fatalf("generated loader differs from %s (run go test ./inject/loader -run Golden -update and review the diff)", p)
			}
		})
	}
}

func TestSizeAndDeterminism(t *testing.T) {
	for _, arch := range Arches {
		a, err := ELF(arch)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := ELF(arch)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two builds differ", arch)
		}
		if len(a) > MaxSize {
			t.Errorf("%s: %d bytes, budget %d", arch, len(a), MaxSize)
		}
		t.Logf("%s loader: %d bytes", arch, len(a))
	}
	if _, err := ELF("riscv64"); err == nil || !strings.Contains(err.Error(), "riscv64") {
		t.Fatalf("unsupported arch: %v", err)
	}
}

// runner returns how to run the loader for arch on this machine, or skips.
func runner(t *testing.T, arch string) []string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("loader behaviour tests run on linux/amd64 (arm64 under qemu)")
	}
	if arch == "arm64" {
		return []string{peertool.Require(t, "qemu-aarch64-static")}
	}
	return nil
}

func TestLoader(t *testing.T) {
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range Arches {
		t.Run(arch, func(t *testing.T) {
			pre := runner(t, arch)
			dir := t.TempDir()
			bin, _ := ELF(arch)
			loader := filepath.Join(dir, "loader")
			os.WriteFile(loader, bin, 0o555)
			// Split the test binary (the fake stage 1) in three uneven chunks.
			var chunks []string
			for i, part := range [][]byte{self[:100], self[100 : len(self)/2], self[len(self)/2:]} {
				p := filepath.Join(dir, "chunk-"+string(rune('0'+i)))
				os.WriteFile(p, part, 0o444)
				chunks = append(chunks, p)
			}
			out := filepath.Join(dir, "out", "stage1")
			os.Mkdir(filepath.Dir(out), 0o755)
			run := func(args ...string) (string, string, int) {
				argv := append(append(append([]string{}, pre...), loader), args...)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Env = []string{helperEnv + "=1", "FOO=bar"}
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return stdout.String(), stderr.String(), code
			}
			args := append(append([]string{out}, chunks...), "--", "serve", "a b", "")
			stdout, stderr, code := run(args...)
			// Under qemu the exec of an amd64 stage 1 runs natively.
			if code != 0 || stdout != out+"|serve|a b||bar\n" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, self) {
				t.Fatal("joined stage 1 differs from its chunks")
			}
			if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o755 {
				t.Fatalf("mode %v", fi.Mode())
			}

			for _, tc := range []struct {
				name string
				args []string
				code int
				msg  string
			}{
				{"missing chunk", []string{out, chunks[0], filepath.Join(dir, "nope"), chunks[2], "--"}, 1,
					"ferry-loader: cannot open chunk " + filepath.Join(dir, "nope") + ": errno 2\n"},
				{"unreadable chunk", []string{out, chunks[0], dir, "--"}, 1, "ferry-loader: cannot read chunk " + dir + ": errno 21\n"},
				{"bad out", []string{filepath.Join(dir, "no", "such"), chunks[0], "--"}, 1,
					"ferry-loader: cannot create " + filepath.Join(dir, "no", "such") + ": errno 2\n"},
				{"no separator", []string{out, chunks[0], chunks[1]}, 2, "ferry-loader: usage: loader OUT CHUNK... -- [ARG...]\n"},
				{"no chunk", []string{out, "--", "x"}, 2, "ferry-loader: usage: loader OUT CHUNK... -- [ARG...]\n"},
				{"no args", nil, 2, "ferry-loader: usage: loader OUT CHUNK... -- [ARG...]\n"},
				{"not executable", []string{filepath.Join(dir, "text"), chunks[0], "--"}, 1, ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if tc.name == "not executable" {
						os.WriteFile(filepath.Join(dir, "text-chunk"), []byte("plain text\n"), 0o444)
						tc.args = []string{filepath.Join(dir, "text"), filepath.Join(dir, "text-chunk"), "--"}
						tc.msg = "ferry-loader: cannot exec " + filepath.Join(dir, "text") + ": errno 8\n"
					}
					stdout, stderr, code := run(tc.args...)
					if code != tc.code || !strings.Contains(stderr, tc.msg) || stdout != "" {
						t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d, %q", code, stderr, stdout, tc.code, tc.msg)
					}
				})
			}
		})
	}
}

// TestListingMatchesObjdump cross-checks the amd64 encoder against GNU
// objdump where it is installed.
func TestListingMatchesObjdump(t *testing.T) {
	objdump := peertool.Find("objdump")
	if objdump == "" {
		t.Skip("objdump not installed")
	}
	p, err := program("amd64")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "loader")
	os.WriteFile(f, p.elf(), 0o644)
	end := p.labels["msg_prefix"]
	out, err := exec.Command(objdump, "-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel",
		"--start-address="+strconv.Itoa(codeOffset), "--stop-address="+strconv.Itoa(codeOffset+end), f).CombinedOutput()
	if err != nil {
		t.Skipf("objdump: %v\n%s", err, out)
	}
	var offs []string
	for _, l := range strings.Split(string(out), "\n") {
		if off, rest, ok := strings.Cut(strings.TrimSpace(l), ":\t"); ok && rest != "" && !strings.Contains(l, "file format") {
			offs = append(offs, off)
			if strings.Contains(rest, "(bad)") {
				t.Errorf("objdump cannot decode: %s", l)
			}
		}
	}
	var want []string
	for _, l := range p.lines {
		if l.n > 0 && l.off < end {
			want = append(want, strconv.FormatInt(int64(codeOffset+l.off), 16))
		}
	}
	if strings.Join(offs, " ") != strings.Join(want, " ") {
		t.Fatalf("instruction boundaries differ:\nobjdump %v\nlisting %v", offs, want)
	}
}
