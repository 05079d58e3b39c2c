// Command ferry-injector is stage 1 of the cluster bootstrap (docs/design/injector.md).
// The stage-0 loader joins it from its chunks and execs it with these flags:
//
//	ferry-injector -chunks DIR -count N -sha256 HEX -dir OUT [-addr :5000]
//
// It joins DIR/payload-00000 … DIR/payload-<N-1> in order, verifies their
// sha256, extracts the OCI layout they carry into OUT and serves it
// read-only on -addr until SIGTERM. Without -chunks it serves the layout
// already in -dir. With -self-sha256 it first checks its own file (argv[0])
// against that digest, catching a damaged stage-1 chunk.
package main

import (
	"context"
	"flag"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrypkg/ferry/injector"
)

func main() {
	if err := run(os.Args); err != nil {
		os.Stderr.WriteString("ferry-injector: " + err.Error() + "\n")
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	chunks := fs.String("chunks", "", "directory holding the payload chunks (empty: serve -dir as is)")
	prefix := fs.String("prefix", injector.DefaultChunkPrefix, "file name prefix of the payload chunks")
	count := fs.Int("count", 0, "number of payload chunks")
	sum := fs.String("sha256", "", "expected sha256 of the joined payload")
	dir := fs.String("dir", "", "OCI layout directory: extraction target, then served")
	addr := fs.String("addr", ":5000", "listen address")
	self := fs.String("self-sha256", "", "expected sha256 of this binary (argv[0])")
	repos := fs.String("repositories", "", "comma-separated repository names to serve (default: any)")
	grace := fs.Duration("grace", 10*time.Second, "how long SIGTERM waits for responses in flight")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errorString("-dir is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *self != "" {
		got, err := injector.FileSHA256(args[0])
		if err != nil {
			return errorString("self check: " + err.Error())
		}
		if "sha256:"+got != *self && got != *self {
			return errorString("self check: " + args[0] + " has sha256:" + got + ", want " + *self + " (a stage-1 chunk is damaged)")
		}
	}
	if *chunks != "" {
		start := time.Now()
		res, err := injector.Reassemble(ctx, injector.ReassembleOptions{Dir: *chunks, Prefix: *prefix, Count: *count, Digest: *sum, Out: *dir})
		if err != nil {
			return err
		}
		os.Stderr.WriteString("ferry-injector: verified " + strconv.FormatInt(res.Size, 10) + " bytes in " + strconv.Itoa(*count) + " chunks, extracted " + strconv.Itoa(res.Files) + " files in " + time.Since(start).Round(time.Millisecond).String() + "\n")
	}
	var opts []injector.ServerOption
	if *repos != "" {
		opts = append(opts, injector.WithRepositories(strings.Split(*repos, ",")...))
	}
	srv, err := injector.NewServer(*dir, opts...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	os.Stderr.WriteString("ferry-injector: serving " + *dir + " on " + ln.Addr().String() + "\n")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-errc
	os.Stderr.WriteString("ferry-injector: shut down\n")
	return err
}

type errorString string

func (e errorString) Error() string { return string(e) }
