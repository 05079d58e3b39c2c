package registrytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// StartDockerRegistry starts Debian's docker-registry (distribution 2.8) as a
// reference registry: filesystem storage in a temporary directory, deletes
// enabled, no auth, plain HTTP on a free 127.0.0.1 port. It returns the base
// URL and stops the process when the test ends. Without the binary the test
// is skipped (or fails under FERRY_REQUIRE_TOOLS=1).
func StartDockerRegistry(t testing.TB) string {
	t.Helper()
	bin := peertool.Require(t, "docker-registry")
	dir := t.TempDir()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: ferry-test-secret
`, filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start docker-registry: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	url := "http://" + addr
	if err := WaitReady(url, 15*time.Second); err != nil {
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("docker-registry on %s: %v\n%s", addr, err, log)
	}
	return url
}

// FreeAddr picks a free loopback TCP address.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// WaitReady polls GET <url>/v2/ until it answers 200 or 401.
func WaitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
