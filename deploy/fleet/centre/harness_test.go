package centre_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"oras.land/oras-go/v2/registry/remote/auth"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/centre"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/registry"
)

const ns = centre.DefaultNamespace

// world is a centre over a fake management cluster and a real registry,
// served over real TLS with the certificate EnsureCA made.
type world struct {
	t      testing.TB
	c      *centre.Centre
	kc     client.WithWatch
	host   string // the registry
	remote artifact.RemoteOptions
	url    string // the centre
	pin    string
	// hits counts the centre's requests by path; blobGets the registry's
	// blob GETs by path.
	hits     sync.Map
	blobGets sync.Map

	mu    sync.Mutex
	clock time.Time
	// rounds counts the rounds of syncs run.
	rounds int
}

func (w *world) now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clock
}

// tick moves the centre's clock.
func (w *world) tick(d time.Duration) {
	w.mu.Lock()
	w.clock = w.clock.Add(d)
	w.mu.Unlock()
}

func counter(m *sync.Map, key string) *atomic.Int64 {
	v, _ := m.LoadOrStore(key, new(atomic.Int64))
	return v.(*atomic.Int64)
}

func (w *world) hitsOf(path string) int64 { return counter(&w.hits, path).Load() }

func newWorld(t testing.TB, objs ...client.Object) *world {
	t.Helper()
	ctx := t.Context()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	w := &world{t: t, clock: time.Now().UTC().Truncate(time.Second)}
	w.kc = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.Member{}, &v1alpha1.MemberGroup{}, &v1alpha1.ReleaseTrack{}, &v1alpha1.Placement{}).Build()

	reg, err := registry.New(context.Background(), registry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			counter(&w.blobGets, r.URL.Path).Add(1)
		}
		reg.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() {
		rs.Close()
		_ = reg.Shutdown(context.Background())
	})
	w.host = rs.Listener.Addr().String()
	w.remote = artifact.RemoteOptions{Credential: auth.StaticCredential(w.host, auth.EmptyCredential)}

	w.c = &centre.Centre{Client: w.kc, Registry: w.host, Remote: w.remote, Spool: t.TempDir(), Now: w.now}
	caPEM, cert, err := w.c.EnsureCA(ctx, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if w.pin, err = wire.CAPin(caPEM); err != nil {
		t.Fatal(err)
	}
	h := w.c.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		counter(&w.hits, r.URL.Path).Add(1)
		h.ServeHTTP(rw, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// token makes a join token.
func (w *world) token(opts centre.TokenOptions) string {
	w.t.Helper()
	tok, err := w.c.CreateToken(w.t.Context(), opts)
	if err != nil {
		w.t.Fatal(err)
	}
	return tok.String()
}

// client is a member's client of the centre, pinning its CA.
func (w *world) client() *wire.Client {
	return &wire.Client{URL: w.url, Pin: w.pin}
}

// member is a simulated member: it speaks the real protocol through
// wire.Client and "runs" what it is given: Ready at once at the next
// report, but for the digest it refuses or never gets Ready at.
type member struct {
	w    *world
	name string
	cl   *wire.Client
	key  *wire.SiteKey

	mu      sync.Mutex
	running map[string]v1alpha1.MemberPackage
	refuse  string // a digest its keys do not verify
	stuck   string // a digest it never gets Ready at
	given   []string
	last    *wire.Desired
}

func (w *world) join(name, token string, labels map[string]string) *member {
	w.t.Helper()
	m, err := w.tryJoin(name, token, labels)
	if err != nil {
		w.t.Fatalf("join %s: %v", name, err)
	}
	return m
}

func (w *world) tryJoin(name, token string, labels map[string]string) (*member, error) {
	key, err := wire.NewSiteKey()
	if err != nil {
		return nil, err
	}
	pub, err := key.PublicPEM()
	if err != nil {
		return nil, err
	}
	cl := w.client()
	res, err := cl.Join(w.t.Context(), wire.JoinRequest{Token: token, Name: name, Labels: labels, PublicKey: string(pub), Agent: "test"})
	if err != nil {
		return nil, err
	}
	cl.Credential = res.Credential
	return &member{w: w, name: name, cl: cl, key: key, running: map[string]v1alpha1.MemberPackage{}}, nil
}

// report is what the member runs.
func (m *member) report() *wire.Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &wire.Report{Member: m.name, Created: m.w.now(), Agent: "test", Packages: []v1alpha1.MemberPackage{}}
	for _, p := range m.running {
		r.Packages = append(r.Packages, p)
	}
	return r
}

// sync reports, then applies what it is given.
func (m *member) sync(ctx context.Context) error {
	d, err := m.cl.Sync(ctx, m.report())
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = d
	want := map[string]bool{}
	for _, p := range d.Packages {
		want[p.Name] = true
		cur := m.running[p.Name]
		if cur.Digest == p.Digest || (cur.Refused && cur.Target == p.Digest) {
			continue
		}
		m.given = append(m.given, p.Digest)
		switch p.Digest {
		case m.refuse:
			cur.Name, cur.Placement, cur.Target, cur.Refused = p.Name, p.Placement, p.Digest, true
			cur.Reason, cur.Message = "VerificationFailed", "the signature is by none of the cluster's trusted keys"
		case m.stuck:
			cur = v1alpha1.MemberPackage{Name: p.Name, Placement: p.Placement, Digest: p.Digest, Target: p.Digest, Version: p.Version, Message: "waiting for Deployment app"}
		default:
			cur = v1alpha1.MemberPackage{Name: p.Name, Placement: p.Placement, Digest: p.Digest, Target: p.Digest, Version: p.Version, Ready: true}
		}
		m.running[p.Name] = cur
	}
	for n := range m.running {
		if !want[n] {
			delete(m.running, n)
		}
	}
	return nil
}

// runs is the digest the member runs of pkg.
func (m *member) runs(pkg string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running[pkg].Digest
}

func (m *member) wasGiven(d string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.given {
		if g == d {
			return true
		}
	}
	return false
}

// pkgFiles builds a package of version from files (name → content) and
// returns its archive.
func pkgBuild(t testing.TB, name, version string, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	def := "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: " + name + ", version: " + version + "}\ncomponents:\n  - name: app\n    manifests:\n      - name: ns\n        files: [ns.yaml]\n"
	files["ns.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  version: \"" + version + "\"\n")
	var extra []string
	for f := range files {
		if strings.HasSuffix(f, ".bin") {
			extra = append(extra, "      - {source: "+f+", target: /"+f+"}\n")
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		def += "    files:\n" + strings.Join(extra, "")
	}
	files[definition.FileName] = []byte(def)
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), name+"-"+version+".tar")
	if _, err := build.Create(t.Context(), d, build.CreateOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

// noise is n incompressible bytes.
func noise(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// push pushes a package archive to repo:tag of the world's registry and
// returns its reader.
func (w *world) push(archive, repoTag string) *artifact.Reader {
	w.t.Helper()
	r, err := artifact.Open(w.t.Context(), archive)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := artifact.Push(w.t.Context(), r, w.host+"/"+repoTag, artifact.PushOptions{Remote: w.remote}); err != nil {
		w.t.Fatal(err)
	}
	return r
}

// place creates a track of repository, a group of selector and a
// placement of the track's channel on the group with values.
func (w *world) place(name, repository, channel string, selector map[string]string, values string, strategy v1alpha1.Strategy) {
	w.t.Helper()
	ctx := w.t.Context()
	objs := []client.Object{
		&v1alpha1.ReleaseTrack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.ReleaseTrackSpec{Repository: repository}},
		&v1alpha1.MemberGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.MemberGroupSpec{Selector: metav1.LabelSelector{MatchLabels: selector}}},
	}
	p := &v1alpha1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.PlacementSpec{Track: name, Channel: channel, Targets: []v1alpha1.PlacementTarget{{Group: name}}, Strategy: strategy}}
	if values != "" {
		p.Spec.Targets[0].Values = &apiextensionsv1.JSON{Raw: []byte(values)}
	}
	for _, o := range append(objs, p) {
		if err := w.kc.Create(ctx, o); err != nil {
			w.t.Fatal(err)
		}
	}
}

func (w *world) placement(name string) *v1alpha1.Placement {
	w.t.Helper()
	var p v1alpha1.Placement
	if err := w.kc.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		w.t.Fatal(err)
	}
	return &p
}

func (w *world) member(name string) *v1alpha1.Member {
	w.t.Helper()
	var m v1alpha1.Member
	if err := w.kc.Get(w.t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &m); err != nil {
		w.t.Fatal(err)
	}
	return &m
}

func (w *world) reconcile() {
	w.t.Helper()
	if err := w.c.Reconcile(w.t.Context()); err != nil {
		w.t.Fatal(err)
	}
}

// post sends body to the centre's path with a bearer credential (if
// any) and returns the status and the problem's sentence.
func (w *world) post(path, credential string, body []byte) (int, string) {
	w.t.Helper()
	req, err := http.NewRequestWithContext(w.t.Context(), http.MethodPost, w.url+path, bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	if credential != "" {
		req.Header.Set("Authorization", "Bearer "+credential)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: wire.PinnedTLS(w.pin, nil)}}
	resp, err := hc.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var p wire.Problem
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Error
}
