package main

import (
	"context"
	"testing"
	"time"
)

// After SIGTERM the registry keeps serving for --drain-delay: the context
// it serves until ends that much later, not at once.
func TestDrainedOutlivesTheSignal(t *testing.T) {
	sig, stop := context.WithCancel(context.Background())
	served := drained(sig, 200*time.Millisecond)
	stop()
	start := time.Now()
	select {
	case <-served.Done():
		t.Fatal("serving stopped with the signal")
	case <-time.After(100 * time.Millisecond):
	}
	<-served.Done()
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("serving stopped %s after the signal, want the drain delay", d)
	}
	if drained(sig, 0) != sig {
		t.Fatal("no delay: the signal's own context")
	}
}
