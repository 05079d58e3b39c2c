package cluster

import "net/http"

// A client's credentials reach ferry's registry through a proxy that takes
// the Authorization header for itself: the Kubernetes API server
// authenticates a pods/proxy request with it and removes it before relaying
// the request to the Pod. The client side (kube.PodProxy) moves
// Authorization to ForwardedAuthHeader; the registry reads that in its
// place, and marks each of its answers with ServedHeader, so that the client
// tells them from the API server's own.

// ForwardedAuthHeader carries a request's Authorization past the proxy.
const ForwardedAuthHeader = "Ferry-Authorization"

// ServedHeader is the response header on every answer of ferry's registry.
const ServedHeader = "Ferry-Registry"

// AcceptForwardedAuth prepares a request to ferry's registry and its
// answer: a request with no Authorization and a ForwardedAuthHeader has that
// read in its place, ForwardedAuthHeader is removed, and the answer is
// marked ServedHeader.
func AcceptForwardedAuth(w http.ResponseWriter, r *http.Request) {
	if a := r.Header.Get(ForwardedAuthHeader); a != "" && r.Header.Get("Authorization") == "" {
		r.Header.Set("Authorization", a)
	}
	r.Header.Del(ForwardedAuthHeader)
	w.Header().Set(ServedHeader, "1")
}

// FromRegistry says whether resp is an answer of ferry's registry (one
// that reads ForwardedAuthHeader), not of a proxy in between.
func FromRegistry(resp *http.Response) bool { return resp.Header.Get(ServedHeader) != "" }
