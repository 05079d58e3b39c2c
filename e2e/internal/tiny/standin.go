package main

// The standin mode: tiny playing a program it is not. An image made to stand
// in for a third-party image (e2e/charts_test.go) holds tiny at every path its
// chart runs and a configuration, /standin.json, that says, for each command
// line the chart gives the image, what the real program does that Kubernetes
// can see: listen on ports (probes, Services, webhooks) or run once and exit
// 0 (Jobs, init containers, exec probes).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// standinConfigPath is where a stand-in image holds its configuration; tiny
// runs in standin mode whenever it is there.
const standinConfigPath = "/standin.json"

// standinConfig is /standin.json.
type standinConfig struct {
	Roles []standinRole `json:"roles"`
}

// A standinRole is what the image does when run with one command line.
type standinRole struct {
	// Argv is the command line (the container's command, or the image's
	// entrypoint, then its args); "$(NAME)" in an argument matches anything,
	// as the kubelet expands the variables it knows.
	Argv []string `json:"argv"`
	// Exit: do the Install and exit 0 (a Job, an init container, an exec
	// probe). Otherwise serve until SIGTERM.
	Exit bool `json:"exit,omitempty"`
	// Install are paths to copy this program to first: where later
	// containers of the Pod run it from a volume this one shares.
	Install []string `json:"install,omitempty"`
	// Listen are TCP ports to serve; each answers HTTP or HTTPS (told apart
	// by the first byte the client sends) with 200 on every path, allows
	// every AdmissionReview and converts every ConversionReview. A port a
	// sibling container already serves is skipped.
	Listen []int `json:"listen,omitempty"`
	// DNSNames are the names of the self-signed certificate HTTPS uses
	// (the webhook Services' svc names), besides localhost and 127.0.0.1.
	DNSNames []string `json:"dnsNames,omitempty"`
	// CABundles are the objects whose clientConfig towards a Service gets
	// that certificate as its caBundle, as a webhook's own certificate
	// controller would do, through the API server with the Pod's
	// ServiceAccount.
	CABundles []caBundleRef `json:"caBundles,omitempty"`
}

// A caBundleRef names an object that holds webhook client configurations:
// the entries naming Service (namespace/name) are given the certificate.
type caBundleRef struct {
	// Resource is validatingwebhookconfigurations,
	// mutatingwebhookconfigurations or customresourcedefinitions.
	Resource string `json:"resource"`
	Name     string `json:"name"`
	Service  string `json:"service"`
}

// apiPaths are where the API server serves the resources a caBundleRef names.
var apiPaths = map[string]string{
	"validatingwebhookconfigurations": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/",
	"mutatingwebhookconfigurations":   "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/",
	"customresourcedefinitions":       "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/",
}

// standin runs one role.
type standin struct {
	cfg    standinConfig
	self   string    // this program, copied by Install
	api    apiClient // the API server, for CABundles
	stdout io.Writer
}

// apiClient reaches the API server.
type apiClient struct {
	url    string // https://host:port
	token  string
	client *http.Client
}

// inClusterAPI is the API server as a Pod sees it.
func inClusterAPI() (apiClient, error) {
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return apiClient{}, errors.New("not in a Pod (no KUBERNETES_SERVICE_HOST)")
	}
	token, err := os.ReadFile(dir + "token")
	if err != nil {
		return apiClient{}, err
	}
	ca, err := os.ReadFile(dir + "ca.crt")
	if err != nil {
		return apiClient{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return apiClient{}, errors.New("no certificate in " + dir + "ca.crt")
	}
	return apiClient{
		url:    "https://" + net.JoinHostPort(host, port),
		token:  strings.TrimSpace(string(token)),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}, nil
}

// runStandin reads the configuration and runs the role of argv.
func runStandin(ctx context.Context, config []byte, argv []string, stdout io.Writer) error {
	s := &standin{stdout: stdout}
	if err := json.Unmarshal(config, &s.cfg); err != nil {
		return fmt.Errorf("standin: %s: %w", standinConfigPath, err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("standin: %w", err)
	}
	s.self = self
	return s.run(ctx, argv, inClusterAPI)
}

func (s *standin) run(ctx context.Context, argv []string, api func() (apiClient, error)) error {
	role, ok := s.role(argv)
	if !ok {
		return fmt.Errorf("standin: no role for the command line %q", argv)
	}
	for _, p := range role.Install {
		if err := copyFile(s.self, p); err != nil {
			return fmt.Errorf("standin: install: %w", err)
		}
		fmt.Fprintln(s.stdout, "standin: installed", p)
	}
	if role.Exit {
		fmt.Fprintf(s.stdout, "standin: %q: done\n", argv)
		return nil
	}
	cert, pemCert, err := selfSigned(role.DNSNames)
	if err != nil {
		return fmt.Errorf("standin: certificate: %w", err)
	}
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	var wg sync.WaitGroup
	errs := make(chan error, len(role.Listen))
	for _, port := range role.Listen {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(s.stdout, "standin: port %d: served by another container\n", port)
			continue
		}
		if err != nil {
			return fmt.Errorf("standin: %w", err)
		}
		fmt.Fprintf(s.stdout, "standin: serving HTTP and HTTPS on %s\n", l.Addr())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- serveSniffed(ctx, l, tlsConf)
		}()
	}
	if len(role.CABundles) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.publishCA(ctx, api, role.CABundles, pemCert)
		}()
	}
	fmt.Fprintf(s.stdout, "standin: %q: running\n", argv)
	<-ctx.Done()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// role finds the role whose Argv matches argv.
func (s *standin) role(argv []string) (standinRole, bool) {
	for _, r := range s.cfg.Roles {
		if len(r.Argv) != len(argv) {
			continue
		}
		ok := true
		for i, pat := range r.Argv {
			if !argMatches(pat, argv[i]) {
				ok = false
				break
			}
		}
		if ok {
			return r, true
		}
	}
	return standinRole{}, false
}

var varRef = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_.-]*\)`)

// argMatches tells whether arg is pat with each $(NAME) expanded to
// anything (or left as it is).
func argMatches(pat, arg string) bool {
	if !strings.Contains(pat, "$(") {
		return pat == arg
	}
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, loc := range varRef.FindAllStringIndex(pat, -1) {
		re.WriteString(regexp.QuoteMeta(pat[last:loc[0]]))
		re.WriteString(".*")
		last = loc[1]
	}
	re.WriteString(regexp.QuoteMeta(pat[last:]))
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(arg)
}

// copyFile copies the program at src to dst, executable.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// selfSigned makes a certificate for localhost, 127.0.0.1 and names that is
// its own CA, and returns it with its PEM.
func selfSigned(names []string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "standin"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		DNSNames:              append([]string{"localhost"}, names...),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// serveSniffed serves HTTP on l, over TLS for the connections whose first
// byte is a TLS handshake record's, until ctx ends.
func serveSniffed(ctx context.Context, l net.Listener, tlsConf *tls.Config) error {
	sl := &sniffListener{Listener: l, tls: tlsConf, conns: make(chan net.Conn), done: make(chan struct{})}
	go sl.accept()
	srv := &http.Server{Handler: http.HandlerFunc(answer), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(sl); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// sniffListener hands out the connections of its Listener, each wrapped in
// TLS when the client starts a TLS handshake.
type sniffListener struct {
	net.Listener
	tls   *tls.Config
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *sniffListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.once.Do(func() { close(l.done) })
			return
		}
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			first, err := br.Peek(1)
			_ = c.SetReadDeadline(time.Time{})
			if err != nil { // a TCP probe: connected, then closed
				c.Close()
				return
			}
			var conn net.Conn = &peekedConn{Conn: c, r: br}
			if first[0] == 0x16 { // TLS handshake record
				conn = tls.Server(conn, l.tls)
			}
			select {
			case l.conns <- conn:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *sniffListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// peekedConn reads first what the sniffer buffered.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// answer says 200 to everything: it allows every AdmissionReview and
// converts every ConversionReview (each object given the asked apiVersion,
// unchanged otherwise), so that webhooks a chart registers do not stand in
// the way.
func answer(w http.ResponseWriter, r *http.Request) {
	var review struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Request    struct {
			UID               string           `json:"uid"`
			DesiredAPIVersion string           `json:"desiredAPIVersion"`
			Objects           []map[string]any `json:"objects"`
		} `json:"request"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if r.Method != http.MethodPost || json.Unmarshal(body, &review) != nil || review.Request.UID == "" {
		fmt.Fprintln(w, "ok")
		return
	}
	var response map[string]any
	switch review.Kind {
	case "AdmissionReview":
		response = map[string]any{"uid": review.Request.UID, "allowed": true}
	case "ConversionReview":
		for _, o := range review.Request.Objects {
			o["apiVersion"] = review.Request.DesiredAPIVersion
		}
		if review.Request.Objects == nil {
			review.Request.Objects = []map[string]any{}
		}
		response = map[string]any{"uid": review.Request.UID, "convertedObjects": review.Request.Objects, "result": map[string]any{"status": "Success"}}
	default:
		fmt.Fprintln(w, "ok")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": review.Kind, "response": response})
}

// publishCA sets caPEM as the caBundle of the client configurations refs
// name, retrying every 2 s until each is done or ctx ends.
func (s *standin) publishCA(ctx context.Context, api func() (apiClient, error), refs []caBundleRef, caPEM []byte) {
	c, err := api()
	if err != nil {
		fmt.Fprintln(s.stdout, "standin: caBundle:", err)
		return
	}
	pending := refs
	for len(pending) > 0 {
		var left []caBundleRef
		for _, ref := range pending {
			if err := c.setCABundle(ctx, ref, caPEM); err != nil {
				fmt.Fprintf(s.stdout, "standin: caBundle of %s %s: %v\n", ref.Resource, ref.Name, err)
				left = append(left, ref)
				continue
			}
			fmt.Fprintf(s.stdout, "standin: caBundle of %s %s set\n", ref.Resource, ref.Name)
		}
		pending = left
		if len(pending) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// setCABundle reads the object ref names, sets caPEM in each client
// configuration that names ref.Service and writes it back.
func (c apiClient) setCABundle(ctx context.Context, ref caBundleRef, caPEM []byte) error {
	base, ok := apiPaths[ref.Resource]
	if !ok {
		return fmt.Errorf("unknown resource %q", ref.Resource)
	}
	url := c.url + base + ref.Name
	var obj map[string]any
	if err := c.do(ctx, http.MethodGet, url, nil, &obj); err != nil {
		return err
	}
	ns, name, _ := strings.Cut(ref.Service, "/")
	var configs []map[string]any
	if ref.Resource == "customresourcedefinitions" {
		if cc, ok := dig(obj, "spec", "conversion", "webhook", "clientConfig").(map[string]any); ok {
			configs = append(configs, cc)
		}
	} else {
		hooks, _ := obj["webhooks"].([]any)
		for _, h := range hooks {
			if cc, ok := dig(h, "clientConfig").(map[string]any); ok {
				configs = append(configs, cc)
			}
		}
	}
	set := 0
	for _, cc := range configs {
		svc, _ := cc["service"].(map[string]any)
		if svc == nil || svc["namespace"] != ns || svc["name"] != name {
			continue
		}
		cc["caBundle"] = caPEM // encoded as base64, as the API wants []byte
		set++
	}
	if set == 0 {
		return fmt.Errorf("no client configuration names Service %s", ref.Service)
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, url, body, nil)
}

func (c apiClient) do(ctx context.Context, method, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// dig walks maps by keys.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
