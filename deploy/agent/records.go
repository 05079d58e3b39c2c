package agent

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WatchRecords calls changed whenever a Secret of namespace ns matching
// selector (the deployed packages' records) is added, changed or deleted,
// and once each time the watch starts again, until ctx ends: the agent
// drops its cache of images then, so that a Pod admitted right after a
// package's removal is not sent to its deleted images.
func WatchRecords(ctx context.Context, cs kubernetes.Interface, ns, selector string, changed func()) {
	for ctx.Err() == nil {
		w, err := cs.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		changed() // what changed while no watch ran
		for range w.ResultChan() {
			changed()
		}
		w.Stop()
	}
}
