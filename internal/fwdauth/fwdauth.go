// Package fwdauth carries a client's credentials to ferry's registry
// through a proxy that takes the Authorization header for itself: the
// Kubernetes API server authenticates a pods/proxy request with it and
// removes it before relaying the request to the Pod. The client side
// (kube.PodProxy) moves Authorization to Header; the registry reads Header
// in its place, and marks each of its answers with Served, so that the
// client tells them from the API server's own.
package fwdauth

import "net/http"

// Header carries a request's Authorization past the proxy.
const Header = "Ferry-Authorization"

// Served is the response header on every answer of ferry's registry.
const Served = "Ferry-Registry"

// Accept prepares a request to ferry's registry and its answer: a request
// with no Authorization and a Header has that read in its place, Header is
// removed, and the answer is marked Served.
func Accept(w http.ResponseWriter, r *http.Request) {
	if a := r.Header.Get(Header); a != "" && r.Header.Get("Authorization") == "" {
		r.Header.Set("Authorization", a)
	}
	r.Header.Del(Header)
	w.Header().Set(Served, "1")
}

// FromRegistry says whether resp is an answer of ferry's registry (one
// that reads Header), not of a proxy in between.
func FromRegistry(resp *http.Response) bool { return resp.Header.Get(Served) != "" }
