package inject

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	"oras.land/oras-go/v2/content/oci"
)

// stage1Package is the import path of the stage-1 injector command.
const stage1Package = "github.com/ferrypkg/ferry/injector/cmd/ferry-injector"

// buildStage1 builds the stage-1 injector for linux/goarch into out with
// CGO_ENABLED=0 go build -trimpath -ldflags='-s -w', as `make injector`
// does, and returns its size. It needs the Go toolchain and the ferry
// source tree.
func buildStage1(ctx context.Context, goarch, out string) (int64, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, stage1Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("build stage 1 for linux/%s: %w: %s", goarch, err, bytes.TrimSpace(stderr.Bytes()))
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, fmt.Errorf("build stage 1 for linux/%s: %w", goarch, err)
	}
	return fi.Size(), nil
}

// stage1Bins caches one stage-1 build per architecture for the test run.
var stage1Bins = struct {
	sync.Mutex
	dir  string
	path map[string]string
}{path: map[string]string{}}

func stage1(t testing.TB, arch string) []byte {
	t.Helper()
	stage1Bins.Lock()
	defer stage1Bins.Unlock()
	if p, ok := stage1Bins.path[arch]; ok {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if stage1Bins.dir == "" {
		d, err := os.MkdirTemp("", "ferry-stage1-")
		if err != nil {
			t.Fatal(err)
		}
		stage1Bins.dir = d
	}
	p := filepath.Join(stage1Bins.dir, Stage1FileName(arch))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	size, err := buildStage1(ctx, arch, p)
	if err != nil {
		t.Fatal(err)
	}
	if size > MaxStage1Size {
		t.Fatalf("stage 1 for linux/%s is %d bytes, over the %d-byte budget", arch, size, MaxStage1Size)
	}
	stage1Bins.path[arch] = p
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMain(m *testing.M) {
	code := m.Run()
	if stage1Bins.dir != "" {
		os.RemoveAll(stage1Bins.dir)
	}
	os.Exit(code)
}

var specsV2 = specs.Versioned{SchemaVersion: 2}

// registryImage writes a random single-platform image (tar layers, as
// ferry's registry image has) as an OCI layout in dir, tagged tag, and
// returns its manifest descriptor.
func registryImage(t testing.TB, dir, tag string, layerSizes ...int) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	push := func(mt string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}
		if err := store.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	var layers []ocispec.Descriptor
	var diffIDs []digest.Digest
	for i, n := range layerSizes {
		data := make([]byte, n)
		rand.Read(data)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "file" + strconv.Itoa(i), Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg})
		tw.Write(data)
		tw.Close()
		d := push(ocispec.MediaTypeImageLayer, buf.Bytes())
		layers = append(layers, d)
		diffIDs = append(diffIDs, d.Digest)
	}
	cfg, _ := json.Marshal(ocispec.Image{Platform: ocispec.Platform{Architecture: "amd64", OS: "linux"},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: diffIDs}})
	config := push(ocispec.MediaTypeImageConfig, cfg)
	man, _ := json.Marshal(ocispec.Manifest{Versioned: specsV2, MediaType: ocispec.MediaTypeImageManifest, Config: config, Layers: layers})
	md := push(ocispec.MediaTypeImageManifest, man)
	if err := store.Tag(ctx, md, tag); err != nil {
		t.Fatal(err)
	}
	return md
}

// mountPod writes the plan's volumes below root exactly as the kubelet
// mounts them: for each projected volume, the files in a timestamped
// directory, a ..data symlink to it, and one symlink per key into ..data,
// with the volume's defaultMode; an emptyDir is an empty world-writable
// directory.
func mountPod(t testing.TB, root string, plan *Plan) {
	t.Helper()
	cms := map[string]*corev1.ConfigMap{}
	for i := range plan.ConfigMaps {
		cms[plan.ConfigMaps[i].Name] = &plan.ConfigMaps[i]
	}
	c := plan.Pod.Spec.Containers[0]
	for _, v := range plan.Pod.Spec.Volumes {
		var mountPath string
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				mountPath = filepath.Join(root, m.MountPath)
			}
		}
		if mountPath == "" {
			t.Fatalf("volume %s is not mounted", v.Name)
		}
		if err := os.MkdirAll(mountPath, 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case v.EmptyDir != nil:
			os.Chmod(mountPath, 0o777)
		case v.Projected != nil:
			ts := filepath.Join(mountPath, "..2026_01_01_00_00_00.123456789")
			os.Mkdir(ts, 0o755)
			for _, src := range v.Projected.Sources {
				cm := cms[src.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s: ConfigMap %s not in the plan", v.Name, src.ConfigMap.Name)
				}
				for _, it := range src.ConfigMap.Items {
					data, ok := cm.BinaryData[it.Key]
					if !ok {
						t.Fatalf("ConfigMap %s has no key %s", cm.Name, it.Key)
					}
					if err := os.WriteFile(filepath.Join(ts, it.Path), data, os.FileMode(*v.Projected.DefaultMode)); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(filepath.Join("..data", it.Path), filepath.Join(mountPath, it.Path)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.Symlink(filepath.Base(ts), filepath.Join(mountPath, "..data")); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s: unexpected source", v.Name)
		}
	}
}

// injectorProc is the injector container's command running on the host.
type injectorProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// containerArgv is the Pod's command with container paths moved below
// root and the listen address moved to a free loopback port.
func containerArgv(t testing.TB, root string, plan *Plan) ([]string, string) {
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	var argv []string
	for i, a := range plan.Pod.Spec.Containers[0].Command {
		switch {
		case strings.HasPrefix(a, "/ferry/"):
			a = filepath.Join(root, a)
		case i > 0 && plan.Pod.Spec.Containers[0].Command[i-1] == "-addr":
			a = addr
		}
		argv = append(argv, a)
	}
	return argv, addr
}

// startInjector runs argv (prefixed by pre, e.g. qemu) with an empty
// environment in the work directory.
func startInjector(t testing.TB, root, addr string, argv []string) *injectorProc {
	t.Helper()
	p := &injectorProc{addr: addr, stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = []string{}
	p.cmd.Dir = filepath.Join(root, WorkDir)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
		}
	})
	return p
}

// ready waits for GET /v2/ to answer 200, or for the process to exit.
func (p *injectorProc) ready(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return errors.New("injector exited (" + errString(err) + "): " + p.stderr.String())
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("injector not ready after " + timeout.String() + ": " + p.stderr.String())
}

// exit waits for the process to end and returns its exit code.
func (p *injectorProc) exit(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(timeout):
		t.Fatalf("injector still running after %v: %s", timeout, p.stderr.String())
		return -1
	}
}

func errString(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}
