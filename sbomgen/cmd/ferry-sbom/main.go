// Command ferry-sbom writes the SBOM of one image manifest of an OCI image
// layout, made with Syft (package sbomgen). `ferry package create` runs it
// for each image platform it keeps; it is a binary of its own so that Syft
// stays out of ferry's (`make build` puts it beside them, in bin/).
//
// Usage:
//
//	ferry-sbom --layout DIR --manifest sha256:HEX [--format spdx-json|cyclonedx-json]
//	           [--created RFC3339] [--ref REF] [--tool-version V]
//
// --layout is an OCI image layout whose index.json lists the manifest
// --manifest names (an OCI or Docker v2 image manifest), with its config
// and layers in its blobs; it is read as given (ferry checks every blob
// before it writes it there). --format is the document format (default
// spdx-json). --created is the creation time the document states (default
// 1970-01-01T00:00:00Z): the same layout and flags give the same bytes.
// --ref is the image's original reference, named as the document's
// subject; --tool-version the ferry version named as its creator tool
// (default devel).
//
// On success, the JSON document is written to standard output and the exit
// code is 0. On failure, nothing is written to standard output, one line
// saying why to standard error, and the exit code is 1 (2 for bad usage).
// Unpacked layers go under $TMPDIR and are removed before it exits;
// SIGINT and SIGTERM stop it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ferrypkg/ferry/sbomgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "ferry-sbom: "+oneLine(err))
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "ferry-sbom: "+oneLine(err))
		os.Exit(1)
	}
}

// usageError is a bad command line.
type usageError struct{ error }

// run parses args and writes the SBOM to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ferry-sbom", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		dir      = fs.String("layout", "", "OCI image layout holding the image `DIR`")
		manifest = fs.String("manifest", "", "digest of the image manifest to describe (sha256:…)")
		format   = fs.String("format", string(sbomgen.FormatSPDX), "document format: spdx-json or cyclonedx-json")
		created  = fs.String("created", "1970-01-01T00:00:00Z", "creation time the document states (RFC 3339)")
		ref      = fs.String("ref", "", "the image's original reference")
		version  = fs.String("tool-version", "", "ferry version named as the creator tool (default devel)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.Usage()
			return err
		}
		return usageError{err}
	}
	switch {
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	case *dir == "" || *manifest == "":
		return usageError{errors.New("--layout and --manifest are required")}
	}
	f, err := sbomgen.ParseFormat(*format)
	if err != nil {
		return usageError{fmt.Errorf("--format: %w", err)}
	}
	t, err := time.Parse(time.RFC3339, *created)
	if err != nil {
		return usageError{fmt.Errorf("--created: %q is not an RFC 3339 time", *created)}
	}
	doc, err := sbomgen.Generate(ctx, *dir, *manifest, sbomgen.Options{Format: f, Ref: *ref, Created: t, ToolVersion: *version})
	if err != nil {
		return err
	}
	_, err = stdout.Write(doc)
	return err
}

// oneLine joins the lines of err's message.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}
