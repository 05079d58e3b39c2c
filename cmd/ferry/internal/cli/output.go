package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/diskspace"
)

// OutputFlag is -o/--output, the output format: text (default) or json,
// as kubectl's and helm's -o. It means the same in every command; an
// archive a command writes is named with -f/--file (fileFlag).
type OutputFlag struct {
	format string
	// WritesFile says the command writes an archive, named with -f: a
	// path given to -o is then pointed there.
	WritesFile bool
}

func (o *OutputFlag) Register(cmd *cobra.Command) {
	AddOutputFlag(cmd, &o.format)
}

// AddOutputFlag registers -o/--output into format.
func AddOutputFlag(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVarP(format, "output", "o", "text", "output format: text or json")
}

func (o *OutputFlag) Validate() error { return CheckOutput(o.format, o.WritesFile) }

func (o *OutputFlag) JSON() bool { return o.format == "json" }

// CheckOutput refuses an output format other than text or json, and says
// where a file name given to -o (the docker and zarf habit) belongs.
func CheckOutput(format string, writesFile bool) error {
	switch {
	case format == "text" || format == "json":
		return nil
	case looksLikePath(format) && writesFile:
		return fmt.Errorf("-o %q: -o/--output is the output format (text or json); name the archive to write with -f %s", format, format)
	case looksLikePath(format):
		return fmt.Errorf("-o %q: -o/--output is the output format (text or json), and this command writes no file", format)
	}
	return fmt.Errorf("-o/--output must be text or json, not %q", format)
}

// looksLikePath reports whether s reads as a file name rather than a
// format: it has a folder or an extension.
func looksLikePath(s string) bool {
	return strings.ContainsAny(s, `./\`)
}

// formatNames are words a user may give -f meaning an output format.
var formatNames = map[string]bool{"json": true, "text": true, "yaml": true, "yml": true, "table": true, "wide": true}

// FileFlag is -f/--file, the archive a command writes (as tar's -f).
type FileFlag struct{ Path string }

func (f *FileFlag) Register(cmd *cobra.Command, usage string) {
	cmd.Flags().StringVarP(&f.Path, "file", "f", "", usage)
}

// Validate refuses a format name where the archive's path is expected (the
// kubectl and helm habit meant -o), and an explicit format that the file's
// extension contradicts; ./json names a file called json.
// NotInput refuses an output file that is one of the files the command
// reads (the same file, whatever the path says): writing the result there
// would destroy its own input.
func (f *FileFlag) NotInput(inputs ...string) error {
	out, err := os.Stat(f.Path)
	if f.Path == "" || err != nil {
		return nil
	}
	for _, in := range inputs {
		if fi, err := os.Stat(in); err == nil && os.SameFile(out, fi) {
			return fmt.Errorf("-f %s is %s, which this command reads: write the result elsewhere", f.Path, in)
		}
	}
	return nil
}

func (f *FileFlag) Validate(format artifact.Format) error {
	if formatNames[strings.ToLower(f.Path)] {
		return fmt.Errorf("-f %q: -f/--file is the archive to write; for %s output use -o %s (for a file of that name, -f ./%s)", f.Path, f.Path, f.Path, f.Path)
	}
	if fi, err := os.Stat(f.Path); err == nil && fi.IsDir() {
		return fmt.Errorf("-f %s is a folder: name the file to write", f.Path)
	}
	if ext := archiveFormat(f.Path); format != "" && ext != "" && ext != format {
		return fmt.Errorf("--format %s, but -f %s names a %s archive: drop --format or change the extension", format, f.Path, ext)
	}
	return nil
}

// archiveFormat is the format a file name's extension says, or "" when it
// says none.
func archiveFormat(path string) artifact.Format {
	switch {
	case strings.HasSuffix(path, ".tar"):
		return artifact.FormatTar
	case strings.HasSuffix(path, ".tar.zst"), strings.HasSuffix(path, ".tzst"):
		return artifact.FormatTarZstd
	}
	return ""
}

// WriteJSON prints v as indented JSON.
func WriteJSON(w io.Writer, v any) error {
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
	mu    sync.Mutex // events come from a push's parallel streams
	last  time.Time
	shown bool
	phase artifact.Phase
	blobs int   // blobs of this phase so far
	bytes int64 // their bytes (those a registry had count too: done)
	moved int64 // bytes that moved
	// moving are the bytes moved so far of blobs still moving (Partial
	// events), by digest.
	moving map[string]int64
	total  int64 // the phase's bytes, when an event has said
}

// NewProgress returns a ProgressFunc for cmd's stderr: a line redrawn on a
// terminal; with -o json, one JSON object a line (progressEvent) for
// tools; else nil.
func NewProgress(cmd *cobra.Command) (artifact.ProgressFunc, func()) {
	w := cmd.ErrOrStderr()
	if f := cmd.Flags().Lookup("output"); f != nil && f.Value.String() == "json" {
		return jsonProgress(w), func() {}
	}
	if !isTerminal(w) {
		return nil, func() {}
	}
	p := &progressBar{w: w, start: time.Now(), moving: map[string]int64{}}
	return p.report, p.done
}

// report adds one event to the phase's counts and redraws the line at most
// ten times a second (and at a phase's last blob, when its total is known):
// the bytes done, counting those of blobs still moving, the rate, and the
// time left when the phase's bytes are known.
func (p *progressBar) report(ev artifact.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ev.Phase != p.phase {
		p.phase, p.blobs, p.bytes, p.moved, p.total, p.start = ev.Phase, 0, 0, 0, 0, time.Now()
		clear(p.moving)
	}
	if ev.TotalBytes > 0 {
		p.total = ev.TotalBytes
	}
	switch {
	case ev.Partial:
		p.moving[string(ev.Desc.Digest)] = ev.Bytes
	case ev.Desc.Digest != "":
		delete(p.moving, string(ev.Desc.Digest))
		p.blobs++
		p.bytes += ev.Desc.Size
		p.moved += ev.Bytes
	}
	now := time.Now()
	if now.Sub(p.last) < 100*time.Millisecond && (ev.TotalBlobs == 0 || p.blobs < ev.TotalBlobs) {
		return
	}
	p.last = now
	var inFlight int64
	for _, n := range p.moving {
		inFlight += n
	}
	elapsed := now.Sub(p.start).Seconds()
	rate := float64(p.moved+inFlight) / elapsed
	var line string
	switch {
	case ev.Desc.Digest == "" && ev.Bytes > 0 && ev.TotalBytes > 0:
		// Work counted in bytes, not blobs (a split's parts).
		r := float64(ev.Bytes) / elapsed
		line = fmt.Sprintf("%s %s, %s/%s, %s/s%s", ev.Phase, ev.Item, HumanBytes(ev.Bytes), HumanBytes(ev.TotalBytes), HumanBytes(int64(r)), timeLeft(ev.TotalBytes-ev.Bytes, r, elapsed))
	case ev.Desc.Digest == "":
		line = string(ev.Phase) + " " + ev.Item
		if ev.Phase == artifact.PhaseResolve {
			line = "resolved " + ev.Item
		}
	case ev.TotalBlobs > 0:
		line = fmt.Sprintf("%s %d/%d blobs, %s/%s, %s/s%s", ev.Phase, p.blobs, ev.TotalBlobs, HumanBytes(p.bytes+inFlight), HumanBytes(p.total), HumanBytes(int64(rate)), timeLeft(p.total-p.bytes-inFlight, rate, elapsed))
	default:
		line = fmt.Sprintf("%s %d blobs, %s, %s/s", ev.Phase, p.blobs, HumanBytes(p.bytes+inFlight), HumanBytes(int64(rate)))
	}
	if len(line) > 100 {
		line = line[:100]
	}
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.shown = true
}

// timeLeft says ", N left" for left bytes at rate, once a second of it
// has given a rate worth dividing by.
func timeLeft(left int64, rate, elapsed float64) string {
	if left <= 0 || rate <= 0 || elapsed < 1 {
		return ""
	}
	return ", " + (time.Duration(float64(left)/rate) * time.Second).Round(time.Second).String() + " left"
}

// progressEvent is one progress event as -o json writes it to stderr, a
// line each: a blob (digest, size, the bytes that moved for it; partial
// while it is still moving), or an item of the work.
type progressEvent struct {
	Event      string `json:"event"` // "progress"
	Phase      string `json:"phase"`
	Digest     string `json:"digest,omitempty"`
	Size       int64  `json:"size,omitempty"`
	Bytes      int64  `json:"bytes,omitempty"`
	Partial    bool   `json:"partial,omitempty"`
	Skipped    bool   `json:"skipped,omitempty"`
	Item       string `json:"item,omitempty"`
	TotalBlobs int    `json:"totalBlobs,omitempty"`
	TotalBytes int64  `json:"totalBytes,omitempty"`
}

// jsonProgress writes each event to w as a progressEvent line.
func jsonProgress(w io.Writer) artifact.ProgressFunc {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(ev artifact.Progress) {
		e := progressEvent{Event: "progress", Phase: string(ev.Phase), Digest: string(ev.Desc.Digest), Size: ev.Desc.Size, Bytes: ev.Bytes,
			Partial: ev.Partial, Skipped: ev.Skipped, Item: ev.Item, TotalBlobs: ev.TotalBlobs, TotalBytes: ev.TotalBytes}
		mu.Lock()
		enc.Encode(e)
		mu.Unlock()
	}
}

func (p *progressBar) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// HumanBytes formats n with a binary unit ("3.1 MiB"), as library
// errors show sizes.
func HumanBytes(n int64) string { return diskspace.Bytes(n) }
