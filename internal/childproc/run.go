package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Limits bound one run of a child (Run). A zero field is no limit.
type Limits struct {
	// Memory bounds the child's memory: on Linux its data segment (a
	// Go program's heap; RLIMIT_DATA at 7/8 of Memory, so that with its
	// code and stacks the child stays under Memory: an allocation past
	// it fails) and its resident set, polled. A Go child's collector is
	// told to aim at half of it (GOMEMLIMIT).
	Memory int64
	// Time bounds the run, from its start to its end.
	Time time.Duration
	// Output bounds what the child writes to its standard output, which
	// Run holds.
	Output int64
	// Disk bounds, on Linux, any one file the child writes (RLIMIT_FSIZE)
	// and, polled, all it writes: files and pipes, its output included.
	Disk int64
}

// Resource names one of the Limits.
type Resource string

// The resources Limits bound.
const (
	ResourceMemory Resource = "memory"
	ResourceTime   Resource = "time"
	ResourceOutput Resource = "output"
	ResourceDisk   Resource = "disk"
)

// LimitError is a run stopped because its child passed one of its
// Limits: the child, and whatever it started, was killed.
type LimitError struct {
	// Resource is the limit passed, Limits all of the run's.
	Resource Resource
	Limits   Limits
}

// Limit says the limit passed, e.g. "512 MiB of memory", "30s".
func (e *LimitError) Limit() string {
	switch e.Resource {
	case ResourceMemory:
		return Bytes(e.Limits.Memory) + " of memory"
	case ResourceTime:
		return Duration(e.Limits.Time)
	case ResourceOutput:
		return Bytes(e.Limits.Output) + " of output"
	case ResourceDisk:
		return Bytes(e.Limits.Disk) + " of files written"
	}
	return string(e.Resource)
}

func (e *LimitError) Error() string { return "passed its limit of " + e.Limit() }

// Bytes writes a size in the unit limits are set in: "512 MiB", "1 GiB".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// Duration writes a time limit as a flag takes it: "30s", "5m", "1m30s".
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

// ExitError is a child that failed on its own, within its limits.
type ExitError struct {
	// Stderr is the line of the child's standard error that says why: the
	// first of a Go program's crash ("fatal error: …", "panic: …"), else
	// the last one written; empty if it wrote none.
	Stderr string
	// Err is how it ended (exec's error: its exit status or signal).
	Err error
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("%s (%v)", e.Stderr, e.Err)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// RunOptions are what Run gives a child besides its arguments.
type RunOptions struct {
	// Env is added to this process's environment.
	Env []string
	// Stdin is the child's standard input; none if nil.
	Stdin io.Reader
	// Limits bound the run.
	Limits Limits
}

// Result is what Run tells of a child that ran.
type Result struct {
	// Stdout is what the child wrote to its standard output (at most
	// Limits.Output bytes).
	Stdout []byte
	// PeakRSS is the child's peak resident set in bytes, where the system
	// tells it (0 if not); it is set when Run's error is a LimitError or an
	// ExitError too.
	PeakRSS int64
}

// pollInterval is how often a running child's memory and writes are read.
const pollInterval = 50 * time.Millisecond

// maxStderr bounds what Run keeps of a child's standard error.
const maxStderr = 64 << 10

// Run runs name with args, tied to this process as Command ties it, within
// opts.Limits, and returns what it wrote to its standard output. A child
// past a limit is killed (with whatever it started) and the error is a
// *LimitError; one that fails on its own gives an *ExitError; a cancelled
// ctx gives ctx's error.
func Run(ctx context.Context, name string, args []string, opts RunOptions) (Result, error) {
	lim := opts.Limits
	timedOut := errors.New("time limit")
	cancelTimeout := context.CancelFunc(func() {})
	if lim.Time > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, lim.Time, timedOut)
	}
	defer cancelTimeout()
	c, err := start(ctx, name, args, opts, false)
	if err != nil {
		return Result{}, err
	}
	defer c.kill()
	var out io.Reader = c.stdout
	if lim.Output > 0 {
		out = io.LimitReader(c.stdout, lim.Output+1)
	}
	data, readErr := io.ReadAll(out)
	if lim.Output > 0 && int64(len(data)) > lim.Output {
		c.kill()
		c.wait()
		return Result{PeakRSS: c.peak}, &LimitError{Resource: ResourceOutput, Limits: lim}
	}
	c.wait()
	switch {
	case errors.Is(context.Cause(ctx), timedOut):
		if over := c.w.exceeded(); over != nil {
			return Result{PeakRSS: c.peak}, over
		}
		return Result{PeakRSS: c.peak}, &LimitError{Resource: ResourceTime, Limits: lim}
	case c.waitErr == nil && readErr != nil:
		return Result{PeakRSS: c.peak}, readErr
	}
	if err := c.failure(ctx); err != nil {
		return Result{PeakRSS: c.peak}, err
	}
	return Result{Stdout: data, PeakRSS: c.peak}, nil
}

// child is a child started within limits.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil unless asked for
	stdout io.ReadCloser
	stderr *capped
	w      *watch
	lim    Limits
	kill   context.CancelFunc

	waited  bool
	waitErr error
	peak    int64 // its peak resident set, once waited for
}

// start starts name with args within opts.Limits' memory and disk, its
// standard output a pipe (and its standard input one, if pipeIn), and
// watches it; cancelling ctx, or c.kill, kills it.
func start(ctx context.Context, name string, args []string, opts RunOptions, pipeIn bool) (*child, error) {
	lim := opts.Limits
	ctx, kill := context.WithCancel(ctx)
	cmd := Command(ctx, name, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	if lim.Memory > 0 {
		// The child's collector (if it is a Go program) aims below the
		// limit, so that only a child that really needs more reaches it.
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMEMLIMIT=%d", lim.Memory/2))
	}
	c := &child{cmd: cmd, stderr: &capped{max: maxStderr}, lim: lim, kill: kill}
	cmd.Stderr = c.stderr
	var err error
	if pipeIn {
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			kill()
			return nil, err
		}
	} else {
		cmd.Stdin = opts.Stdin
	}
	if c.stdout, err = cmd.StdoutPipe(); err != nil {
		kill()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		kill()
		return nil, err
	}
	c.w = &watch{pid: cmd.Process.Pid, lim: lim, kill: kill, done: make(chan struct{})}
	// The kernel's limits, set on the running child (it has done no work
	// yet); the watcher's polls stand behind them, and alone where there
	// are none.
	setLimits(c.w.pid, lim)
	go c.w.run()
	return c, nil
}

// wait waits for the child to exit (once) and stops its watcher.
func (c *child) wait() {
	if c.waited {
		return
	}
	c.waited = true
	c.waitErr = c.cmd.Wait()
	close(c.w.done)
	c.peak = peakRSS(c.cmd.ProcessState)
}

// failure says why a child that was waited for ended, nil if it exited 0:
// a limit the watcher saw passed, ctx done, a crash for want of memory or
// of a file too large (the kernel's limits), else its exit.
func (c *child) failure(ctx context.Context) error {
	stderr := c.stderr.buf.String()
	switch err := c.waitErr; {
	case c.w.exceeded() != nil:
		return c.w.exceeded()
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && c.lim.Memory > 0 && (outOfMemory(stderr) || c.w.nearDataLimit()):
		return &LimitError{Resource: ResourceMemory, Limits: c.lim}
	case err != nil && c.lim.Disk > 0 && fileTooLarge(err, stderr):
		return &LimitError{Resource: ResourceDisk, Limits: c.lim}
	case err != nil:
		return &ExitError{Stderr: c.stderr.why(), Err: err}
	}
	return nil
}

// outOfMemory reports a Go program's (or a C library's) crash for want of
// memory.
func outOfMemory(stderr string) bool {
	return strings.Contains(stderr, "fatal error: runtime: out of memory") || strings.Contains(stderr, "fatal error: out of memory") ||
		strings.Contains(stderr, "cannot allocate memory")
}

// watch polls a running child's resident memory and the bytes it has
// written, and kills it past its limits.
type watch struct {
	pid  int
	lim  Limits
	kill context.CancelFunc
	done chan struct{}

	mu   sync.Mutex
	over error
	data int64 // the largest data segment seen
}

// nearDataLimit reports whether the child's data segment came within an
// eighth of the kernel's limit on it: a Go program that cannot map more
// memory may die of it in ways other than "out of memory" (Go 1.26's
// garbage collector faults).
func (w *watch) nearDataLimit() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.data >= dataLimit(w.lim)/8*7
}

// dataLimit is the kernel's limit on the child's data segment: 7/8 of the
// memory limit, so that with its code and stacks its resident set stays
// under it.
func dataLimit(lim Limits) int64 { return lim.Memory / 8 * 7 }

func (w *watch) run() {
	if w.lim.Memory <= 0 && w.lim.Disk <= 0 {
		return
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		rss, data, written, ok := usage(w.pid)
		if !ok {
			continue
		}
		w.mu.Lock()
		w.data = max(w.data, data)
		w.mu.Unlock()
		var over error
		switch {
		case w.lim.Memory > 0 && rss > w.lim.Memory:
			over = &LimitError{Resource: ResourceMemory, Limits: w.lim}
		case w.lim.Disk > 0 && written > w.lim.Disk:
			over = &LimitError{Resource: ResourceDisk, Limits: w.lim}
		}
		if over != nil {
			w.mu.Lock()
			w.over = over
			w.mu.Unlock()
			w.kill()
			return
		}
	}
}

func (w *watch) exceeded() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over
}

// capped keeps the first max bytes written to it.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// why is the line that says why the child failed: the first of a Go
// program's crash ("fatal error: …", "panic: …", "SIGSEGV: …"), else the
// last non-empty line written.
func (c *capped) why() string {
	lines := strings.Split(strings.TrimSpace(c.buf.String()), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "SIG") {
			return strings.TrimSpace(l)
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}
