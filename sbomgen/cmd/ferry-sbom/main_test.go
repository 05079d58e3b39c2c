package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/sbomgen"
	"github.com/ferrypkg/ferry/sbomgen/internal/imagetest"
)

// TestRun: the flags give the document Generate gives; bad usage and
// failures are errors, with nothing written.
func TestRun(t *testing.T) {
	dir, m, _ := imagetest.Layout(t)
	ctx := context.Background()
	var out bytes.Buffer
	err := run(ctx, []string{"--layout", dir, "--manifest", m.String(), "--format", "cyclonedx-json",
		"--created", "2024-01-02T03:04:05Z", "--ref", "example.com/app:1.0", "--tool-version", "v1"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := sbomgen.Generate(ctx, dir, m.String(), sbomgen.Options{Format: sbomgen.FormatCycloneDX,
		Created: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Ref: "example.com/app:1.0", ToolVersion: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("run wrote another document than Generate's:\n%.300s\n%.300s", out.Bytes(), want)
	}

	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--layout", dir}, true, "--layout and --manifest are required"},
		{[]string{"--layout", dir, "--manifest", m.String(), "extra"}, true, `unexpected argument "extra"`},
		{[]string{"--layout", dir, "--manifest", m.String(), "--format", "xml"}, true, `--format: unknown SBOM format "xml"`},
		{[]string{"--layout", dir, "--manifest", m.String(), "--created", "yesterday"}, true, `--created: "yesterday" is not an RFC 3339 time`},
		{[]string{"--colour", "red"}, true, "flag provided but not defined: -colour"},
		{[]string{"--layout", t.TempDir(), "--manifest", m.String()}, false, "index.json"},
	} {
		var out bytes.Buffer
		err := run(ctx, c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, new(usageError)) != c.usage || out.Len() != 0 {
			t.Errorf("%v: %v (usage %v), wrote %d bytes; want %q", c.args, err, errors.As(err, new(usageError)), out.Len(), c.want)
		}
	}
}
