package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ferrypkg/ferry/artifact"
)

// outputFlag is the --output flag: text (default) or json.
type outputFlag struct{ format string }

func (o *outputFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "O", "text", "output format: text or json")
}

func (o *outputFlag) validate() error {
	if o.format != "text" && o.format != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o.format)
	}
	return nil
}

func (o *outputFlag) json() bool { return o.format == "json" }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar renders artifact progress on one terminal line of stderr; it
// stays silent when stderr is not a terminal.
type progressBar struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
	last  time.Time
	shown bool
}

// newProgress returns a ProgressFunc for cmd's stderr, or nil when stderr is
// not a terminal.
func newProgress(cmd *cobra.Command) (artifact.ProgressFunc, func()) {
	w := cmd.ErrOrStderr()
	if !isTerminal(w) {
		return nil, func() {}
	}
	p := &progressBar{w: w, start: time.Now()}
	return p.report, p.done
}

func (p *progressBar) report(ev artifact.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond && (ev.TotalBlobs == 0 || ev.Blobs < ev.TotalBlobs) {
		return
	}
	p.last = now
	rate := float64(ev.Bytes) / now.Sub(p.start).Seconds()
	var line string
	switch {
	case ev.Phase == artifact.PhaseResolve:
		line = "resolved " + ev.Item
	case ev.TotalBlobs > 0:
		line = fmt.Sprintf("%s %d/%d blobs, %s/%s, %s/s", ev.Phase, ev.Blobs, ev.TotalBlobs, humanBytes(ev.Bytes), humanBytes(ev.TotalBytes), humanBytes(int64(rate)))
	default:
		line = fmt.Sprintf("%s %d blobs, %s, %s/s", ev.Phase, ev.Blobs, humanBytes(ev.Bytes), humanBytes(int64(rate)))
	}
	if len(line) > 100 {
		line = line[:100]
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.shown = true
}

func (p *progressBar) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// humanBytes formats n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
