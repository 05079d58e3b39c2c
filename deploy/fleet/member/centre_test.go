package member

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/deploy"
	pkgapi "github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

const ns = cluster.DefaultNamespace

// centre stands in for the fleet's centre: an HTTPS server whose
// certificate a CA of its own signs, speaking the wire protocol — join
// with its one token, sync answering a settable desired state, bundle
// answering the delta (artifact.Delta) of the package asked for against
// the receipt sent. Hostile answers are set with syncRaw and bundleFn.
type centre struct {
	t     *testing.T
	srv   *httptest.Server
	caPEM []byte
	token wire.Token

	mu sync.Mutex
	// requests counts every HTTP request the handler saw.
	requests, joins, syncs, bundles int
	joined                          wire.JoinRequest
	credential                      string
	reports                         []wire.Report
	desired                         wire.Desired
	syncRaw                         []byte
	// packages are the package files by root digest.
	packages map[string]string
	// bundleFn, if set, answers bundle requests.
	bundleFn func(w http.ResponseWriter, req wire.BundleRequest)
	// front, if set, sees each request first: true if it answered it.
	front       func(w http.ResponseWriter, r *http.Request) bool
	bundleSizes []int64
	deltas      []*artifact.DeltaResult
}

func newCentre(t *testing.T) *centre {
	t.Helper()
	ca, caKey := newCert(t, nil, nil)
	leaf, leafKey := newCert(t, ca, caKey)
	c := &centre{t: t, packages: map[string]string{}, caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})}
	var err error
	if c.token, err = wire.NewToken(wire.CAHash(ca.Raw)); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(wire.PathJoin, c.join)
	mux.HandleFunc(wire.PathSync, c.sync)
	mux.HandleFunc(wire.PathBundle, c.bundle)
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.requests++
		front := c.front
		c.mu.Unlock()
		if front != nil && front(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
	c.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Raw, ca.Raw}, PrivateKey: leafKey}}}
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	return c
}

// newCert makes a CA (parent nil) or a leaf for 127.0.0.1 signed by it.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "centre"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	if parent == nil {
		tmpl = &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func problem(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.Problem{Error: msg})
}

func (c *centre) join(w http.ResponseWriter, r *http.Request) {
	var req wire.JoinRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, wire.MaxJoinRequest)).Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joins++
	if req.Token != c.token.String() || c.credential != "" {
		problem(w, http.StatusForbidden, "the token is unknown, expired or used up")
		return
	}
	name := req.Name
	if name == "" {
		name = "site-" + c.token.ID
	}
	cred, err := wire.NewCredential(name)
	if err != nil {
		c.t.Error(err)
	}
	c.joined, c.credential = req, cred
	_ = json.NewEncoder(w).Encode(wire.JoinResponse{Member: name, Credential: cred, IntervalSeconds: 30})
}

func (c *centre) authorized(w http.ResponseWriter, r *http.Request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.credential == "" || r.Header.Get("Authorization") != "Bearer "+c.credential {
		problem(w, http.StatusUnauthorized, "no such member")
		return false
	}
	return true
}

func (c *centre) sync(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(w, r) {
		return
	}
	var rep wire.Report
	if err := json.NewDecoder(io.LimitReader(r.Body, wire.MaxReport)).Decode(&rep); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncs++
	c.reports = append(c.reports, rep)
	if c.syncRaw != nil {
		_, _ = w.Write(c.syncRaw)
		return
	}
	_ = json.NewEncoder(w).Encode(c.desired)
}

func (c *centre) bundle(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(w, r) {
		return
	}
	var req wire.BundleRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, wire.MaxBundleRequest)).Decode(&req); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	c.mu.Lock()
	c.bundles++
	fn, path := c.bundleFn, c.packages[req.Digest]
	c.mu.Unlock()
	if fn != nil {
		fn(w, req)
		return
	}
	if path == "" {
		problem(w, http.StatusNotFound, "no such package")
		return
	}
	c.serveDelta(w, path, req.Receipt)
}

// serveDelta answers the delta of the package at path against receipt.
func (c *centre) serveDelta(w http.ResponseWriter, path string, receipt []byte) {
	rc, err := artifact.ParseReceipt(receipt)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	r, err := artifact.Open(context.Background(), path)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := filepath.Join(c.t.TempDir(), "bundle.tar.zst")
	res, err := artifact.Delta(context.Background(), r, rc, out, artifact.DeltaOptions{})
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	c.mu.Lock()
	c.bundleSizes, c.deltas = append(c.bundleSizes, res.Size), append(c.deltas, res)
	c.mu.Unlock()
	f, err := os.Open(out)
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, f)
}

func (c *centre) set(f func(c *centre)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *centre) count() (requests, joins, syncs, bundles int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests, c.joins, c.syncs, c.bundles
}

func (c *centre) lastReport() wire.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.reports) == 0 {
		c.t.Fatal("the centre has had no report")
	}
	return c.reports[len(c.reports)-1]
}

// member is a member cluster: the Secrets `ferry init` leaves (the
// registry's address and account, an in-process registry here), its
// trusted keys, and the Package API.
type member struct {
	cs   *fake.Clientset
	pc   client.WithWatch
	host string
}

func newMember(t *testing.T, trusted ...[]byte) *member {
	t.Helper()
	host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir()}))
	cs := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.StateName}, Data: cluster.State{Registry: host}.Data()},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.AuthSecretName}, Data: cluster.Account{Username: "ferry", Password: "pw"}.Data()},
	)
	for _, pub := range trusted {
		if _, err := deploy.EnsureKeySecret(context.Background(), cs, ns, pub); err != nil {
			t.Fatal(err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := pkgapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pc := crfake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&pkgapi.Package{}).Build()
	return &member{cs: cs, pc: pc, host: host}
}

func (m *member) agent(t *testing.T) *Agent {
	return &Agent{Client: m.cs, Packages: m.pc, Registry: m.host, Spool: t.TempDir(), Version: "test", Poll: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
}

// testLog writes the agent's log into the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// secret is the member's Secret's data.
func (m *member) secret(t *testing.T) map[string][]byte {
	t.Helper()
	s, err := m.cs.CoreV1().Secrets(ns).Get(context.Background(), SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// signer is a package signing key and its public half.
type signer struct {
	key *wire.SiteKey
	pub []byte
}

// newSigner makes an ECDSA P-256 key, which signs packages as a cosign
// key does.
func newSigner(t *testing.T) signer {
	t.Helper()
	k, err := wire.NewSiteKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := k.PublicPEM()
	if err != nil {
		t.Fatal(err)
	}
	return signer{key: k, pub: pub}
}

// buildPackage makes version of a small package called name, whose big
// file (1 MiB, the same in every version) and conf file (saying content)
// travel, signed by sk; it returns the file and its root digest.
func buildPackage(t *testing.T, name, version, content string, sk signer) (string, string) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		definition.FileName: "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: " + name + ", version: " + version + "}\ncomponents:\n  - name: app\n    manifests:\n      - name: ns\n        files: [ns.yaml]\n    files:\n      - {source: big.bin, target: /big.bin}\n      - {source: app.conf, target: /etc/app.conf}\n  - name: extra\n    files:\n      - {source: app.conf, target: /etc/extra.conf}\n",
		"ns.yaml":           "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + name + "\n",
		"big.bin":           string(noise(1 << 20)),
		"app.conf":          content,
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	def, err := definition.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), name+"-"+version+".tar.zst")
	if _, err := build.Create(context.Background(), def, build.CreateOptions{Output: out, SignKey: sk.key}); err != nil {
		t.Fatal(err)
	}
	r, err := artifact.Open(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	return out, r.Root().Digest.String()
}

// noise is n bytes that do not compress, the same each time.
func noise(n int) []byte {
	rng := mrand.New(mrand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func oneLineMessage(s string) bool { return s != "" && !strings.ContainsAny(s, "\r\n") }
