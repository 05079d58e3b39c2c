package agent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A record deleted (a package removed) drops the cache at once: the next
// admission reads the records again instead of trusting them for MaxAge.
func TestWatchRecordsInvalidates(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rec", Namespace: "ferry", Labels: map[string]string{"rec": "1"}}})
	src := &countingSource{}
	c := &Cache{Source: src, MaxAge: time.Hour}
	if _, err := c.Rewriter(ctx); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	go WatchRecords(ctx, cs, "ferry", "rec", func() {
		c.Invalidate()
		select {
		case started <- struct{}{}:
		default:
		}
	})
	<-started // the watch runs
	if _, err := c.Rewriter(ctx); err != nil {
		t.Fatal(err)
	}
	before := src.reads.Load()
	if _, err := c.Rewriter(ctx); err != nil || src.reads.Load() != before {
		t.Fatalf("an unchanged cache was read again (%d → %d reads): %v", before, src.reads.Load(), err)
	}
	if err := cs.CoreV1().Secrets("ferry").Delete(ctx, "rec", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The next admissions read again once the deletion is seen (the
	// watch delivers it asynchronously).
	for deadline := time.Now().Add(10 * time.Second); src.reads.Load() == before; {
		if time.Now().After(deadline) {
			t.Fatal("after a record's deletion the cache was never read again")
		}
		time.Sleep(10 * time.Millisecond)
		if _, err := c.Rewriter(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
