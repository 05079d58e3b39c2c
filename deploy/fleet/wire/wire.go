// Package wire is the fleet's protocol: what a member and the centre say
// to each other over HTTPS (join, sync, bundle), the join token, the
// member's credential, the signed report a carried member writes to a
// file, and the HTTPS client that trusts only the CA a token pins. Both
// sides import it; it imports no Kubernetes client.
package wire

import (
	"encoding/json"
	"time"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// The centre's endpoints. Every request but Join carries the member's
// credential as a bearer token.
const (
	// PathJoin trades a token for a credential (JoinRequest → JoinResponse).
	PathJoin = "/fleet/v1/join"
	// PathSync is the heartbeat: a Report in, the member's Desired state out.
	PathSync = "/fleet/v1/sync"
	// PathBundle answers a BundleRequest with the delta (.tar.zst) from the
	// receipt to the package asked for, if that package is the member's.
	PathBundle = "/fleet/v1/bundle"
)

// Bounds on what each side reads from the other.
const (
	// MaxJoinRequest, MaxReport and MaxDesired bound the JSON bodies of
	// join and sync, both ways.
	MaxJoinRequest = 64 << 10
	MaxReport      = 4 << 20
	MaxDesired     = 4 << 20
	// MaxBundleRequest bounds a bundle request (its receipt: 64 MiB, as
	// artifact.MaxReceiptSize, and a little more).
	MaxBundleRequest = 64<<20 + 64<<10
	// MaxReportFile bounds a signed report file.
	MaxReportFile = 96 << 20
	// MaxPackages bounds the packages of a report or a desired state.
	MaxPackages = 256
)

// DefaultInterval is a connected member's heartbeat.
const DefaultInterval = 30 * time.Second

// JoinRequest is a member's first request: its token, the name it asks
// for, its labels and the site's public key (PEM).
type JoinRequest struct {
	Token     string            `json:"token"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	PublicKey string            `json:"publicKey"`
	Agent     string            `json:"agent,omitempty"`
}

// JoinResponse gives the member its name and credential.
type JoinResponse struct {
	Member     string `json:"member"`
	Credential string `json:"credential"`
	// IntervalSeconds is the heartbeat the centre asks for.
	IntervalSeconds int `json:"intervalSeconds"`
}

// Report is what a member tells the centre: on each heartbeat (Sync), and
// signed into a file by a carried member (SignedReport).
type Report struct {
	Member  string    `json:"member"`
	Created time.Time `json:"created"`
	Agent   string    `json:"agent,omitempty"`
	// Packages are its Packages as its controller left them.
	Packages []v1alpha1.MemberPackage `json:"packages"`
	// Receipt is what its registry holds (artifact.Receipt's JSON); in a
	// heartbeat only when it changed since the last one.
	Receipt json.RawMessage `json:"receipt,omitempty"`
	// Repositories are receipts of single repositories of its registry
	// (repository → artifact.Receipt's JSON, artifact.HaveRepository):
	// one of the repository each of its Packages names, at most
	// MaxPackages, as many as fit in MaxReportFile with the rest. A delta
	// is completed in the package's own repository and nowhere else, so a
	// carried member's bundle is made against its repository's receipt.
	// Nil (a heartbeat, an older ferry's report) says nothing of them;
	// non-nil, even empty, says that a repository missing here has no
	// receipt to count on: a bundle for it carries the whole package.
	Repositories map[string]json.RawMessage `json:"repositories"`
	// PublicKey and Token travel in a carried member's first report: the
	// centre registers it with them.
	PublicKey string            `json:"publicKey,omitempty"`
	Token     string            `json:"token,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Desired is what the centre wants a member to run.
type Desired struct {
	// Generation changes whenever anything else here does.
	Generation      string           `json:"generation"`
	IntervalSeconds int              `json:"intervalSeconds"`
	Packages        []DesiredPackage `json:"packages"`
}

// DesiredPackage is one package a placement puts on the member.
type DesiredPackage struct {
	// Name is the Package's name at the member.
	Name      string `json:"name"`
	Placement string `json:"placement"`
	// Repository is the package's repository in the centre's registry.
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	Version    string `json:"version,omitempty"`
	// Values are the target group's values (JSON object).
	Values         json.RawMessage `json:"values,omitempty"`
	Components     []string        `json:"components,omitempty"`
	TimeoutSeconds int             `json:"timeoutSeconds,omitempty"`
}

// BundleRequest asks for the delta from what the member holds (Receipt,
// artifact.Receipt's JSON) to one of its desired packages.
type BundleRequest struct {
	Repository string          `json:"repository"`
	Digest     string          `json:"digest"`
	Receipt    json.RawMessage `json:"receipt"`
}

// Problem is every refusal's body: one sentence.
type Problem struct {
	Error string `json:"error"`
}
