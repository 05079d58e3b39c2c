// Command tiny is the only program in the e2e cluster's images: a static
// binary, standard library only, that is at once the sandbox ("pause")
// process and a small workload.
//
//	tiny [pause]          wait for SIGTERM or SIGINT, reaping children
//	tiny serve [ADDR]     HTTP on ADDR (default :8080): every path answers
//	                      "hello from HOSTNAME\n" (200)
//	tiny get URL          print URL's body; exit 1 unless the status is 2xx
//	tiny echo ARG...      print the arguments, space-separated
//
// In an image that holds /standin.json, tiny stands in for another program
// whatever its arguments (standin.go): it does what that file says for its
// command line — serve ports, or exit 0.
//
// It runs as PID 1 in its container, so it handles SIGTERM itself (PID 1 has
// no default signal actions): every mode exits 0 on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if config, err := os.ReadFile(standinConfigPath); err == nil {
		if err := runStandin(ctx, config, os.Args, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "tiny:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tiny:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		args = []string{"pause"}
	}
	switch args[0] {
	case "pause":
		return pause(ctx)
	case "serve":
		addr := ":8080"
		if len(args) > 1 {
			addr = args[1]
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "serving on", l.Addr())
		return serve(ctx, l)
	case "get":
		if len(args) != 2 {
			return errors.New("usage: tiny get URL")
		}
		return get(ctx, args[1], stdout)
	case "echo":
		_, err := fmt.Fprintln(stdout, strings.Join(args[1:], " "))
		return err
	}
	return fmt.Errorf("unknown mode %q (pause, serve, get, echo)", args[0])
}

// pause waits for ctx, reaping any child that exits meanwhile (the sandbox
// process is the init of a pod's shared PID namespace when one is asked for).
func pause(ctx context.Context) error {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sigchld:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}

func serve(ctx context.Context, l net.Listener) error {
	host, _ := os.Hostname()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", host)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func get(ctx context.Context, url string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
