// Package kubetest has fakes of the Kubernetes API server's parts that
// client-go's fake clientset does not cover, for tests.
package kubetest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodsProxy is the pods/proxy subresource of an API server, behaving as
// the real one does: it authenticates each request by its Authorization
// header (Bearer Token) and removes it, answers 503 itself for a Pod it
// cannot reach (Down), relays the rest to Pod with the Pod's address as
// Host, and rewrites a Location on that address to its own proxy path.
// GET of a Pod answers it, or 404 once Deleted.
type PodsProxy struct {
	Pod   http.Handler
	Token string

	mu      sync.Mutex
	down    map[string]bool
	deleted map[string]bool
	badAuth int
}

// PodAddr is the address the Pod sees as its own (Host).
const PodAddr = "10.88.1.7:5000"

// Down makes the Pod named unreachable, or reachable again.
func (f *PodsProxy) Down(pod string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[pod] = down
}

// Delete makes the Pod named gone.
func (f *PodsProxy) Delete(pod string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deleted == nil {
		f.deleted = map[string]bool{}
	}
	f.deleted[pod] = true
}

// BadAuth counts the requests not authenticated with Token.
func (f *PodsProxy) BadAuth() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.badAuth
}

func (f *PodsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/")
	ns, rest, ok2 := strings.Cut(rest, "/pods/")
	if !ok || !ok2 {
		http.NotFound(w, r)
		return
	}
	name, path, proxy := strings.Cut(rest, ":5000/proxy")
	f.mu.Lock()
	authOK := r.Header.Get("Authorization") == "Bearer "+f.Token
	if !authOK {
		f.badAuth++
	}
	down, deleted := f.down[name], f.deleted[name]
	f.mu.Unlock()
	if !authOK {
		status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	r.Header.Del("Authorization")
	switch {
	case !proxy && deleted:
		status(w, http.StatusNotFound, `pods "`+name+`" not found`)
	case !proxy:
		json.NewEncoder(w).Encode(&corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	case down:
		status(w, http.StatusServiceUnavailable, "error trying to reach service: dial tcp "+PodAddr+": connect: no route to host")
	default:
		if path == "" {
			path = "/"
		}
		proxyURL := "http://" + r.Host + "/api/v1/namespaces/" + ns + "/pods/" + name + ":5000/proxy"
		r.URL.Path, r.URL.RawPath, r.Host = path, "", PodAddr
		f.Pod.ServeHTTP(&locationRewriter{ResponseWriter: w, pod: "http://" + PodAddr, proxy: proxyURL}, r)
	}
}

func status(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Message: msg, Code: int32(code)})
}

// locationRewriter does what the API server's proxy does to a Location on
// the Pod's address.
type locationRewriter struct {
	http.ResponseWriter
	pod, proxy string
}

func (l *locationRewriter) WriteHeader(code int) {
	if loc, ok := strings.CutPrefix(l.Header().Get("Location"), l.pod); ok {
		l.Header().Set("Location", l.proxy+loc)
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *locationRewriter) Write(b []byte) (int, error) { return l.ResponseWriter.Write(b) }

func (l *locationRewriter) Flush() {
	if f, ok := l.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (l *locationRewriter) Unwrap() http.ResponseWriter { return l.ResponseWriter }
