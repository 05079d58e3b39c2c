package main

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// TestRegistryCheckTLS checks a loopback registry that speaks only HTTPS:
// with --ca-file (or --insecure), `registry check HOST:PORT/…` speaks
// HTTPS to it, where it spoke plain HTTP to every loopback host.
func TestRegistryCheckTLS(t *testing.T) {
	cert, key, _, err := fixture.SelfSignedLoopback(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := serveForTest(t, registryServeOptions{tlsCert: cert, tlsKey: key})
	if !strings.HasPrefix(u, "https://") {
		t.Fatalf("serve with TLS at %s", u)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	for name, remote := range map[string]cli.RemoteFlags{"ca-file": {CAFile: cert}, "insecure": {Insecure: true}} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			o := registryCheckOptions{output: "text", largeBlob: -1, remote: remote}
			if err := runRegistryCheck(context.Background(), strings.NewReader(""), &out, io.Discard, pu.Host+"/checks-"+name, o); err != nil {
				t.Fatalf("check %s with --%s: %v\n%s", pu.Host, name, err, out.String())
			}
			if !strings.Contains(out.String(), "https://"+pu.Host) {
				t.Fatalf("check did not speak HTTPS to %s:\n%s", pu.Host, out.String())
			}
		})
	}
	// --plain-http still means plain HTTP, which the TLS registry refuses.
	o := registryCheckOptions{output: "text", largeBlob: -1, remote: cli.RemoteFlags{PlainHTTP: true}}
	if err := runRegistryCheck(context.Background(), strings.NewReader(""), io.Discard, io.Discard, pu.Host+"/plain", o); err == nil {
		t.Fatal("check with --plain-http of an HTTPS-only registry passed")
	}
}

func TestSplitRegistryRefTLS(t *testing.T) {
	for _, tc := range []struct {
		ref             string
		plain, tlsAsked bool
		want            string
	}{
		{"127.0.0.1:5000/x", false, true, "https://127.0.0.1:5000"},
		{"localhost:5000", false, true, "https://localhost:5000"},
		{"[::1]:5000", false, true, "https://[::1]:5000"},
		{"[::1]:5000", false, false, "http://[::1]:5000"},
		{"registry.example", true, false, "http://registry.example"},
		{"http://127.0.0.1:5000", false, true, "http://127.0.0.1:5000"},
	} {
		if base, _, err := splitRegistryRef(tc.ref, tc.plain, tc.tlsAsked); err != nil || base != tc.want {
			t.Errorf("splitRegistryRef(%q, plain %v, tls %v) = %q, %v; want %q", tc.ref, tc.plain, tc.tlsAsked, base, err, tc.want)
		}
	}
}

// TestRegistryCheckAllAfterMirror mirrors a package of several images, some
// nested in others' repositories, into `ferry registry serve`, then runs
// the whole check suite (--all) against it, twice (the second run meets
// the first one's repositories, nested under ferry-conformance): every check
// passes, the catalog's among them (it was out of lexical order and dropped
// the connection with last= and n=).
func TestRegistryCheckAllAfterMirror(t *testing.T) {
	dir := t.TempDir()
	images := []struct{ ref, layout string }{
		{"docker.io/library/app:1.0", "app"},
		{"ghcr.io/org/tool:2.0", "tool"},
		{"quay.io/org/tool/0sub:3.0", "sub"},
		{"registry.example/org/tool-x:1", "toolx"},
	}
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: several, version: 0.1.0}\nplatforms: [linux/" + runtime.GOARCH + "]\ncomponents:\n  - name: c\n    images:\n"
	for i, img := range images {
		writeBigLayoutImage(t, filepath.Join(dir, img.layout), img.ref[strings.LastIndex(img.ref, ":")+1:], 64<<10, uint64(10+i))
		def += "      - {ref: " + img.ref + ", layout: " + img.layout + "}\n"
	}
	writeFile(t, filepath.Join(dir, "ferry.yaml"), def)
	if _, stderr, code := runFerry(t, dir, "package", "create", "-f", "several.tar", "--sbom=false"); code != 0 {
		t.Fatalf("package create: %s", stderr)
	}
	u, _ := serveForTest(t, registryServeOptions{})
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runFerry(t, dir, "package", "mirror", "several.tar", pu.Host); code != 0 {
		t.Fatalf("package mirror: %s", stderr)
	}
	for run := range 2 {
		var out bytes.Buffer
		o := registryCheckOptions{all: true, output: "text", largeBlob: -1}
		if err := runRegistryCheck(context.Background(), strings.NewReader(""), &out, io.Discard, pu.Host, o); err != nil {
			t.Fatalf("check --all, run %d, after a mirror: %v\n%s", run+1, err, out.String())
		}
	}
}
