package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
)

// TestProgressLineCountsBytesMoving: the line counts the bytes of a blob
// still moving (Partial events), says the rate, and the time left once the
// total is known; the blob's own event replaces its partial count.
func TestProgressLineCountsBytesMoving(t *testing.T) {
	var buf bytes.Buffer
	p := &progressBar{w: &buf, start: time.Now().Add(-2 * time.Second), moving: map[string]int64{}}
	p.phase = artifact.PhasePush
	blob := ocispec.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("a", 64)), Size: 100 << 20}
	p.report(artifact.Progress{Phase: artifact.PhasePush, Desc: blob, Bytes: 40 << 20, Partial: true, TotalBlobs: 2, TotalBytes: 200 << 20})
	line := buf.String()
	for _, want := range []string{"push 0/2 blobs", "40.0 MiB/200.0 MiB", "MiB/s", "left"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q does not say %q", line, want)
		}
	}
	buf.Reset()
	p.last = time.Time{}
	p.report(artifact.Progress{Phase: artifact.PhasePush, Desc: blob, Bytes: 100 << 20, TotalBlobs: 2, TotalBytes: 200 << 20})
	if line := buf.String(); !strings.Contains(line, "push 1/2 blobs, 100.0 MiB/200.0 MiB") {
		t.Errorf("after the blob's own event: %q", line)
	}
}

// TestJSONProgress: with -o json, each event is one JSON object a line.
func TestJSONProgress(t *testing.T) {
	var buf bytes.Buffer
	fn := jsonProgress(&buf)
	fn(artifact.Progress{Phase: artifact.PhasePull, Desc: ocispec.Descriptor{Digest: digest.Digest("sha256:" + strings.Repeat("b", 64)), Size: 9 << 20}, Bytes: 4 << 20, Partial: true})
	fn(artifact.Progress{Phase: artifact.PhaseResolve, Item: "image x"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	var ev progressEvent
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev.Event != "progress" || ev.Phase != "pull" || !ev.Partial || ev.Bytes != 4<<20 || ev.Size != 9<<20 {
		t.Errorf("first event %+v (%v)", ev, err)
	}
}
