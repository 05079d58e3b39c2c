package chartrender

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/internal/childproc"
)

// Limited loads, packages and renders charts as chart.Packager and
// Renderer do, in a child process within Limits: a chart past one is
// refused with a *LimitError, its child killed, and this process holds no
// more than the chart's files and what it renders to (at most
// Limits.Output). The child is this program run again with ChildArg
// (Exe), tied to this process: it dies with it.
//
// PackageChart and RenderChart share one child, started at the first
// chart and kept for the next ones (a child costs some 50 ms of CPU to
// start) until Close, until a chart is refused, or until no chart came for
// 10 s; charts are taken one at a time. RenderRelease starts a child of its own each time. The zero
// value renders within the default limits, with os.Executable() as the
// child.
type Limited struct {
	// Exe is the program run as the child, with ChildArg as its only
	// argument; os.Executable() if empty (ferry-full, whose main serves
	// ChildArg).
	Exe string
	// Limits bound the child, for each chart.
	Limits Limits
	// Cluster is the cluster RenderRelease renders against.
	Cluster Cluster

	mu   sync.Mutex
	proc *childproc.Proc // the kept child, nil before the first chart
	idle *time.Timer     // ends the kept child keepIdle after its last chart
	gen  int             // counts the kept child's calls
}

// keepIdle is how long the kept child waits for the next chart before it
// is ended (its memory given back: create goes on to images and SBOMs).
var keepIdle = 10 * time.Second

var (
	_ build.ChartRenderer = (*Limited)(nil)
	_ build.ChartPackager = (*Limited)(nil)
)

// LimitError is a chart refused because its child passed one of its
// Limits.
type LimitError struct {
	// Resource is the limit passed: "memory", "time" or "output".
	Resource string
	// Limit says it: "512 MiB of memory", "30s", "64 MiB of output".
	Limit string
	// PeakRSS is the child's peak resident set in bytes, where the system
	// tells it (0 if not).
	PeakRSS int64
}

func (e *LimitError) Error() string { return "passed its limit of " + e.Limit }

// PackageChart implements artifact.ChartPackager: chart.Read reads the
// chart here, chart.Package loads and packages it in the child (within
// Limits.Memory and Limits.Timeout).
func (l *Limited) PackageChart(ctx context.Context, fsys fs.FS, name string, mtime time.Time) (archive, config []byte, err error) {
	src, err := chart.Read(fsys, name)
	if err != nil {
		return nil, nil, err
	}
	req := &packageRequest{Archive: src.Archive != nil, MTime: mtime}
	bulk := [][]byte{src.Archive}
	if !req.Archive {
		bulk = bulk[:0]
		for _, f := range src.Files {
			req.Names = append(req.Names, f.Name)
			bulk = append(bulk, f.Data)
		}
	}
	a, err := l.call(ctx, request{Package: req}, bulk, true)
	if err != nil {
		return nil, nil, err
	}
	if len(a.Archive) > artifact.MaxChartSize || len(a.Config) > artifact.MaxManifestSize {
		return nil, nil, errors.New("the chart renderer gave a chart over its limits")
	}
	return a.Archive, a.Config, nil
}

// RenderChart implements artifact.ChartRenderer as Renderer does, in the
// child.
func (l *Limited) RenderChart(ctx context.Context, archive []byte, rel build.ChartRelease) ([]build.RenderedManifest, error) {
	if int64(len(archive)) > artifact.MaxChartSize {
		return nil, fmt.Errorf("larger than %d bytes", artifact.MaxChartSize)
	}
	values, err := valueOf(rel.Values)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	a, err := l.call(ctx, request{Render: &renderRequest{
		Name: rel.Name, Namespace: rel.Namespace, KubeVersion: rel.KubeVersion, Values: values,
	}}, [][]byte{archive}, true)
	if err != nil {
		return nil, err
	}
	return a.Manifests, nil
}

// Close ends the kept child, if there is one. The Limited may be used
// again after: a new child starts at the next chart.
func (l *Limited) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.idle != nil {
		l.idle.Stop()
	}
	if l.proc == nil {
		return nil
	}
	err := l.proc.Close()
	l.proc = nil
	return err
}

// endIdle ends the kept child, if no chart came since its call gen.
func (l *Limited) endIdle(gen int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc != nil && l.gen == gen {
		l.proc.Close()
		l.proc = nil
	}
}

// call has the child answer req, whose bytes are bulk, the kept child if
// keep, else one started for it. A child that fails is ended: the kept
// one is replaced at the next call.
func (l *Limited) call(ctx context.Context, req request, bulk [][]byte, keep bool) (answer, error) {
	lim := l.Limits.withDefaults()
	req.Output, req.Bulk = lim.Output, len(bulk)
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(req); err != nil {
		return answer{}, fmt.Errorf("chart renderer: %w", err)
	}
	var proc *childproc.Proc
	if keep {
		l.mu.Lock()
		defer l.mu.Unlock()
		proc = l.proc
		if l.idle != nil {
			l.idle.Stop()
		}
		l.gen++
		defer func() {
			if l.proc != nil {
				gen := l.gen
				l.idle = time.AfterFunc(keepIdle, func() { l.endIdle(gen) })
			}
		}()
	}
	if proc == nil {
		var err error
		if proc, err = l.start(ctx, lim); err != nil {
			return answer{}, err
		}
		if keep {
			l.proc = proc
		} else {
			defer proc.Close()
		}
	}
	msg, err := proc.Call(ctx, append([][]byte{buf.Bytes()}, bulk...)...)
	if err != nil {
		if keep {
			l.proc = nil
		}
		proc.Close()
		return answer{}, refusal(err, lim, proc.PeakRSS())
	}
	a, err := decodeAnswer(msg)
	if err != nil {
		return answer{}, fmt.Errorf("chart renderer: its answer: %w", err)
	}
	switch {
	case a.OverOutput:
		return answer{}, &LimitError{Resource: string(childproc.ResourceOutput), Limit: childproc.Bytes(lim.Output) + " of output"}
	case a.Err != "":
		return answer{}, errors.New(a.Err)
	}
	return a, nil
}

// answerSlack is how much more than a rendering's limit an answer may be:
// its framing, or a packaged chart and its metadata.
const answerSlack = artifact.MaxChartSize + artifact.MaxManifestSize + 1<<20

// start starts a child within lim, not ended by ctx's end (a kept child
// outlives the call that started it; each call's ctx still ends the call).
func (l *Limited) start(ctx context.Context, lim Limits) (*childproc.Proc, error) {
	exe := l.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("chart renderer: %w", err)
		}
	}
	proc, err := childproc.Start(context.WithoutCancel(ctx), exe, []string{ChildArg}, childproc.RunOptions{
		Limits: childproc.Limits{Memory: lim.Memory, Time: lim.Timeout, Output: lim.Output + answerSlack},
	})
	if err != nil {
		return nil, fmt.Errorf("chart renderer: %w", err)
	}
	return proc, nil
}

// refusal is the error of a child's failed call.
func refusal(err error, lim Limits, peak int64) error {
	var le *childproc.LimitError
	var ee *childproc.ExitError
	switch {
	case errors.As(err, &le) && le.Resource == childproc.ResourceOutput:
		return &LimitError{Resource: string(le.Resource), Limit: childproc.Bytes(lim.Output) + " of output", PeakRSS: peak}
	case errors.As(err, &le):
		return &LimitError{Resource: string(le.Resource), Limit: le.Limit(), PeakRSS: peak}
	case errors.As(err, &ee):
		return fmt.Errorf("the chart renderer failed: %w", ee)
	}
	return err
}
