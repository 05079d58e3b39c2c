package controller_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"oras.land/oras-go/v2/registry/remote/auth"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/controller"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/registry"
)

// ns is ferry's namespace in these tests.
const ns = "ferry"

// world is what every case shares: the registry, behind an account, with
// the package hello 1.0.0, signed, at packages/hello:1.0.0.
type world struct {
	host    string
	front   *front
	account cluster.Account
	remote  artifact.RemoteOptions
	root    digest.Digest
	// pub signed the package; other did not.
	pub, other []byte
}

// front stands before the registry: it counts requests and, while down,
// drops them unanswered (a registry Pod restarting).
type front struct {
	h    http.Handler
	down atomic.Bool
	hits atomic.Int64
}

func (f *front) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.hits.Add(1)
	if f.down.Load() {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	f.h.ServeHTTP(w, req)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ferry.yaml": "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: hello\n  version: 1.0.0\n" +
			"components:\n  - name: app\n    manifests:\n      - name: hello\n        files: [hello.yaml]\n",
		"hello.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hello\ndata:\n  greeting: hello\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pair, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	if err := pair.WriteFiles(priv, pub); err != nil {
		t.Fatal(err)
	}
	signer, err := key.LoadPrivate(priv, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	// Another key, public half only (a cosign.pub is a PKIX PEM block):
	// made directly, since key.Generate's scrypt costs a second or more.
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherDER, err := x509.MarshalPKIXPublicKey(&otherKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	other := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: otherDER})
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	created, err := build.Create(ctx, def, build.CreateOptions{Output: filepath.Join(dir, "hello.tar"), SignKey: signer})
	if err != nil {
		t.Fatal(err)
	}

	// The registry, with the account init would have made.
	account := cluster.Account{Username: "ferry", Password: "s3cret"}
	hash, err := bcrypt.GenerateFromPassword([]byte(account.Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	account.Htpasswd = []byte(account.Username + ":" + string(hash) + "\n")
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, account.Htpasswd, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := registry.New(context.Background(), registry.Config{HTPasswdFile: htpasswd})
	if err != nil {
		t.Fatal(err)
	}
	f := &front{h: srv}
	ts := httptest.NewServer(f)
	t.Cleanup(func() {
		ts.Close()
		_ = srv.Shutdown(context.Background())
	})
	w := &world{host: ts.Listener.Addr().String(), front: f, account: account, pub: pair.Public, other: other}

	r, err := artifact.Open(ctx, created.Path)
	if err != nil {
		t.Fatal(err)
	}
	w.remote = artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(w.host, auth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}
	if _, err := artifact.Push(ctx, r, w.host+"/packages/hello:1.0.0", artifact.PushOptions{Remote: w.remote}); err != nil {
		t.Fatal(err)
	}
	w.root = r.Root().Digest
	return w
}

// installer is the Installer of these tests: it records what it is asked
// and answers what the case sets.
type installer struct {
	installs   []installCall
	removes    []removeCall
	installErr error
	removeErr  error
	removed    *rollout.UninstallResult
	// onRemove, if set, runs inside each Uninstall.
	onRemove func(name string)
	// collects are the garbage collections asked for; they answer storage
	// or collectErr.
	collects   []rollout.UninstallOptions
	storage    rollout.Storage
	collectErr error
}

type installCall struct {
	name string
	root digest.Digest
	opts rollout.ApplyOptions
}

type removeCall struct {
	name string
	opts rollout.UninstallOptions
}

var _ controller.Installer = (*installer)(nil)

func (i *installer) Apply(_ context.Context, cfg *artifact.Config, root digest.Digest, opts rollout.ApplyOptions) (*rollout.Record, error) {
	i.installs = append(i.installs, installCall{cfg.Name, root, opts})
	if i.installErr != nil {
		return nil, i.installErr
	}
	return &rollout.Record{
		Name: cfg.Name, Version: cfg.Version, Root: root, Config: cfg,
		Releases: []rollout.Release{{Namespace: "apps", Name: "hello", Chart: "hello-1.0.0", Revision: 1}},
		Objects:  []rollout.Object{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "apps", Name: "hello"}},
	}, nil
}

func (i *installer) Uninstall(_ context.Context, name string, opts rollout.UninstallOptions) (*rollout.UninstallResult, error) {
	i.removes = append(i.removes, removeCall{name, opts})
	if i.onRemove != nil {
		i.onRemove(name)
	}
	if i.removeErr != nil {
		return nil, i.removeErr
	}
	return i.removed, nil
}

func (i *installer) CollectGarbage(_ context.Context, opts rollout.UninstallOptions) (rollout.Storage, error) {
	i.collects = append(i.collects, opts)
	return i.storage, i.collectErr
}

// harness is one case: a fake API server holding objs (Packages with their
// status subresource), a fake Clientset holding the registry's State and
// account, the world's registry, and an installer.
type harness struct {
	t    *testing.T
	w    *world
	c    client.Client
	r    *controller.Reconciler
	inst *installer
	rec  *events.FakeRecorder
	// written are the statuses the Reconciler wrote, in order.
	written []v1alpha1.PackageStatus
	// clock is the Reconciler's time.
	clock time.Time
}

func (w *world) harness(t *testing.T, objs ...client.Object) *harness {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, w: w, inst: &installer{}, rec: events.NewFakeRecorder(100)}
	objs = append(objs,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello-key"}, Data: map[string][]byte{"cosign.pub": w.pub}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-key"}, Data: map[string][]byte{"cosign.pub": w.other}},
	)
	h.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.Package{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if p, ok := obj.(*v1alpha1.Package); ok && sub == "status" {
					h.written = append(h.written, *p.Status.DeepCopy())
				}
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	cs := kubefake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.StateName},
			Data: cluster.State{Registry: cluster.RegistryHost(cluster.DefaultNodePort)}.Data()},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.AuthSecretName}, Data: w.account.Data()},
	)
	h.clock = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	h.r = &controller.Reconciler{Client: h.c, Clientset: cs, Namespace: ns, Registry: w.host, Recorder: h.rec, Installer: h.inst,
		Now: func() time.Time { return h.clock }}
	return h
}

// pkg is a Package of the world's package, by digest, signed by hello-key,
// as the API server would hold it (generation 1).
func (w *world) pkg(name string) *v1alpha1.Package {
	return &v1alpha1.Package{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, UID: types.UID("uid-" + name)},
		Spec: v1alpha1.PackageSpec{
			Repository: "packages/hello", Digest: w.root.String(),
			Keys: []v1alpha1.KeyReference{{Name: "hello-key"}},
		},
	}
}

func (h *harness) reconcile(name string) (ctrl.Result, error) {
	h.t.Helper()
	return h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
}

// settle reconciles and expects a settled outcome: no error, the next
// look at the resync.
func (h *harness) settle(name string) {
	h.t.Helper()
	res, err := h.reconcile(name)
	if err != nil || res.RequeueAfter != controller.DefaultResync {
		h.t.Fatalf("reconcile %s: %+v, %v; want settled (requeue after %s, no error)", name, res, err, controller.DefaultResync)
	}
}

// retried reconciles and expects an error (controller-runtime retries it
// with backoff), which it returns.
func (h *harness) retried(name string) error {
	h.t.Helper()
	_, err := h.reconcile(name)
	if err == nil {
		h.t.Fatalf("reconcile %s: no error; want one, to be retried", name)
	}
	return err
}

func (h *harness) get(name string) *v1alpha1.Package {
	h.t.Helper()
	var p v1alpha1.Package
	if err := h.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		h.t.Fatal(err)
	}
	return &p
}

// update changes an object as a user would (the fake client does not bump
// generations: a spec change sets it).
func (h *harness) update(obj client.Object, change func()) {
	h.t.Helper()
	if err := h.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		h.t.Fatal(err)
	}
	change()
	if err := h.c.Update(context.Background(), obj); err != nil {
		h.t.Fatal(err)
	}
}

// request sets the RequestAnnotation, as ferry deploy does.
func (h *harness) request(name, value string) {
	p := &v1alpha1.Package{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	h.update(p, func() { metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1alpha1.RequestAnnotation, value) })
}

// setKey puts the public key data in Secret name.
func (h *harness) setKey(name string, data []byte) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	h.update(s, func() { s.Data = map[string][]byte{"cosign.pub": data} })
}

// events drains the events recorded since the last call, as "Type Reason".
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			f := strings.Fields(e)
			out = append(out, f[0]+" "+f[1])
		default:
			return out
		}
	}
}

func (h *harness) wantEvents(want ...string) {
	h.t.Helper()
	if got := h.events(); !slices.Equal(got, want) {
		h.t.Fatalf("events %q, want %q", got, want)
	}
}

func (h *harness) wantInstalls(n int) {
	h.t.Helper()
	if len(h.inst.installs) != n {
		h.t.Fatalf("%d installs, want %d", len(h.inst.installs), n)
	}
}

// conditions are a Package's conditions as type → "Status/Reason".
func conditions(p *v1alpha1.Package) map[string]string {
	out := map[string]string{}
	for _, c := range p.Status.Conditions {
		out[c.Type] = string(c.Status) + "/" + c.Reason
	}
	return out
}

func (h *harness) wantConditions(name string, want map[string]string) *v1alpha1.Package {
	h.t.Helper()
	p := h.get(name)
	if got := conditions(p); !maps.Equal(got, want) {
		h.t.Fatalf("conditions %v, want %v (lastError %q)", got, want, p.Status.LastError)
	}
	return p
}

// readyReasons are the Ready condition's reasons in the statuses written
// from the i-th on.
func (h *harness) readyReasons(i int) []string {
	var out []string
	for _, st := range h.written[i:] {
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.Ready)
		if c == nil {
			out = append(out, "")
			continue
		}
		out = append(out, c.Reason)
	}
	return out
}

// port is the registry's port.
func (w *world) port(t *testing.T) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(w.host)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}
