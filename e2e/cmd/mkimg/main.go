// Command mkimg wraps a static binary into a one-layer image and writes it as
// an OCI image layout tar for `ctr images import` (see package
// e2e/internal/mkimg). It prints NAME@DIGEST of the image written.
//
//	mkimg -bin tiny -name ferry.local/tiny:e2e -o tiny.tar [-label k=v]... [-cmd arg]...
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimg:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimg", flag.ContinueOnError)
	bin := fs.String("bin", "", "static binary to put in the image as /tiny")
	name := fs.String("name", "", "tagged image name, e.g. ferry.local/tiny:e2e")
	out := fs.String("o", "", "archive to write")
	var labels, cmd listFlag
	fs.Var(&labels, "label", "config label KEY=VALUE (repeatable)")
	fs.Var(&cmd, "cmd", "default argument (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *name == "" || *out == "" || fs.NArg() > 0 {
		return errors.New("usage: mkimg -bin FILE -name NAME:TAG -o FILE [-label K=V]... [-cmd ARG]...")
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		return err
	}
	opts := mkimg.Options{Cmd: cmd}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("label %q: want KEY=VALUE", l)
		}
		if opts.Labels == nil {
			opts.Labels = map[string]string{}
		}
		opts.Labels[k] = v
	}
	img, err := mkimg.New(data, opts)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := img.WriteArchive(&buf, *name); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".mkimg-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), *out); err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", *name, img.Manifest.Digest)
	return nil
}
