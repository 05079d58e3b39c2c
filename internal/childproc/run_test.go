package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runHelper is the test binary as a child of Run: it misbehaves as what
// says, and returns its exit code.
func runHelper(what string) int {
	switch what {
	case "alloc": // holds ever more memory, touched
		var held [][]byte
		for {
			b := make([]byte, 16<<20)
			for i := range b {
				b[i] = 1
			}
			held = append(held, b)
		}
	case "spin": // never ends
		time.Sleep(time.Hour)
	case "output": // writes without end
		b := bytes.Repeat([]byte("x"), 1<<20)
		for {
			if _, err := os.Stdout.Write(b); err != nil {
				return 1
			}
		}
	case "file": // writes one growing file
		f, err := os.Create(os.Getenv("FERRY_CHILDPROC_FILE"))
		if err != nil {
			return 1
		}
		b := make([]byte, 1<<20)
		for {
			if _, err := f.Write(b); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "fail":
		fmt.Fprintln(os.Stderr, "warming up")
		fmt.Fprintln(os.Stderr, "helper: no such thing")
		return 3
	case "serve": // answers messages until its input ends
		for {
			msg, err := ReadMessage(os.Stdin, 0)
			if err == io.EOF {
				return 0
			}
			if err != nil {
				return 1
			}
			switch string(msg) {
			case "alloc", "spin":
				return runHelper(string(msg))
			case "big":
				msg = make([]byte, 2<<20)
			case "die":
				fmt.Fprintln(os.Stderr, "helper: asked to die")
				return 3
			case "slow":
				time.Sleep(300 * time.Millisecond)
			}
			if err := WriteMessage(os.Stdout, msg); err != nil {
				return 1
			}
		}
	case "echo":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			return 1
		}
		fmt.Print(os.Getenv("GOMEMLIMIT"))
		return 0
	}
	return 2
}

// runAs runs the test binary as a helper under Run.
func runAs(ctx context.Context, what string, opts RunOptions) (Result, error) {
	opts.Env = append(opts.Env, "FERRY_CHILDPROC_HELPER="+what)
	return Run(ctx, os.Args[0], []string{"-test.run=^$"}, opts)
}

// TestRunLimits: a child past each limit is killed, quickly, and the
// error says which limit; its peak memory stays near the limit.
func TestRunLimits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big")
	for _, c := range []struct {
		what  string
		lim   Limits
		want  Resource
		words string
	}{
		{"alloc", Limits{Memory: 128 << 20, Time: time.Minute}, ResourceMemory, "passed its limit of 128 MiB of memory"},
		{"spin", Limits{Memory: 128 << 20, Time: 500 * time.Millisecond}, ResourceTime, "passed its limit of 500ms"},
		{"output", Limits{Output: 8 << 20, Time: time.Minute}, ResourceOutput, "passed its limit of 8 MiB of output"},
		{"file", Limits{Disk: 16 << 20, Time: time.Minute}, ResourceDisk, "passed its limit of 16 MiB of files written"},
	} {
		t.Run(c.what, func(t *testing.T) {
			if runtime.GOOS != "linux" && (c.want == ResourceMemory || c.want == ResourceDisk) {
				t.Skip("memory and disk are polled on Linux only")
			}
			start := time.Now()
			res, err := runAs(context.Background(), c.what, RunOptions{Env: []string{"FERRY_CHILDPROC_FILE=" + file}, Limits: c.lim})
			var le *LimitError
			if !errors.As(err, &le) || le.Resource != c.want || err.Error() != c.words {
				t.Fatalf("%v (%T), want %q", err, err, c.words)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("stopped after %v", d)
			}
			if c.want == ResourceMemory && res.PeakRSS > c.lim.Memory+c.lim.Memory/4 {
				t.Errorf("peak RSS %d MiB, limit %d MiB", res.PeakRSS>>20, c.lim.Memory>>20)
			}
			if res.Stdout != nil {
				t.Errorf("%d bytes of output kept", len(res.Stdout))
			}
		})
	}
}

// TestRunOutput: a child within its limits gets its standard input and a
// GOMEMLIMIT of half the memory limit, and its output is returned; one
// that fails says why in its ExitError; a cancelled context stops it.
func TestRunOutput(t *testing.T) {
	res, err := runAs(context.Background(), "echo", RunOptions{Stdin: strings.NewReader("hello "), Limits: Limits{Memory: 256 << 20, Output: 1 << 20, Time: time.Minute}})
	if err != nil || string(res.Stdout) != "hello 134217728" {
		t.Fatalf("%q, %v", res.Stdout, err)
	}
	_, err = runAs(context.Background(), "fail", RunOptions{})
	var ee *ExitError
	if !errors.As(err, &ee) || err.Error() != "helper: no such thing (exit status 3)" {
		t.Fatalf("%v, want an ExitError with the last line", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := runAs(ctx, "spin", RunOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the context's error", err)
	}
}

func TestLimitWords(t *testing.T) {
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", 5 * time.Minute: "5m", 90 * time.Second: "1m30s"} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{512 << 20: "512 MiB", 1 << 30: "1 GiB", 3 << 29: "1536 MiB", 1000: "1000 bytes"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestProc: one child answers many calls, each within the time and output
// limits (not their sum); past one, or when it dies, it is killed and the
// error says why, for that call and every later one.
func TestProc(t *testing.T) {
	ctx := context.Background()
	start := func(lim Limits) *Proc {
		t.Helper()
		p, err := Start(ctx, os.Args[0], []string{"-test.run=^$"}, RunOptions{Env: []string{"FERRY_CHILDPROC_HELPER=serve"}, Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	p := start(Limits{Memory: 128 << 20, Time: time.Second, Output: 1 << 20})
	for i := range 5 { // 1.5 s in all, each call 0.3 s
		if got, err := p.Call(ctx, []byte("slow")); err != nil || string(got) != "slow" {
			t.Fatalf("call %d: %q, %v", i, got, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("close: %v", err)
	}

	for _, c := range []struct {
		req  string
		want string
	}{
		{"spin", "passed its limit of 1s"},
		{"big", "passed its limit of 1 MiB of output"},
		{"alloc", "passed its limit of 128 MiB of memory"},
		{"die", "helper: asked to die (exit status 3)"},
	} {
		t.Run(c.req, func(t *testing.T) {
			p := start(Limits{Memory: 128 << 20, Time: time.Second, Output: 1 << 20})
			if _, err := p.Call(ctx, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			_, err := p.Call(ctx, []byte(c.req))
			if err == nil || err.Error() != c.want {
				t.Fatalf("%v, want %q", err, c.want)
			}
			if d := time.Since(began); d > 10*time.Second {
				t.Errorf("refused after %v", d)
			}
			if _, again := p.Call(ctx, []byte("hello")); again != err {
				t.Errorf("a later call: %v", again)
			}
			if c.req == "alloc" && p.PeakRSS() > 160<<20 {
				t.Errorf("peak RSS %d MiB, limit 128 MiB", p.PeakRSS()>>20)
			}
		})
	}

	p = start(Limits{})
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := p.Call(cctx, []byte("spin")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the call's context's error", err)
	}
}

func TestReadMessage(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteMessage(&buf, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMessage(bytes.NewReader(buf.Bytes()), 9); !errors.Is(err, errTooLong) {
		t.Errorf("over its bound: %v", err)
	}
	if _, err := ReadMessage(bytes.NewReader(buf.Bytes()[:12]), 0); err != io.ErrUnexpectedEOF {
		t.Errorf("cut short: %v", err)
	}
	if m, err := ReadMessage(bytes.NewReader(buf.Bytes()), 10); err != nil || string(m) != "0123456789" {
		t.Errorf("%q, %v", m, err)
	}
	if _, err := ReadMessage(bytes.NewReader(nil), 10); err != io.EOF {
		t.Errorf("at the end: %v", err)
	}
}
