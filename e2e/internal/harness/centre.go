package harness

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The fleet centre's management cluster (e2e/cluster/test.sh starts it with
// FERRY_E2E_CENTRE=1, the default): a control plane of its own in a network
// namespace of its own, which has no route to the member cluster's.
const (
	EnvCentreKubeconfig = "FERRY_E2E_CENTRE_KUBECONFIG"
	EnvCentreNetns      = "FERRY_E2E_CENTRE_NETNS"
)

// Centre is the management cluster.
type Centre struct {
	// Kubeconfig is its admin kubeconfig: its API server listens on
	// 127.0.0.1:6443 of Netns, so only commands run there (Command) reach it.
	Kubeconfig string
	// Netns is its network namespace's name.
	Netns string
}

// GetCentre returns the management cluster, or skips t (fails it under
// FERRY_E2E=1) when there is none.
func GetCentre(t testing.TB) *Centre {
	t.Helper()
	kc, ns := os.Getenv(EnvCentreKubeconfig), os.Getenv(EnvCentreNetns)
	if kc == "" || ns == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but %s is not set: e2e/cluster/test.sh starts the centre's cluster", EnvRequire, EnvCentreKubeconfig)
		}
		t.Skipf("%s not set: `make e2e` starts the fleet centre's cluster", EnvCentreKubeconfig)
	}
	return &Centre{Kubeconfig: kc, Netns: ns}
}

// NetnsPath is the path of the namespace's handle.
func (c *Centre) NetnsPath() string { return "/var/run/netns/" + c.Netns }

// Command runs name in the centre's network namespace (nsenter, as
// exec.sh does).
func (c *Centre) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.NetnsPath(), "--", name}, args...)...)
}

// Relay is the only route from this namespace to a port of another: it
// listens here and connects each connection it accepts to Target inside
// Netns. Cut closes every connection and refuses new ones until Restore.
type Relay struct {
	Addr   string
	Target string
	Netns  string

	ln    net.Listener
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	done  chan struct{}
}

// StartRelay listens on listen (host:port of this namespace) and relays to
// target (host:port inside the namespace at netnsPath), until t ends.
func StartRelay(t testing.TB, listen, netnsPath, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &Relay{Addr: ln.Addr().String(), Target: target, Netns: netnsPath, ln: ln, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	go r.serve()
	t.Cleanup(func() { ln.Close(); <-r.done; r.Cut() })
	return r
}

func (r *Relay) serve() {
	defer close(r.done)
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		cut := r.cut
		if !cut {
			r.conns[c] = true
		}
		r.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		go r.relay(c)
	}
}

func (r *Relay) relay(c net.Conn) {
	defer func() {
		c.Close()
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
	}()
	up, err := DialIn(r.Netns, r.Target, 5*time.Second)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.conns[up] = true
	r.mu.Unlock()
	defer func() {
		up.Close()
		r.mu.Lock()
		delete(r.conns, up)
		r.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
	go func() { defer wg.Done(); io.Copy(c, up); c.(*net.TCPConn).CloseWrite() }()
	wg.Wait()
}

// Cut closes every relayed connection and refuses new ones: the route is
// down.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		c.Close()
	}
}

// Restore accepts connections again.
func (r *Relay) Restore() {
	r.mu.Lock()
	r.cut = false
	r.mu.Unlock()
}

// DialIn connects to addr from inside the network namespace at netnsPath:
// the socket is made there (the thread joins the namespace for the
// socket(2) call and leaves it again), and stays there.
func DialIn(netnsPath, addr string, timeout time.Duration) (net.Conn, error) {
	runtime.LockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer home.Close()
	there, err := os.Open(netnsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer there.Close()
	if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, dialErr := net.DialTimeout("tcp", addr, timeout)
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: it must not run anything
		// else, so it stays locked and ends with this goroutine.
		if conn != nil {
			conn.Close()
		}
		return nil, errors.Join(errors.New("relay: leave the namespace"), err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}
