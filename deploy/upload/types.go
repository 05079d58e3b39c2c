// Package upload is the cluster's package upload endpoint and its client.
//
// A caller streams a signed package archive (.tar or .tar.zst, any size)
// over HTTPS to the agent, with a Kubernetes bearer token. The agent
// authenticates the token with a TokenReview and authorises the user with
// SubjectAccessReviews (may they create, or update, Packages in ferry's
// namespace?), spools the archive to its disk in constant memory, verifies
// it against the keys the cluster trusts (the public-key Secrets of
// ferry's namespace) before anything is written to the registry, pushes it
// by digest, and creates or updates its Package; it then reports the
// Package's conditions until it is Ready, or why it is not.
//
// The response is a stream of JSON Events, one a line. Refusals before the
// stream starts are plain HTTP errors with a one-line body: 401 (no or bad
// token), 403 (not allowed), 400 (not a package), 422 (signature or
// content refused), 413 (too large), 507 (no room to spool).
package upload

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Path is where the agent takes uploads (POST).
const Path = "/v1/packages"

// Media types of the request body and the response stream.
const (
	MediaTypeTar    = "application/x-tar"
	MediaTypeZstd   = "application/zstd"
	MediaTypeEvents = "application/x-ndjson"
)

// Options configure an upload: what the Package will say.
type Options struct {
	// Components selects the package's components (required ones always
	// come along); all of them when empty.
	Components []string `json:"components,omitempty"`
	// Set are chart values, KEY=VALUE as helm --set takes them.
	Set []string `json:"set,omitempty"`
	// Timeout bounds the wait for each chart's and bundle's resources;
	// deploy.DefaultTimeout if 0.
	Timeout time.Duration `json:"timeout,omitempty"`
	// NoWait returns once the Package is applied, without waiting for the
	// controller.
	NoWait bool `json:"noWait,omitempty"`
	// Source is the archive's file name on the client, which the agent's
	// messages call it by (its base name, at most 255 bytes); "the
	// uploaded archive" if empty.
	Source string `json:"source,omitempty"`
}

// Phases of an upload, as Events report them, in order.
const (
	PhaseReceived  = "received"  // the archive is on the agent's disk
	PhaseVerified  = "verified"  // signature and every blob checked
	PhasePushing   = "pushing"   // bytes pushed to the registry so far
	PhasePushed    = "pushed"    // in the registry, by digest
	PhaseApplied   = "applied"   // the Package created or updated
	PhaseCondition = "condition" // a condition of the Package changed
	PhaseDone      = "done"      // Result is set
	PhaseError     = "error"     // Error is set; nothing follows
)

// Event is one line of the response stream.
type Event struct {
	Phase string `json:"phase"`
	// Bytes: received (the archive's size) and pushing/pushed (bytes sent
	// to the registry).
	Bytes     int64             `json:"bytes,omitempty"`
	Message   string            `json:"message,omitempty"`
	Condition *metav1.Condition `json:"condition,omitempty"`
	Result    *Result           `json:"result,omitempty"`
	Error     string            `json:"error,omitempty"`
}

// Result is what an upload did.
type Result struct {
	// User is the authenticated user the upload acted for.
	User string `json:"user"`
	// Namespace and Name are the Package's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	// Digest is the package's root digest.
	Digest string `json:"digest"`
	// SignedBy names the key Secrets whose keys signed it.
	SignedBy []string `json:"signedBy"`
	// Received is the archive's size; Pushed the bytes sent to the
	// registry (blobs it had are skipped).
	Received int64 `json:"received"`
	Pushed   int64 `json:"pushed"`
	// Created says the Package was created, not updated.
	Created bool `json:"created"`
	// Ready is the Package's Ready condition status when the upload
	// returned ("True", "False", "Unknown"; "" with NoWait); Reason its
	// reason.
	Ready  string `json:"ready,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Took times the phases.
	Took Took `json:"took"`
	// AgentPeakRSS is the agent process's peak resident memory (bytes)
	// when the upload returned, from /proc/self/status VmHWM; 0 where
	// unknown.
	AgentPeakRSS int64 `json:"agentPeakRSS"`
}

// Took times an upload's phases.
type Took struct {
	Receive time.Duration `json:"receive"`
	Verify  time.Duration `json:"verify"`
	Push    time.Duration `json:"push"`
	Ready   time.Duration `json:"ready"`
}
