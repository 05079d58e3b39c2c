package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// ErrTimedOut is wrapped by the errors of the waits when the time is up.
var ErrTimedOut = errors.New("timed out")

// Poll's interval between two checks starts at firstPoll and grows by half
// each time up to maxPoll: what is ready within a second (most of what
// init waits for) is seen within a tenth of it, and a long wait costs a
// few requests a second. (A fixed half second made init's dozen waits in a
// row cost about 3 s of nothing.)
const (
	firstPoll = 50 * time.Millisecond
	maxPoll   = 400 * time.Millisecond
)

// Poll calls cond, at first every 50 ms and then less often (up to every
// 400 ms), until it is true, fails, or timeout; then the error wraps
// ErrTimedOut and says what was still not so.
func Poll(ctx context.Context, timeout time.Duration, cond func() (bool, error), what string) error {
	return poll(ctx, timeout, firstPoll, maxPoll, nil, cond, what)
}

// PollEvery is Poll at a fixed interval: for a cheap check of something
// that changes at a moment no watch tells (an answer through a NodePort,
// the API server's own view of a webhook), where Poll's 400 ms would be
// most of the wait.
func PollEvery(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error), what string) error {
	return poll(ctx, timeout, interval, interval, nil, cond, what)
}

// PollWatch is Poll woken by the events of the watch that watchFn opens
// with opts (opened before cond's first call, so that no change is
// missed): what a watch reports is seen at once instead of up to 400 ms
// later — init waits for a dozen things in a row. Poll's intervals stay as
// a floor: a watch that cannot be opened, or ends, leaves them.
//
// The watch starts from resource version "0", whatever opts says: the API
// server answers a watch from "now" (no version) only once its watch cache
// has caught up with etcd's newest revision, which on a kind of object that
// is not changing takes until etcd's next progress notification — 3.0 s,
// the cache's limit, against etcd 3.4 (Debian's), where init's second run
// spent 6 of its 7.6 s so. From "0" the watch starts at once from the
// cache's state: it first reports the objects there (one wake-up; cond
// reads the truth anyway) and then every change after it.
func PollWatch(ctx context.Context, timeout time.Duration, watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), opts metav1.ListOptions, cond func() (bool, error), what string) error {
	opts.ResourceVersion = "0"
	start := func(ctx context.Context) (watch.Interface, error) { return watchFn(ctx, opts) }
	return poll(ctx, timeout, firstPoll, maxPoll, start, cond, what)
}

func poll(ctx context.Context, timeout, first, most time.Duration, start func(context.Context) (watch.Interface, error), cond func() (bool, error), what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var events <-chan watch.Event
	if start != nil {
		if w, err := start(ctx); err == nil {
			defer w.Stop()
			events = w.ResultChan()
		}
	}
	interval := first
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		timer.Reset(interval)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w after %s: %s", ErrTimedOut, timeout, what)
		case _, open := <-events:
			if !open {
				events = nil
			}
			drain(&events) // one look for a burst of events
		case <-timer.C:
		}
		interval = min(interval*3/2, most)
	}
}

// drain takes the events already waiting on *events, and sets it to nil
// when the watch has ended.
func drain(events *<-chan watch.Event) {
	for {
		select {
		case _, open := <-*events:
			if !open {
				*events = nil
				return
			}
		default:
			return
		}
	}
}

// DeleteAndWait deletes the named object (if any) and waits, up to a
// minute, until it is gone.
func DeleteAndWait[T any](ctx context.Context, c interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, name string) error {
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return Poll(ctx, time.Minute, func() (bool, error) {
		_, err := c.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}, name+" still there")
}

// PodReady says whether p's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Crashed reports a container of p that ended in failure, for a fast
// error; use it as WaitPodReady's fail.
func Crashed(p *corev1.Pod) error {
	for _, c := range p.Status.ContainerStatuses {
		for _, st := range []corev1.ContainerState{c.State, c.LastTerminationState} {
			if t := st.Terminated; t != nil && t.ExitCode != 0 {
				return fmt.Errorf("container %s exited with status %d: %s", c.Name, t.ExitCode, oneLine(t.Message))
			}
		}
	}
	return nil
}

// WaitPodReady waits until a pod in ns matching the labels sel, and not
// being deleted, is Ready. On a timeout, or when fail (if not nil) reports
// an error for a pod, the error tells the pod's state and last events.
func WaitPodReady(ctx context.Context, cs kubernetes.Interface, ns string, sel map[string]string, timeout time.Duration, fail func(*corev1.Pod) error) error {
	selector := labels.SelectorFromSet(sel).String()
	var last *corev1.Pod
	err := PollWatch(ctx, timeout, cs.CoreV1().Pods(ns).Watch, metav1.ListOptions{LabelSelector: selector}, func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil {
				continue
			}
			last = p
			if PodReady(p) {
				return true, nil
			}
			if fail != nil {
				if err := fail(p); err != nil {
					return false, fmt.Errorf("pod %s: %w%s", p.Name, err, events(ctx, cs, p))
				}
			}
		}
		return false, nil
	}, "no Ready pod "+selector)
	if errors.Is(err, ErrTimedOut) && last != nil {
		err = fmt.Errorf("%w; pod %s: %s%s", err, last.Name, podState(last), events(ctx, cs, last))
	}
	return err
}

// WaitRollout waits until Deployment name runs its current template, and
// only that, in every replica, Ready. A crashing pod fails at once.
func WaitRollout(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	var d *appsv1.Deployment
	// Its status changes as its Pods do (the ReplicaSet's counts).
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	err := PollWatch(ctx, timeout, cs.AppsV1().Deployments(ns).Watch, byName, func() (bool, error) {
		var err error
		if d, err = cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		s, want := d.Status, *d.Spec.Replicas
		if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want {
			return true, nil
		}
		pods, err := deploymentPods(ctx, cs, d)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if err := Crashed(&p); err != nil {
				return false, fmt.Errorf("pod %s: %w%s", p.Name, err, events(ctx, cs, &p))
			}
		}
		return false, nil
	}, "Deployment "+name+" not rolled out")
	if errors.Is(err, ErrTimedOut) && d != nil {
		if pods, _ := deploymentPods(ctx, cs, d); len(pods) > 0 {
			p := &pods[len(pods)-1]
			err = fmt.Errorf("%w; pod %s: %s%s", err, p.Name, podState(p), events(ctx, cs, p))
		}
	}
	return err
}

// deploymentPods lists d's pods not being deleted, oldest first.
func deploymentPods(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	for i := 1; i < len(out); i++ { // few pods: insertion sort by creation
		for j := i; j > 0 && out[j].CreationTimestamp.Before(&out[j-1].CreationTimestamp); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// WaitHTTP waits until an anonymous GET /v2/ at host answers want: a new
// Service's NodePort reaches its pod only once kube-proxy has synced
// (seconds on a fresh node), and until then the node's image pulls fail
// into a back-off of minutes. what names the server in the error, which
// ends with the last answer.
func WaitHTTP(ctx context.Context, host string, want int, what string, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := "no answer"
	// A request that hangs ends with the wait, not 5 s later.
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A request to a port here: cheap, every 50 ms.
	err := PollEvery(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = "anonymous GET /v2/: " + resp.Status
		return resp.StatusCode == want, nil
	}, what+" at "+host+" does not answer")
	if err != nil {
		err = fmt.Errorf("%w (%s)", err, last)
	}
	return err
}

// podState summarises why a pod is not Ready.
func podState(p *corev1.Pod) string {
	parts := []string{string(p.Status.Phase)}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", c.Name, c.State.Waiting.Reason, oneLine(c.State.Waiting.Message)))
		case c.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s terminated: %d %s", c.Name, c.State.Terminated.ExitCode, oneLine(c.State.Terminated.Message)))
		}
	}
	return strings.Join(parts, ", ")
}

// events lists a pod's last few events, for error messages.
func events(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) string {
	list, err := cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.SelectorFromSet(fields.Set{"involvedObject.name": p.Name}).String(),
	})
	if err != nil || len(list.Items) == 0 {
		return ""
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
	if len(items) > 4 {
		items = items[len(items)-4:]
	}
	var msgs []string
	for _, e := range items {
		msgs = append(msgs, e.Reason+": "+oneLine(e.Message))
	}
	return "; events: " + strings.Join(msgs, " | ")
}

// oneLine folds a message's white space, newlines included, into single
// spaces, so that an error stays one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
