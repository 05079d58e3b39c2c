package harness

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// WaitPodRunning waits until pod namespace/name is in phase Running with
// every container running, for at most DefaultTimeout when ctx has no
// deadline. On failure the error (one line) gives the pod's phase, its
// containers' states and its events.
func WaitPodRunning(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	return waitPod(ctx, client, namespace, name, "Running", func(p *corev1.Pod) bool {
		if p.Status.Phase != corev1.PodRunning {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return false
			}
		}
		return len(p.Status.ContainerStatuses) > 0
	})
}

// WaitPodReady waits until pod namespace/name has condition Ready, as
// WaitPodRunning does.
func WaitPodReady(ctx context.Context, client kubernetes.Interface, namespace, name string) (*corev1.Pod, error) {
	return waitPod(ctx, client, namespace, name, "Ready", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// hopeless are container waiting reasons that no wait can cure.
var hopeless = []string{"ErrImageNeverPull", "InvalidImageName"}

func waitPod(ctx context.Context, client kubernetes.Interface, namespace, name, want string, done func(*corev1.Pod) bool) (*corev1.Pod, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var pod *corev1.Pod
	err := poll(ctx, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		pod = p
		if done(p) {
			return true, nil
		}
		switch p.Status.Phase {
		case corev1.PodSucceeded, corev1.PodFailed:
			return false, fmt.Errorf("ended in phase %s", p.Status.Phase)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && slices.Contains(hopeless, w.Reason) {
				return false, fmt.Errorf("container %s: %s", cs.Name, w.Reason)
			}
		}
		return false, nil
	})
	if err == nil {
		return pod, nil
	}
	// The description needs a live context: ctx may be what ended.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultTimeout/8)
	defer dcancel()
	return pod, fmt.Errorf("pod %s/%s not %s: %w; %s", namespace, name, want, err, describePod(dctx, client, namespace, name, pod))
}

// describePod summarises a pod on one line: phase, container states, events.
func describePod(ctx context.Context, client kubernetes.Interface, namespace, name string, pod *corev1.Pod) string {
	var b strings.Builder
	if pod == nil {
		b.WriteString("pod not found")
	} else {
		fmt.Fprintf(&b, "phase %s", pod.Status.Phase)
		if pod.Status.Reason != "" {
			fmt.Fprintf(&b, " (%s: %s)", pod.Status.Reason, oneLine(pod.Status.Message))
		}
		statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
		for _, cs := range statuses {
			fmt.Fprintf(&b, "; container %s: %s", cs.Name, containerState(cs.State))
			if cs.RestartCount > 0 {
				fmt.Fprintf(&b, ", %d restarts, last %s", cs.RestartCount, containerState(cs.LastTerminationState))
			}
		}
	}
	b.WriteString("; events: ")
	b.WriteString(Events(ctx, client, namespace, "Pod", name))
	return b.String()
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return strings.TrimSuffix(fmt.Sprintf("waiting %s: %s", s.Waiting.Reason, oneLine(s.Waiting.Message)), ": ")
	case s.Terminated != nil:
		return strings.TrimSuffix(fmt.Sprintf("terminated %s (exit %d): %s", s.Terminated.Reason, s.Terminated.ExitCode, oneLine(s.Terminated.Message)), ": ")
	}
	return "no state"
}

// Events lists, on one line and oldest first, the events about one object
// (kind Pod, Node, …): "Reason: message (×count)" separated by " | ". It
// never fails: a listing error is returned as the text.
func Events(ctx context.Context, client kubernetes.Interface, namespace, kind, name string) string {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	list, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return fmt.Sprintf("(listing events: %v)", err)
	}
	if len(list.Items) == 0 {
		return "none"
	}
	items := list.Items
	slices.SortStableFunc(items, func(a, b corev1.Event) int {
		return eventTime(a).Compare(eventTime(b).Time)
	})
	var s []string
	for _, e := range items {
		line := e.Reason + ": " + oneLine(e.Message)
		if e.Count > 1 {
			line += fmt.Sprintf(" (×%d)", e.Count)
		}
		s = append(s, line)
	}
	return strings.Join(s, " | ")
}

func eventTime(e corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}

func runtimeCaller() (uintptr, string, int, bool) { return runtime.Caller(0) }
