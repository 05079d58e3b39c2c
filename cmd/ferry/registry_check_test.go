//go:build !ferryfront

package main

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/internal/fixture"
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
	for name, remote := range map[string]remoteFlags{"ca-file": {caFile: cert}, "insecure": {insecure: true}} {
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
	o := registryCheckOptions{output: "text", largeBlob: -1, remote: remoteFlags{plainHTTP: true}}
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
