package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// serve runs an HTTPS server on loopback presenting src's certificate.
func serve(t *testing.T, src *Source) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		TLSConfig:         &tls.Config{GetCertificate: src.GetCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func pairOf(t *testing.T, p Pair) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSourceReloads: a server whose Source watches the Secret serves the
// rotated certificate from a handshake on, with no restart, while clients
// trusting both CAs (the bundle during a rotation) connect without pause:
// no connection refused, no handshake failed. A garbled Secret leaves the
// last good certificate served.
func TestSourceReloads(t *testing.T) {
	now := time.Now()
	tg := AgentTarget("ferry")
	old, err := Issue(tg.DNSNames, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tg.Secret, Namespace: "ferry"}, Type: corev1.SecretTypeTLS, Data: old.Data()})
	watching := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	src := NewSource(pairOf(t, old))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Watch(ctx, cs, "ferry", tg.Secret, nil)
	<-watching
	addr := serve(t, src)

	next, err := Issue(tg.DNSNames, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nextDER := string(pairOf(t, next).Certificate[0])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(Union(old.CA, next.CA, now))
	var (
		handshakes, failures, fromNext atomic.Int64
		firstErr                       atomic.Value
		clients                        sync.WaitGroup
		stop                           = make(chan struct{})
	)
	for range 4 {
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: tg.DNSNames[0], MinVersion: tls.VersionTLS12})
				handshakes.Add(1)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				if string(conn.ConnectionState().PeerCertificates[0].Raw) == nextDER {
					fromNext.Add(1)
				}
				_ = conn.Close()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	secrets := cs.CoreV1().Secrets("ferry")
	s, _ := secrets.Get(ctx, tg.Secret, metav1.GetOptions{})
	s.Data = next.Data()
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fromNext.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	// Garbled: the last good certificate stays.
	s, _ = secrets.Get(ctx, tg.Secret, metav1.GetOptions{})
	s.Data = map[string][]byte{corev1.TLSCertKey: []byte("junk"), corev1.TLSPrivateKeyKey: []byte("junk")}
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	clients.Wait()
	if fromNext.Load() == 0 || failures.Load() != 0 {
		t.Fatalf("%d handshakes, %d with the new certificate, %d failed (%v)", handshakes.Load(), fromNext.Load(), failures.Load(), firstErr.Load())
	}
	if got, _ := src.GetCertificate(nil); string(got.Certificate[0]) != nextDER {
		t.Fatal("a garbled Secret replaced the served certificate")
	}
	t.Logf("%d handshakes through the reload, %d with the new certificate, 0 failed", handshakes.Load(), fromNext.Load())
}

// TestPresented asks the servers an EndpointSlice lists for their
// certificates; a ready one that does not answer is an error, one that is
// not ready is skipped.
func TestPresented(t *testing.T) {
	now := time.Now()
	tg := AgentTarget("ferry")
	p, err := Issue(tg.DNSNames, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(serve(t, NewSource(pairOf(t, p))))
	dead, _ := net.Listen("tcp", "127.0.0.2:0")
	_, deadPort, _ := net.SplitHostPort(dead.Addr().String())
	_ = dead.Close()
	slice := func(name, port string, ready bool) *discoveryv1.EndpointSlice {
		n, pt := "https", int32(0)
		for _, c := range port {
			pt = pt*10 + int32(c-'0')
		}
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry", Labels: map[string]string{discoveryv1.LabelServiceName: cluster.AgentName}},
			Ports:      []discoveryv1.EndpointPort{{Name: &n, Port: &pt}},
			Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}
	}
	cs := fake.NewClientset(slice("a", port, true), slice("b", deadPort, false))
	certs, err := Presented(cs, tg, cluster.AgentName, "https")(context.Background())
	if err != nil || len(certs) != 1 || string(certs[0].Raw) != string(pairOf(t, p).Certificate[0]) {
		t.Fatalf("%d certificates, %v", len(certs), err)
	}
	cs = fake.NewClientset(slice("a", port, true), slice("b", deadPort, true))
	if _, err := Presented(cs, tg, cluster.AgentName, "https")(context.Background()); err == nil {
		t.Fatal("a ready server that does not answer was skipped")
	}
}
