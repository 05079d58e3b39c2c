package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestServeGet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, l) }()

	var out bytes.Buffer
	if err := run(context.Background(), []string{"get", "http://" + l.Addr().String() + "/any"}, &out); err != nil {
		t.Fatalf("get: %v", err)
	}
	host, _ := os.Hostname()
	if want := "hello from " + host + "\n"; out.String() != want {
		t.Errorf("get printed %q, want %q", out.String(), want)
	}

	cancel() // as SIGTERM does
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop when its context ended")
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		args    []string
		out     string
		wantErr string
	}{
		{args: []string{"echo", "a", "b"}, out: "a b\n"},
		{args: nil},               // pause, ends with ctx
		{args: []string{"pause"}}, // likewise
		{args: []string{"serve", ":bad"}, wantErr: "listen"},
		{args: []string{"get"}, wantErr: "usage"},
		{args: []string{"get", "http://127.0.0.1:1/"}, wantErr: "127.0.0.1:1"},
		{args: []string{"nope"}, wantErr: `unknown mode "nope"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := run(ctx, tc.args, &out)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if out.String() != tc.out {
				t.Errorf("printed %q, want %q", out.String(), tc.out)
			}
		})
	}
}
