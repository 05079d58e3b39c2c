package inject

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/injector"
)

// conformanceLayout writes the conformance suite's pull fixture as an OCI
// layout.
func conformanceLayout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	store, err := oci.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := conformance.WritePullFixture(context.Background(), store); err != nil {
		t.Fatal(err)
	}
	return dir
}

func checkConformance(t *testing.T, url string) {
	t.Helper()
	rep, err := conformance.Run(context.Background(), conformance.Config{
		URL: url, Repo: "ferry/conformance", ReadOnly: true, Workflows: []conformance.Workflow{conformance.Pull},
	})
	if err != nil {
		t.Fatal(err)
	}
	passed := 0
	for _, r := range rep.Results {
		switch r.Status {
		case conformance.Passed:
			passed++
		case conformance.Failed:
			t.Errorf("%s failed: %s", r.ID, r.Detail)
		default:
			t.Logf("%s %s: %s", r.ID, r.Status, r.Detail)
		}
	}
	if passed == 0 {
		t.Fatal("no pull check passed")
	}
	t.Logf("%d pull checks passed", passed)
}

// TestConformanceInProcess runs the pull workflow against injector.Server
// serving the fixture layout on loopback.
func TestConformanceInProcess(t *testing.T) {
	srv, err := injector.NewServer(conformanceLayout(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-errc; !errors.Is(err, injector.ErrServerClosed) {
			t.Error(err)
		}
	}()
	checkConformance(t, "http://"+ln.Addr().String())
}

// TestConformanceThroughBootstrap runs the pull workflow against the real
// chain: fixture layout → payload → ConfigMaps mounted as the kubelet does
// → loader → stage-1 binary.
func TestConformanceThroughBootstrap(t *testing.T) {
	requireLinuxAMD64(t)
	payload, err := NewPayload(os.DirFS(conformanceLayout(t)))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(Options{NodeName: "n", Image: "pause", Arch: "amd64", Stage1: stage1(t, "amd64"), Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	mountPod(t, root, plan)
	argv, addr := containerArgv(t, root, plan)
	p := startInjector(t, root, addr, argv)
	if err := p.ready(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkConformance(t, "http://"+addr)
}
