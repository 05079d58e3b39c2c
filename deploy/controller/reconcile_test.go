package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"oras.land/oras-go/v2/errdef"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact/chartrender"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/controller"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

// The state machine of the Reconciler, driven one Reconcile at a time:
// controller-runtime's fake client holds the Packages, client-go's fake
// Clientset the registry's State and account Secrets, and the registry is
// ferry's own, in process, holding a signed package. Only the installer is
// a stand-in (Helm needs a cluster): it records what it is asked. The
// harness is in harness_test.go.

// ready and refused are the conditions of a Package installed, and of one
// whose signature was refused.
var (
	ready = map[string]string{
		v1alpha1.Verified:  "True/" + v1alpha1.ReasonVerified,
		v1alpha1.Installed: "True/" + v1alpha1.ReasonInstalled,
		v1alpha1.Ready:     "True/" + v1alpha1.ReasonInstalled,
	}
	refused = map[string]string{
		v1alpha1.Verified: "False/" + v1alpha1.ReasonVerifyFailed,
		v1alpha1.Ready:    "False/" + v1alpha1.ReasonVerifyFailed,
	}
)

// errInstall and errRemove are failures of the installer that retrying
// does not mend (a chart's workload never ready, an uninstall refused).
var (
	errInstall = errors.New("chart hello: workload never ready")
	errRemove  = errors.New("uninstall hello: refused")
)

// refusedConn is what a registry Pod restarting looks like to a client.
func refusedConn() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func TestReconcile(t *testing.T) {
	w := newWorld(t)

	t.Run("installs, and on resync installs again without verifying again", func(t *testing.T) {
		// Through the registry's Service, as in a cluster.
		port := w.port(t)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.RegistryName},
			Spec:       corev1.ServiceSpec{ClusterIP: "127.0.0.1", Ports: []corev1.ServicePort{{Port: port}}},
		}
		p := w.pkg("hello")
		p.Spec.Components = []string{"app"}
		p.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
		p.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(`{"replicas": 2}`)}
		h := w.harness(t, p, svc)
		h.r.Registry = ""

		// First reconcile: the finalizer, then verify and install in one go.
		h.settle("hello")
		got := h.wantConditions("hello", ready)
		if !slices.Contains(got.Finalizers, v1alpha1.Finalizer) {
			t.Fatalf("finalizers %v", got.Finalizers)
		}
		st := got.Status
		if st.Digest != w.root.String() || st.ShortDigest != w.root.Encoded()[:12] || st.Version != "1.0.0" || st.Tag != "" ||
			st.ObservedGeneration != 1 || st.LastError != "" || st.VerifiedFor == "" ||
			!slices.Equal(st.SignedBy, []string{"Secret/hello-key/cosign.pub"}) ||
			!slices.Equal(st.Releases, []v1alpha1.ReleaseStatus{{Namespace: "apps", Name: "hello", Chart: "hello-1.0.0", Revision: 1}}) ||
			!slices.Equal(st.Objects, []v1alpha1.ObjectStatus{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "apps", Name: "hello"}}) {
			t.Fatalf("status %+v", st)
		}
		if r := h.readyReasons(0); !slices.Equal(r, []string{"Verifying", v1alpha1.ReasonProgressing, v1alpha1.ReasonInstalled}) {
			t.Fatalf("Ready reasons written %q", r)
		}
		h.wantEvents("Normal "+v1alpha1.ReasonVerified, "Normal "+v1alpha1.ReasonInstalled)
		h.wantInstalls(1)
		in := h.inst.installs[0]
		host := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
		if in.name != "hello" || in.root != w.root || in.opts.Namespace != ns || in.opts.Registry != host ||
			in.opts.Timeout != 2*time.Minute || !slices.Equal(in.opts.Components, []string{"app"}) ||
			in.opts.Values["replicas"] != float64(2) {
			t.Fatalf("install %+v", in)
		}

		if st.InstalledFor == "" || st.InstalledAt == nil || !st.InstalledAt.Time.Equal(h.clock) {
			t.Fatalf("installed for %q at %v", st.InstalledFor, st.InstalledAt)
		}

		// Resync, unchanged: not verified again, not installed again,
		// nothing read from the registry, nothing written, no event.
		written := len(h.written)
		hits := w.front.hits.Load()
		h.clock = h.clock.Add(controller.DefaultDriftCheck - time.Second)
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(1)
		h.wantEvents()
		if len(h.written) != written {
			t.Fatalf("resync wrote %d statuses", len(h.written)-written)
		}
		if n := w.front.hits.Load() - hits; n != 0 {
			t.Fatalf("an unchanged resync made %d registry requests", n)
		}

		// The drift interval passed: installed again (Install puts back
		// what was changed or deleted behind its back), still not verified
		// again, and no event (nothing was asked).
		h.clock = h.clock.Add(2 * time.Second)
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(2)
		h.wantEvents()
		if got := h.get("hello").Status.InstalledAt; got == nil || !got.Time.Equal(h.clock) {
			t.Fatalf("installed at %v, want %v", got, h.clock)
		}
		written = len(h.written)

		// Asked again (ferry deploy's RequestAnnotation): installed again
		// and said so, still not verified again (root and keys unchanged).
		h.request("hello", "1")
		h.settle("hello")
		if got := h.wantConditions("hello", ready); got.Status.Request != "1" {
			t.Fatalf("request %q", got.Status.Request)
		}
		h.wantInstalls(3)
		h.wantEvents("Normal " + v1alpha1.ReasonInstalled)
		if r := h.readyReasons(written); !slices.Equal(r, []string{v1alpha1.ReasonProgressing, v1alpha1.ReasonInstalled}) {
			t.Fatalf("Ready reasons written %q", r)
		}

		// The key replaced by one that did not sign: verified again and
		// refused; what is installed stays, Ready says it keeps running.
		h.setKey("hello-key", w.other)
		h.settle("hello")
		got = h.wantConditions("hello", map[string]string{
			v1alpha1.Verified:  "False/" + v1alpha1.ReasonVerifyFailed,
			v1alpha1.Installed: "True/" + v1alpha1.ReasonInstalled,
			v1alpha1.Ready:     "False/" + v1alpha1.ReasonVerifyFailed,
		})
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.Ready); !strings.Contains(c.Message, "version 1.0.0") {
			t.Fatalf("Ready: %q", c.Message)
		}
		h.wantInstalls(3)
		h.wantEvents("Warning " + v1alpha1.ReasonVerifyFailed)
	})

	t.Run("what an unchanged resync notices: values and keys changed behind the spec", func(t *testing.T) {
		p := w.pkg("hello")
		p.Spec.Charts = []v1alpha1.ChartValues{{Name: "hello", ValuesFrom: []v1alpha1.KeyReference{{Kind: "ConfigMap", Name: "hello-values"}}}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello-values"}, Data: map[string]string{"values.yaml": "replicas: 1\n"}}
		h := w.harness(t, p, cm)
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(1)

		// The values file changes (the spec does not): installed again
		// with it, not verified again.
		h.update(cm, func() { cm.Data["values.yaml"] = "replicas: 3\n" })
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(2)
		if got := h.inst.installs[1].opts.ChartValues["hello"]["replicas"]; got != float64(3) {
			t.Fatalf("installed with replicas %v", got)
		}
		h.wantEvents("Normal "+v1alpha1.ReasonVerified, "Normal "+v1alpha1.ReasonInstalled)

		// The key Secret now holds another key: verified again, refused.
		h.setKey("hello-key", w.other)
		h.settle("hello")
		h.wantConditions("hello", map[string]string{
			v1alpha1.Verified:  "False/" + v1alpha1.ReasonVerifyFailed,
			v1alpha1.Installed: "True/" + v1alpha1.ReasonInstalled,
			v1alpha1.Ready:     "False/" + v1alpha1.ReasonVerifyFailed,
		})
		h.wantInstalls(2)
	})

	t.Run("refused: not checked again until asked", func(t *testing.T) {
		p := w.pkg("hello")
		p.Spec.Keys[0].Name = "other-key"
		h := w.harness(t, p)

		h.settle("hello")
		got := h.wantConditions("hello", refused)
		if got.Status.LastError == "" || got.Status.Digest != "" || got.Status.VerifiedFor == "" {
			t.Fatalf("status %+v", got.Status)
		}
		h.wantEvents("Warning " + v1alpha1.ReasonVerifyFailed)
		h.wantInstalls(0)

		// Resync: the registry is not even asked.
		w.front.hits.Store(0)
		h.settle("hello")
		got = h.wantConditions("hello", refused)
		if n := w.front.hits.Load(); n != 0 {
			t.Fatalf("resync of a refused package: %d registry requests", n)
		}
		h.wantEvents()
		h.wantInstalls(0)
		// Today the settled no-op clears lastError though the refusal
		// stands (its conditions say why).
		if got.Status.LastError != "" {
			t.Fatalf("lastError %q", got.Status.LastError)
		}

		// Asked again: verified again, refused again.
		h.request("hello", "again")
		h.settle("hello")
		h.wantConditions("hello", refused)
		if w.front.hits.Load() == 0 {
			t.Fatal("asked again: the registry was not asked")
		}
		h.wantEvents("Warning " + v1alpha1.ReasonVerifyFailed)

		// A generation change asks again too.
		w.front.hits.Store(0)
		h.settle("hello")
		if n := w.front.hits.Load(); n != 0 {
			t.Fatalf("resync: %d registry requests", n)
		}
		h.update(p, func() { p.Spec.Components = []string{"app"}; p.Generation = 2 })
		h.settle("hello")
		if got := h.wantConditions("hello", refused); got.Status.ObservedGeneration != 2 || w.front.hits.Load() == 0 {
			t.Fatalf("generation 2: observed %d, %d registry requests", got.Status.ObservedGeneration, w.front.hits.Load())
		}
		h.wantEvents("Warning " + v1alpha1.ReasonVerifyFailed)
		h.wantInstalls(0)

		// The right key in its Secret: the keys changed, verified and
		// installed without being asked.
		h.setKey("other-key", w.pub)
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(1)
	})

	t.Run("install failed: settled until asked", func(t *testing.T) {
		h := w.harness(t, w.pkg("hello"))
		h.inst.installErr = fmt.Errorf("install: %w", errInstall)
		failed := map[string]string{
			v1alpha1.Verified:  "True/" + v1alpha1.ReasonVerified,
			v1alpha1.Installed: "False/" + v1alpha1.ReasonInstallFailed,
			v1alpha1.Ready:     "False/" + v1alpha1.ReasonInstallFailed,
		}
		h.settle("hello")
		got := h.wantConditions("hello", failed)
		if got.Status.Digest != w.root.String() || got.Status.Version != "1.0.0" || got.Status.LastError == "" {
			t.Fatalf("status %+v", got.Status)
		}
		h.wantEvents("Normal "+v1alpha1.ReasonVerified, "Warning "+v1alpha1.ReasonInstallFailed)
		h.wantInstalls(1)

		// Resync: not tried again.
		h.settle("hello")
		h.wantConditions("hello", failed)
		h.wantInstalls(1)
		h.wantEvents()

		// Asked again, and it works this time.
		h.inst.installErr = nil
		h.request("hello", "retry")
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(2)
	})

	t.Run("chart past its render limits: the reason on the status", func(t *testing.T) {
		h := w.harness(t, w.pkg("hello"))
		bounded := &chartrender.Limited{}
		h.r.Render = bounded
		h.inst.installErr = fmt.Errorf("component app: release apps/hello (chart hello-1.0.0): render: %w",
			&chartrender.LimitError{Resource: "memory", Limit: "512 MiB of memory"})
		h.settle("hello")
		got := h.wantConditions("hello", map[string]string{
			v1alpha1.Verified:  "True/" + v1alpha1.ReasonVerified,
			v1alpha1.Installed: "False/" + v1alpha1.ReasonInstallFailed,
			v1alpha1.Ready:     "False/" + v1alpha1.ReasonInstallFailed,
		})
		if want := "release apps/hello (chart hello-1.0.0): render: passed its limit of 512 MiB of memory"; !strings.Contains(got.Status.LastError, want) || strings.Contains(got.Status.LastError, "\n") {
			t.Errorf("lastError %q, want one line with %q", got.Status.LastError, want)
		}
		if len(h.inst.installs) != 1 || h.inst.installs[0].opts.Render != bounded {
			t.Errorf("the install was not given the Reconciler's renderer")
		}
	})

	t.Run("install cut off from the registry: retried", func(t *testing.T) {
		h := w.harness(t, w.pkg("hello"))
		h.inst.installErr = fmt.Errorf("push images: %w", refusedConn())
		err := h.retried("hello")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("error %v", err)
		}
		// Ready stays at what progress last said.
		h.wantConditions("hello", map[string]string{
			v1alpha1.Verified:  "True/" + v1alpha1.ReasonVerified,
			v1alpha1.Installed: "Unknown/" + v1alpha1.ReasonRegistryUnreachable,
			v1alpha1.Ready:     "False/" + v1alpha1.ReasonProgressing,
		})
		h.wantEvents("Normal "+v1alpha1.ReasonVerified, "Warning "+v1alpha1.ReasonRegistryUnreachable)

		// The retry (same spec, not asked) installs.
		h.inst.installErr = nil
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(2)
	})

	t.Run("registry unreachable: retried", func(t *testing.T) {
		h := w.harness(t, w.pkg("hello"))
		w.front.down.Store(true)
		t.Cleanup(func() { w.front.down.Store(false) })
		err := h.retried("hello")
		// The connection dropped unanswered: io.EOF, not retried by the
		// registry client, so the Reconciler sees it at once.
		if !reach.Transient(err) || !errors.Is(err, io.EOF) {
			t.Fatalf("error %v: not a dropped connection", err)
		}
		h.wantConditions("hello", map[string]string{
			v1alpha1.Verified: "Unknown/" + v1alpha1.ReasonRegistryUnreachable,
			v1alpha1.Ready:    "False/Verifying",
		})
		h.wantInstalls(0)

		w.front.down.Store(false)
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(1)
	})

	t.Run("tag resolved once", func(t *testing.T) {
		ctx := context.Background()
		repo, err := w.remote.Repository(w.host + "/packages/hello")
		if err != nil {
			t.Fatal(err)
		}
		desc, err := repo.Resolve(ctx, "1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Tag(ctx, desc, "moving"); err != nil {
			t.Fatal(err)
		}
		p := w.pkg("hello")
		p.Spec.Digest, p.Spec.Tag = "", "moving"
		h := w.harness(t, p)
		h.settle("hello")
		if got := h.wantConditions("hello", ready); got.Status.Digest != w.root.String() || got.Status.Tag != "moving" {
			t.Fatalf("status digest %s tag %s", got.Status.Digest, got.Status.Tag)
		}

		// The tag moves to something else: neither a resync nor a request
		// follows it.
		img, err := fixture.PushImage(ctx, repo, fixture.Platform("linux", "amd64", ""), []fixture.Layer{fixture.NewLayer(fixture.Rand(1), 64)})
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Tag(ctx, img, "moving"); err != nil {
			t.Fatal(err)
		}
		// (The resync installs nothing; the request installs the same root.)
		h.settle("hello")
		h.request("hello", "1")
		h.settle("hello")
		h.wantConditions("hello", ready)
		h.wantInstalls(2)
		for _, in := range h.inst.installs {
			if in.root != w.root {
				t.Fatalf("installed %s, want %s", in.root, w.root)
			}
		}
	})

	// What the first reconcile of a Package makes of it.
	for _, tc := range []struct {
		name  string
		pkg   func(*v1alpha1.Package)
		setup func(*harness)
		// err, if set, checks the error of a retried reconcile; nil means
		// settled.
		err      func(error) bool
		want     map[string]string
		installs int
	}{
		{
			name: "by tag", pkg: func(p *v1alpha1.Package) { p.Spec.Digest, p.Spec.Tag = "", "1.0.0" },
			want: ready, installs: 1,
		},
		{
			name: "signature verification skipped",
			pkg:  func(p *v1alpha1.Package) { p.Spec.Keys, p.Spec.InsecureSkipSignatureVerification = nil, true },
			want: map[string]string{
				v1alpha1.Verified:  "True/" + v1alpha1.ReasonSkipped,
				v1alpha1.Installed: "True/" + v1alpha1.ReasonInstalled,
				v1alpha1.Ready:     "True/" + v1alpha1.ReasonInstalled,
			},
			installs: 1,
		},
		{
			name: "name mismatch", pkg: func(p *v1alpha1.Package) { p.Name = "goodbye" },
			want: map[string]string{
				v1alpha1.Verified:  "True/" + v1alpha1.ReasonVerified,
				v1alpha1.Installed: "False/" + v1alpha1.ReasonNameMismatch,
				v1alpha1.Ready:     "False/" + v1alpha1.ReasonNameMismatch,
			},
		},
		{
			name: "no such tag: retried, it may be pushed later",
			pkg:  func(p *v1alpha1.Package) { p.Spec.Digest, p.Spec.Tag = "", "2.0.0" },
			err:  func(err error) bool { return errors.Is(err, errdef.ErrNotFound) },
			want: map[string]string{
				v1alpha1.Verified: "False/" + v1alpha1.ReasonNotFound,
				v1alpha1.Ready:    "False/" + v1alpha1.ReasonNotFound,
			},
		},
		{
			name: "no such digest",
			pkg:  func(p *v1alpha1.Package) { p.Spec.Digest = digest.FromString("nothing").String() },
			want: map[string]string{
				v1alpha1.Verified: "False/" + v1alpha1.ReasonNotFound,
				v1alpha1.Ready:    "False/" + v1alpha1.ReasonNotFound,
			},
		},
		{
			name: "key Secret missing", pkg: func(p *v1alpha1.Package) { p.Spec.Keys[0].Name = "missing" },
			want: map[string]string{
				v1alpha1.Verified: "False/" + v1alpha1.ReasonKeyNotFound,
				v1alpha1.Ready:    "False/" + v1alpha1.ReasonKeyNotFound,
			},
		},
		{
			name:  "no registry account",
			setup: func(h *harness) { h.r.Clientset = kubefake.NewClientset() },
			err:   apierrors.IsNotFound,
			want:  map[string]string{v1alpha1.Verified: "Unknown/" + v1alpha1.ReasonRegistryUnreachable},
		},
		{
			name:  "no registry Service",
			setup: func(h *harness) { h.r.Registry = "" },
			err:   apierrors.IsNotFound,
			want:  map[string]string{v1alpha1.Verified: "Unknown/" + v1alpha1.ReasonRegistryUnreachable},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := w.pkg("hello")
			if tc.pkg != nil {
				tc.pkg(p)
			}
			h := w.harness(t, p)
			if tc.setup != nil {
				tc.setup(h)
			}
			if tc.err == nil {
				h.settle(p.Name)
			} else if err := h.retried(p.Name); !tc.err(err) {
				t.Fatalf("error %v", err)
			}
			got := h.wantConditions(p.Name, tc.want)
			if !slices.Contains(got.Finalizers, v1alpha1.Finalizer) {
				t.Fatalf("finalizers %v", got.Finalizers)
			}
			h.wantInstalls(tc.installs)
		})
	}

	t.Run("another namespace: left alone", func(t *testing.T) {
		p := w.pkg("hello")
		p.Namespace = "default"
		h := w.harness(t, p)
		res, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "hello"}})
		if err != nil || res != (ctrl.Result{}) {
			t.Fatalf("%+v, %v", res, err)
		}
		var got v1alpha1.Package
		if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(p), &got); err != nil || len(got.Finalizers) != 0 || len(got.Status.Conditions) != 0 {
			t.Fatalf("%+v: %v", got, err)
		}
	})

	t.Run("gone: nothing to do", func(t *testing.T) {
		h := w.harness(t)
		res, err := h.reconcile("hello")
		if err != nil || res != (ctrl.Result{}) {
			t.Fatalf("%+v, %v", res, err)
		}
	})

	t.Run("deletion", func(t *testing.T) { deletion(t, w) })
}

// deletion drives the removal of a Package.
func deletion(t *testing.T, w *world) {
	finalized := func() *v1alpha1.Package {
		p := w.pkg("hello")
		p.Finalizers = []string{v1alpha1.Finalizer}
		return p
	}
	// deleted deletes the Package; its finalizer keeps it, marked.
	deleted := func(h *harness) {
		h.t.Helper()
		if err := h.c.Delete(context.Background(), h.get("hello")); err != nil {
			h.t.Fatal(err)
		}
		if h.get("hello").DeletionTimestamp.IsZero() {
			h.t.Fatal("no deletion timestamp")
		}
	}
	gone := func(h *harness) {
		h.t.Helper()
		var p v1alpha1.Package
		if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "hello"}, &p); !apierrors.IsNotFound(err) {
			h.t.Fatalf("Package still there (finalizers %v): %v", p.Finalizers, err)
		}
	}
	// removal is the last status written.
	removal := func(h *harness) *v1alpha1.RemovalStatus {
		h.t.Helper()
		last := h.written[len(h.written)-1]
		if c := meta.FindStatusCondition(last.Conditions, v1alpha1.Ready); c == nil || c.Reason != v1alpha1.ReasonDeleting {
			h.t.Fatalf("Ready %+v", c)
		}
		if last.Removal == nil {
			h.t.Fatal("no removal status")
		}
		return last.Removal
	}

	// collected advances the clock past the quiet time and reconciles
	// again: the collection runs, the Package goes.
	collected := func(h *harness, name string) {
		h.t.Helper()
		h.clock = h.clock.Add(controller.DefaultGCQuiet)
		if res, err := h.reconcile(name); err != nil || res != (ctrl.Result{}) {
			h.t.Fatalf("%+v, %v", res, err)
		}
	}
	// waits reconciles and expects to wait for the collection.
	waits := func(h *harness, name string) {
		h.t.Helper()
		if res, err := h.reconcile(name); err != nil || res != (ctrl.Result{RequeueAfter: controller.DefaultGCQuiet}) {
			h.t.Fatalf("%+v, %v; want to wait for the garbage collection", res, err)
		}
	}

	t.Run("removes, reports, lets go", func(t *testing.T) {
		h := w.harness(t, w.pkg("hello"))
		h.settle("hello")
		h.events()
		h.inst.removed = &rollout.UninstallResult{
			Name: "hello", Version: "1.0.0",
			Releases: []rollout.Release{{Namespace: "apps", Name: "hello", Chart: "hello-1.0.0", Revision: 1}},
			Objects:  []rollout.Object{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "apps", Name: "hello"}},
			Images:   []string{"library/web@" + digest.FromString("web").String()},
			Kept:     []string{"library/base@" + digest.FromString("base").String()},
			// What TestZarfDeploy found missing from `ferry remove`'s report.
			Repositories: []string{"git/fleet@" + digest.FromString("fleet").String()},
			PullSecrets:  []string{"apps"},
			CRDs:         []string{"widgets.example.com"},
			KeptCRDs:     []string{"gadgets.example.com: 2 custom resources left"},
		}
		h.inst.storage = rollout.Storage{Before: 4096, After: 1024}
		deleted(h)
		waits(h, "hello")
		if len(h.inst.removes) != 1 {
			t.Fatalf("%d removes", len(h.inst.removes))
		}
		if rm := h.inst.removes[0]; rm.name != "hello" || rm.opts.Namespace != ns || rm.opts.Registry != w.host || !rm.opts.DeferGC {
			t.Fatalf("remove %+v", rm)
		}
		if len(h.inst.collects) != 0 {
			t.Fatal("collected before the quiet time")
		}
		waits(h, "hello") // still quiet: nothing removed again
		collected(h, "hello")
		if len(h.inst.removes) != 1 || len(h.inst.collects) != 1 || h.inst.collects[0].Registry != w.host {
			t.Fatalf("%d removes, collects %+v", len(h.inst.removes), h.inst.collects)
		}
		want := v1alpha1.RemovalStatus{
			Version:  "1.0.0",
			Releases: []v1alpha1.ReleaseStatus{{Namespace: "apps", Name: "hello", Chart: "hello-1.0.0", Revision: 1}},
			Objects:  []v1alpha1.ObjectStatus{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "apps", Name: "hello"}},
			Images:   h.inst.removed.Images,
			Kept:     h.inst.removed.Kept,
			CRDs:     h.inst.removed.CRDs, KeptCRDs: h.inst.removed.KeptCRDs,
			Repositories: h.inst.removed.Repositories, PullSecrets: h.inst.removed.PullSecrets,
			StorageBefore: 4096, StorageAfter: 1024,
		}
		if got := removal(h); !equalRemoval(*got, want) {
			t.Fatalf("removal %+v, want %+v", *got, want)
		}
		gone(h)
		h.wantEvents("Normal Removed", "Normal GarbageCollected")
	})

	t.Run("a batch of removals: one garbage collection", func(t *testing.T) {
		const n = 20
		var objs []client.Object
		for i := range n {
			p := w.pkg(fmt.Sprintf("p%02d", i))
			p.Finalizers = []string{v1alpha1.Finalizer}
			objs = append(objs, p)
		}
		h := w.harness(t, objs...)
		h.inst.removed = &rollout.UninstallResult{Name: "hello", Version: "1.0.0"}
		h.inst.storage = rollout.Storage{Before: 9000, After: 100}
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			if err := h.c.Delete(context.Background(), h.get(name)); err != nil {
				t.Fatal(err)
			}
		}
		// While a removal runs, the one before it waits: no collection
		// starts under a removal, however long it takes.
		h.inst.onRemove = func(name string) {
			if name == "p01" {
				h.clock = h.clock.Add(time.Minute / 4)
				waits(h, "p00")
			}
		}
		for i := range n {
			waits(h, fmt.Sprintf("p%02d", i))
		}
		h.inst.onRemove = nil
		if len(h.inst.removes) != n || len(h.inst.collects) != 0 {
			t.Fatalf("%d removes, %d collects", len(h.inst.removes), len(h.inst.collects))
		}
		h.clock = h.clock.Add(controller.DefaultGCQuiet)
		for i := range n {
			name := fmt.Sprintf("p%02d", i)
			if res, err := h.reconcile(name); err != nil || res != (ctrl.Result{}) {
				t.Fatalf("%s: %+v, %v", name, res, err)
			}
			var p v1alpha1.Package
			if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); !apierrors.IsNotFound(err) {
				t.Fatalf("%s still there: %v", name, err)
			}
		}
		if len(h.inst.collects) != 1 {
			t.Fatalf("%d garbage collections for %d removals, want 1", len(h.inst.collects), n)
		}
		for _, st := range h.written[len(h.written)-n:] {
			if st.Removal == nil || st.Removal.StorageBefore != 9000 || st.Removal.StorageAfter != 100 {
				t.Fatalf("removal status %+v", st.Removal)
			}
		}
	})

	t.Run("collection failed: retried, kept until it works", func(t *testing.T) {
		h := w.harness(t, finalized())
		h.inst.removed = &rollout.UninstallResult{Name: "hello", Version: "1.0.0", Images: []string{"library/web@" + digest.FromString("web").String()}}
		h.inst.collectErr = errRemove
		deleted(h)
		waits(h, "hello")
		h.clock = h.clock.Add(controller.DefaultGCQuiet)
		if err := h.retried("hello"); !errors.Is(err, errRemove) {
			t.Fatalf("error %v", err)
		}
		got := h.get("hello")
		if !slices.Contains(got.Finalizers, v1alpha1.Finalizer) || !strings.Contains(got.Status.LastError, "registry garbage collection") {
			t.Fatalf("finalizers %v, status %+v", got.Finalizers, got.Status)
		}
		h.wantEvents("Normal Removed", "Warning RemoveFailed")
		// Asked again: removed already (no record), what the status said
		// stays, and the collection runs again.
		h.inst.collectErr, h.inst.removeErr = nil, fmt.Errorf("package hello: %w", rollout.ErrNotDeployed)
		waits(h, "hello")
		collected(h, "hello")
		if got := removal(h); len(got.Images) != 1 {
			t.Fatalf("removal %+v", *got)
		}
		gone(h)
		if len(h.inst.collects) != 2 {
			t.Fatalf("%d collects", len(h.inst.collects))
		}
	})

	t.Run("not deployed: an empty removal, lets go", func(t *testing.T) {
		h := w.harness(t, finalized())
		h.inst.removeErr = fmt.Errorf("package hello: %w", rollout.ErrNotDeployed)
		deleted(h)
		waits(h, "hello")
		collected(h, "hello")
		if got := removal(h); !equalRemoval(*got, v1alpha1.RemovalStatus{}) {
			t.Fatalf("removal %+v", *got)
		}
		gone(h)
		h.wantEvents("Normal GarbageCollected")
	})

	t.Run("remove failed: retried, kept until it works", func(t *testing.T) {
		h := w.harness(t, finalized())
		h.inst.removeErr = fmt.Errorf("remove: %w", errRemove)
		deleted(h)
		if err := h.retried("hello"); !errors.Is(err, errRemove) {
			t.Fatalf("error %v", err)
		}
		got := h.get("hello")
		if !slices.Contains(got.Finalizers, v1alpha1.Finalizer) || got.Status.LastError == "" || got.Status.Removal != nil {
			t.Fatalf("finalizers %v, status %+v", got.Finalizers, got.Status)
		}
		h.wantEvents("Warning RemoveFailed")

		h.inst.removeErr, h.inst.removed = nil, &rollout.UninstallResult{Name: "hello", Version: "1.0.0"}
		waits(h, "hello")
		collected(h, "hello")
		if got := removal(h); got.Version != "1.0.0" {
			t.Fatalf("removal %+v", *got)
		}
		gone(h)
		if len(h.inst.removes) != 2 {
			t.Fatalf("%d removes", len(h.inst.removes))
		}
	})

	t.Run("namespace being deleted: lets go, removes nothing", func(t *testing.T) {
		now := metav1.Now()
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, DeletionTimestamp: &now, Finalizers: []string{"ferry.test/hold"}}}
		h := w.harness(t, finalized(), nsObj)
		deleted(h)
		if _, err := h.reconcile("hello"); err != nil {
			t.Fatal(err)
		}
		if len(h.inst.removes) != 0 {
			t.Fatalf("%d removes", len(h.inst.removes))
		}
		gone(h)
		h.wantEvents("Warning NamespaceDeleted")
	})
}

func equalRemoval(a, b v1alpha1.RemovalStatus) bool {
	return a.Version == b.Version && slices.Equal(a.Releases, b.Releases) && slices.Equal(a.Objects, b.Objects) &&
		slices.Equal(a.Images, b.Images) && slices.Equal(a.Kept, b.Kept) && slices.Equal(a.CRDs, b.CRDs) && slices.Equal(a.KeptCRDs, b.KeptCRDs) &&
		slices.Equal(a.Repositories, b.Repositories) && slices.Equal(a.PullSecrets, b.PullSecrets) &&
		a.StorageBefore == b.StorageBefore && a.StorageAfter == b.StorageAfter
}
