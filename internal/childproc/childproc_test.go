package childproc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain: as a helper process (FERRY_CHILDPROC_HELPER=1), start a child
// that would run for a long time, print its pid, and wait to be killed; as
// another (FERRY_CHILDPROC_HELPER=alloc, spin, …), misbehave as runHelper
// says.
func TestMain(m *testing.M) {
	if h := os.Getenv("FERRY_CHILDPROC_HELPER"); h != "" && h != "1" {
		os.Exit(runHelper(h))
	}
	if os.Getenv("FERRY_CHILDPROC_HELPER") == "1" {
		cmd := Command(context.Background(), "sleep", "300")
		if err := cmd.Start(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		// Not select{}: with no other goroutine the runtime would end the
		// helper at once (all goroutines are asleep), killing the child
		// before the test looks at it. A sleeping timer is not a deadlock.
		time.Sleep(10 * time.Minute)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func alive(pid int) bool {
	// A zombie still answers signal 0; read its state.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) > 2 && f[2] != "Z"
}

// TestDiesWithParent: a child started through Command is killed when its
// parent is killed outright (SIGKILL).
func TestDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "FERRY_CHILDPROC_HELPER=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	if !alive(pid) {
		t.Fatal("the child is not running")
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still runs 5 s after its parent was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelKillsGroup: cancelling the context kills the child's own
// children too.
func TestCancelKillsGroup(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := Command(ctx, "sh", "-c", "sleep 300 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	grandchild, _ := strconv.Atoi(strings.TrimSpace(line))
	cancel()
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(grandchild) {
		if time.Now().After(deadline) {
			syscall.Kill(grandchild, syscall.SIGKILL)
			t.Fatalf("grandchild %d survived the cancel", grandchild)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
