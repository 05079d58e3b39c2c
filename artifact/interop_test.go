package artifact_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// pushFile opens and pushes an archive.
func pushFile(t testing.TB, path, ref string, opts artifact.PushOptions) (*artifact.PushResult, error) {
	t.Helper()
	r, err := artifact.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return artifact.Push(context.Background(), r, ref, opts)
}

// assertPullIdentical pulls ref and compares with the archive at want.
func assertPullIdentical(t testing.TB, ref, want string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(want))
	if _, err := pullRemote(context.Background(), ref, out, artifact.PullOptions{}); err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(a, b) {
		t.Fatalf("pull %s: %d bytes differ from the %d pushed", ref, len(b), len(a))
	}
}

// TestCraneCopyInterop: crane copies the pushed root to another repository
// and ferry pulls the copy back byte for byte.
func TestCraneCopyInterop(t *testing.T) {
	crane := peertool.Require(t, "crane")
	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	if _, err := pushFile(t, res.Path, w.Host+"/pkgs/demo:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	src := w.Host + "/pkgs/demo@" + res.Root.Digest.String()
	if out, err := exec.Command(crane, "copy", src, w.Host+"/copied/demo:1.0.0").CombinedOutput(); err != nil {
		t.Fatalf("crane copy: %v\n%s", err, out)
	}
	assertPullIdentical(t, w.Host+"/copied/demo:1.0.0", res.Path)
	out, err := exec.Command(crane, "digest", w.Host+"/copied/demo:1.0.0").Output()
	if err != nil || strings.TrimSpace(string(out)) != res.Root.Digest.String() {
		t.Errorf("crane digest = %q, %v; want %s", out, err, res.Root.Digest)
	}
}

// TestDistribution28Interop pushes to Debian's docker-registry (an
// independent implementation) and pulls back.
func TestDistribution28Interop(t *testing.T) {
	base := registrytest.StartDockerRegistry(t)
	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	ref := strings.TrimPrefix(base, "http://") + "/pkgs/demo:1.0.0"
	if _, err := pushFile(t, res.Path, ref, artifact.PushOptions{}); err != nil {
		t.Fatalf("push to distribution 2.8: %v", err)
	}
	assertPullIdentical(t, ref, res.Path)
}

// TestPullCorruptBlob: a registry that serves a damaged blob makes pull
// fail naming the digest, leaving no file.
func TestPullCorruptBlob(t *testing.T) {
	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	if _, err := pushFile(t, res.Path, w.Host+"/pkgs/demo:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := w.SharedLayer.String()
	target, _ := url.Parse("http://" + w.Host)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && strings.HasSuffix(resp.Request.URL.Path, "/blobs/"+victim) {
			body, _ := io.ReadAll(resp.Body)
			body[len(body)/2] ^= 0xff
			resp.Body = io.NopCloser(bytes.NewReader(body))
		}
		return nil
	}
	ts := httptest.NewServer(proxy)
	defer ts.Close()
	outDir := t.TempDir()
	_, err := pullRemote(context.Background(), strings.TrimPrefix(ts.URL, "http://")+"/pkgs/demo:1.0.0", filepath.Join(outDir, "x.tar.zst"), artifact.PullOptions{})
	var be *artifact.BlobError
	if !errors.Is(err, artifact.ErrCorrupt) || !errors.As(err, &be) || be.Digest.String() != victim || !strings.Contains(err.Error(), victim) {
		t.Fatalf("pull of a corrupted blob: %v, want ErrCorrupt naming %s", err, victim)
	}
	assertNoOutput(t, outDir)
}

// TestInterruptedPush: a push cut off mid-way (its context cancelled after
// a few uploads, as when the client is killed) is completed by pushing
// again, which uploads only what is missing.
func TestInterruptedPush(t *testing.T) {
	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	ref := w.Host + "/pkgs/demo:1.0.0"
	var uploads atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/blobs/uploads/") && uploads.Add(1) == 4 {
			cancel()
		}
		return http.DefaultTransport.RoundTrip(req)
	})}
	r, _ := artifact.Open(ctx, res.Path)
	_, err := artifact.Push(ctx, r, ref, artifact.PushOptions{Remote: artifact.RemoteOptions{Client: client}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted push: %v, want context canceled", err)
	}
	again, err := pushFile(t, res.Path, ref, artifact.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first push uploaded %d blobs before it was cut off; second push uploaded %d, skipped %d", uploads.Load()-1, again.Pushed, again.Skipped)
	if again.Skipped < 3 || again.Pushed+again.Skipped != res.Blobs || again.Pushed == 0 {
		t.Errorf("second push: %d pushed, %d skipped of %d; want the first uploads skipped", again.Pushed, again.Skipped, res.Blobs)
	}
	assertPullIdentical(t, ref, res.Path)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestConcurrentPushes: 8 clients push different packages that share layers
// at once; every one pulls back intact.
func TestConcurrentPushes(t *testing.T) {
	w := newWorld(t)
	def, err := definition.Load(w.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i := range 8 {
		d := *def
		d.Metadata.Version = fmt.Sprintf("1.0.%d", i)
		res, err := build.Create(context.Background(), &d, build.CreateOptions{Charts: chart.Packager{}, Output: filepath.Join(t.TempDir(), "p.tar.zst")})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, res.Path)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(paths))
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = pushFile(t, p, fmt.Sprintf("%s/pkgs/demo%d:v", w.Host, i%3), artifact.PushOptions{})
		}()
	}
	wg.Wait()
	for i, p := range paths {
		if errs[i] != nil {
			t.Fatalf("push %d: %v", i, errs[i])
		}
		r, _ := artifact.Open(context.Background(), p)
		assertPullIdentical(t, fmt.Sprintf("%s/pkgs/demo%d@%s", w.Host, i%3, r.Root().Digest), p)
	}
}

// TestPushAuth: a registry with htpasswd refuses anonymous pushes and
// accepts credentials from the docker config file.
func TestPushAuth(t *testing.T) {
	dir := t.TempDir()
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	htpasswd := filepath.Join(dir, "htpasswd")
	os.WriteFile(htpasswd, []byte("ferry:"+string(hash)+"\n"), 0o600)
	ts := registrytest.NewServer(t, registry.Config{HTPasswdFile: htpasswd})
	host := registrytest.Host(ts)

	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	t.Setenv("DOCKER_CONFIG", filepath.Join(dir, "empty"))
	if _, err := pushFile(t, res.Path, host+"/pkgs/demo:1", artifact.PushOptions{}); !errors.Is(err, auth.ErrBasicCredentialNotFound) {
		t.Fatalf("anonymous push: %v, want it refused for lack of credentials", err)
	}
	cfgDir := filepath.Join(dir, "docker")
	auth := base64.StdEncoding.EncodeToString([]byte("ferry:s3cret"))
	writeFile(t, filepath.Join(cfgDir, "config.json"), fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth))
	t.Setenv("DOCKER_CONFIG", cfgDir)
	if _, err := pushFile(t, res.Path, host+"/pkgs/demo:1", artifact.PushOptions{}); err != nil {
		t.Fatalf("push with docker config credentials: %v", err)
	}
	assertPullIdentical(t, host+"/pkgs/demo:1", res.Path)
}

// trickle sends r at about rate bytes a second.
type trickle struct {
	r    io.ReadCloser
	rate int
}

func (t *trickle) Read(p []byte) (int, error) {
	time.Sleep(time.Second / 4)
	return io.ReadFull(t.r, p[:min(len(p), t.rate/4)])
}

func (t *trickle) Close() error { return t.r.Close() }

// TestPullStalled: a registry that sends a blob at 1 KiB/s (or nothing at
// all) makes pull fail as stalled, naming the registry, once a window of
// waiting on it gave less than the minimum rate; no file is left.
func TestPullStalled(t *testing.T) {
	w := newWorld(t)
	res := create(t, w, filepath.Join(t.TempDir(), "demo.tar.zst"))
	if _, err := pushFile(t, res.Path, w.Host+"/pkgs/demo:1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := w.SharedLayer.String()
	for _, mode := range []string{"trickle", "silent"} {
		t.Run(mode, func(t *testing.T) {
			target, _ := url.Parse("http://" + w.Host)
			proxy := httputil.NewSingleHostReverseProxy(target)
			proxy.FlushInterval = -1 // headers and each trickle at once
			block := make(chan struct{})
			proxy.ModifyResponse = func(resp *http.Response) error {
				if resp.Request.Method == http.MethodGet && strings.HasSuffix(resp.Request.URL.Path, "/blobs/"+victim) {
					if mode == "silent" {
						resp.Body = io.NopCloser(readerFunc(func([]byte) (int, error) { <-block; return 0, io.EOF }))
					} else {
						resp.Body = &trickle{r: resp.Body, rate: 1 << 10}
					}
				}
				return nil
			}
			ts := httptest.NewServer(proxy)
			defer ts.Close()
			defer close(block) // before the server waits for its handlers
			host := strings.TrimPrefix(ts.URL, "http://")
			repo, err := artifact.RemoteOptions{StallWindow: 2 * time.Second}.Repository(host + "/pkgs/demo")
			if err != nil {
				t.Fatal(err)
			}
			outDir := t.TempDir()
			start := time.Now()
			_, err = artifact.Pull(context.Background(), repo, "1.0.0", filepath.Join(outDir, "x.tar.zst"), artifact.PullOptions{})
			if !errors.Is(err, artifact.ErrStalled) || !strings.Contains(err.Error(), host) {
				t.Fatalf("pull from a registry sending %s: %v, want ErrStalled naming %s", mode, err, host)
			}
			t.Logf("%s: given up in %v: %v", mode, time.Since(start).Round(time.Millisecond), err)
			assertNoOutput(t, outDir)
		})
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
