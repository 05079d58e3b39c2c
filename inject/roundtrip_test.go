package inject

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/injector"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

const testRepo = "ferry/registry"

func requireLinuxAMD64(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the on-disk round trip runs on linux/amd64 (arm64 under qemu)")
	}
}

// planFor lays out a random registry image, builds its payload and plans
// an injector for arch.
func planFor(t *testing.T, arch string, payload *Payload) (*Plan, ocispec.Descriptor) {
	t.Helper()
	layout := t.TempDir()
	md := registryImage(t, layout, "1.0.0", 3<<20, 200<<10, 10)
	if payload == nil {
		p, err := NewPayload(os.DirFS(layout))
		if err != nil {
			t.Fatal(err)
		}
		payload = &p
	}
	plan, err := NewPlan(Options{NodeName: "node-1", Image: "pause:3.10", Arch: arch, Stage1: stage1(t, arch), Payload: *payload})
	if err != nil {
		t.Fatal(err)
	}
	return plan, md
}

func indexDigest(t *testing.T, dir string) digest.Digest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, b)
	}
	return idx.Manifests[0].Digest
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestRoundTrip: layout → plan → ConfigMaps mounted as the kubelet does →
// loader → stage 1 → crane and skopeo pull the original digest.
func TestRoundTrip(t *testing.T) {
	requireLinuxAMD64(t)
	crane := peertool.Require(t, "crane")
	skopeo := peertool.Require(t, "skopeo")
	plan, md := planFor(t, "amd64", nil)
	root := t.TempDir()
	mountPod(t, root, plan)
	argv, addr := containerArgv(t, root, plan)
	start := time.Now()
	p := startInjector(t, root, addr, argv)
	if err := p.ready(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("ready in %v; %d ConfigMaps; stderr:\n%s", time.Since(start), len(plan.ConfigMaps), p.stderr.String())

	ref := addr + "/" + testRepo
	if got := run(t, crane, "digest", "--insecure", ref+":1.0.0"); got != md.Digest.String() {
		t.Fatalf("crane digest = %s, want %s", got, md.Digest)
	}
	out := filepath.Join(t.TempDir(), "crane")
	run(t, crane, "pull", "--insecure", "--format=oci", ref+"@"+md.Digest.String(), out)
	if got := indexDigest(t, out); got != md.Digest {
		t.Fatalf("crane pull: %s, want %s", got, md.Digest)
	}
	out = filepath.Join(t.TempDir(), "skopeo")
	run(t, skopeo, "copy", "--quiet", "--preserve-digests", "--src-tls-verify=false", "docker://"+ref+"@"+md.Digest.String(), "oci:"+out+":copy")
	if got := indexDigest(t, out); got != md.Digest {
		t.Fatalf("skopeo copy: %s, want %s", got, md.Digest)
	}
	// Graceful on SIGTERM.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 15*time.Second); code != 0 || !strings.Contains(p.stderr.String(), "shut down") {
		t.Fatalf("exit %d after SIGTERM: %s", code, p.stderr.String())
	}
}

// TestRoundTripARM64 runs the arm64 loader and stage 1 under qemu. Without
// binfmt_misc the loader's execve of an arm64 binary fails (ENOEXEC), so
// the test then runs the joined stage 1 under qemu itself.
func TestRoundTripARM64(t *testing.T) {
	requireLinuxAMD64(t)
	qemu := peertool.Require(t, "qemu-aarch64-static")
	crane := peertool.Require(t, "crane")
	plan, md := planFor(t, "arm64", nil)
	root := t.TempDir()
	mountPod(t, root, plan)
	argv, addr := containerArgv(t, root, plan)
	p := startInjector(t, root, addr, append([]string{qemu}, argv...))
	err := p.ready(60 * time.Second)
	if err != nil && strings.Contains(p.stderr.String(), "cannot exec") && strings.Contains(p.stderr.String(), "errno 8") {
		joined, _ := os.ReadFile(argv[1])
		if !bytes.Equal(joined, stage1(t, "arm64")) {
			t.Fatal("arm64 loader joined a different stage 1")
		}
		sep := 0
		for i, a := range argv {
			if a == "--" {
				sep = i
			}
		}
		p = startInjector(t, root, addr, append([]string{qemu, argv[1]}, argv[sep+1:]...))
		err = p.ready(60 * time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, crane, "digest", "--insecure", addr+"/"+testRepo+":1.0.0"); got != md.Digest.String() {
		t.Fatalf("crane digest = %s, want %s", got, md.Digest)
	}
	run(t, crane, "pull", "--insecure", "--format=oci", addr+"/"+testRepo+"@"+md.Digest.String(), filepath.Join(t.TempDir(), "pull"))
}

// TestRefusals: damaged, missing or extra chunks and an unsafe tar end the
// injector with a clear message before it serves anything.
func TestRefusals(t *testing.T) {
	requireLinuxAMD64(t)
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "oci-layout", Size: 2, Mode: 0o644})
	tw.Write([]byte("{}"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "blobs/../../../escaped", Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	evilPayload := Payload{Data: evil.Bytes(), Digest: digest.FromBytes(evil.Bytes())}

	payloadChunk := func(root string, i int) string {
		return filepath.Join(root, PayloadDir, injector.ChunkName(injector.DefaultChunkPrefix, i))
	}
	flip := func(t *testing.T, p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(real)
		b[len(b)-100] ^= 0x20
		os.Chmod(real, 0o644)
		if err := os.WriteFile(real, b, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		payload *Payload
		mutate  func(t *testing.T, root string, plan *Plan)
		want    string
	}{
		{"changed payload byte", nil, func(t *testing.T, root string, plan *Plan) { flip(t, payloadChunk(root, 2)) }, "payload digest mismatch"},
		{"changed stage-1 byte", nil, func(t *testing.T, root string, plan *Plan) {
			flip(t, filepath.Join(root, BootDir, "stage1-"+injector.ChunkName("", plan.Stage1Chunks-1)))
		}, ""},
		{"missing chunk", nil, func(t *testing.T, root string, plan *Plan) { os.Remove(payloadChunk(root, 3)) }, "missing chunk " + "ROOT" + PayloadDir + "/payload-00003"},
		{"extra chunk", nil, func(t *testing.T, root string, plan *Plan) {
			os.Symlink("..data/payload-00000", payloadChunk(root, plan.PayloadChunks))
		}, "unexpected chunk"},
		{"missing stage-1 chunk", nil, func(t *testing.T, root string, plan *Plan) {
			os.Remove(filepath.Join(root, BootDir, "stage1-00001"))
		}, "ferry-loader: cannot open chunk ROOT" + BootDir + "/stage1-00001: errno 2"},
		{"path traversal", &evilPayload, nil, "path traversal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, _ := planFor(t, "amd64", tc.payload)
			root := t.TempDir()
			mountPod(t, root, plan)
			if tc.mutate != nil {
				tc.mutate(t, root, plan)
			}
			argv, addr := containerArgv(t, root, plan)
			p := startInjector(t, root, addr, argv)
			code := p.exit(t, 30*time.Second)
			stderr := p.stderr.String()
			want := strings.ReplaceAll(tc.want, "ROOT", root)
			if code == 0 || !strings.Contains(stderr, want) || stderr == "" {
				t.Fatalf("exit %d, stderr %q; want non-zero and %q", code, stderr, want)
			}
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				t.Fatal("something is listening after a refusal")
			}
			if _, err := os.Stat(filepath.Join(root, LayoutPath)); err == nil {
				t.Fatal("layout extracted after a refusal")
			}
			if _, err := os.Stat(filepath.Join(root, WorkDir, "escaped")); err == nil {
				t.Fatal("path traversal escaped")
			}
			t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
		})
	}
}

// TestRoundTripBareRoot runs the Pod's command unmodified inside a chroot
// holding nothing but the mounted volumes (no shell, no /etc, no /proc,
// no libc), as an arbitrary non-root UID that can write only the work
// volume, which is how the borrowed image's container sees it.
func TestRoundTripBareRoot(t *testing.T) {
	requireLinuxAMD64(t)
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	chroot := peertool.Require(t, "chroot")
	crane := peertool.Require(t, "crane")
	plan, md := planFor(t, "amd64", nil)
	root := t.TempDir()
	os.Chmod(root, 0o755)
	mountPod(t, root, plan)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := append([]string{}, plan.Pod.Spec.Containers[0].Command...)
	for i := range cmd {
		if i > 0 && cmd[i-1] == "-addr" {
			cmd[i] = addr
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 || entries[0].Name() != "ferry" {
		t.Fatalf("root holds more than the volumes: %v", entries)
	}
	p := startInjector(t, root, addr, append([]string{chroot, "--userspec=54321:54321", root}, cmd...))
	if err := p.ready(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := run(t, crane, "digest", "--insecure", addr+"/"+testRepo+":1.0.0"); got != md.Digest.String() {
		t.Fatalf("crane digest = %s, want %s", got, md.Digest)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, p.stderr.String())
	}
	fi, err := os.Stat(filepath.Join(root, Stage1Path))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 54321 {
		t.Fatalf("stage 1 not written by the arbitrary UID: %v", err)
	}
}
