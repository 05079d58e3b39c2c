// Package v1alpha1 is the fleet.ferry.dev/v1alpha1 API: the fleet centre's
// state, kept as objects in its management cluster (its API server is the
// store, its RBAC the access control). A Member is one cluster of the
// fleet, a MemberGroup selects members by label, a ReleaseTrack is a
// package repository of the centre's registry with channels, and a
// Placement puts a track's channel (or a pinned version) on groups, with
// values per group, rolled out in waves.
//
// +kubebuilder:object:generate=true
// +groupName=fleet.ferry.dev
package v1alpha1

import (
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is fleet.ferry.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "fleet.ferry.dev", Version: "v1alpha1"}

// AddToScheme adds the fleet types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Member{}, &MemberList{},
		&MemberGroup{}, &MemberGroupList{},
		&ReleaseTrack{}, &ReleaseTrackList{},
		&Placement{}, &PlacementList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// How a member is reached.
const (
	// Connected: its agent dials out to the centre, fetches its desired
	// state and reports back on its own.
	Connected = "Connected"
	// Carried: nothing crosses its gap but files a person carries — its
	// signed reports in, carry bundles out.
	Carried = "Carried"
)

// Member conditions.
const (
	// MemberReady: every package placed on it runs Ready at its target.
	MemberReady = "Ready"
	// MemberStale: no report within three heartbeats (connected members).
	MemberStale = "Stale"
)

// LabelCanary, on a Member, puts it in a rollout's first wave.
const LabelCanary = "fleet.ferry.dev/canary"

// Member is one cluster of the fleet.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fm,categories=ferry
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Stale",type=string,JSONPath=`.status.conditions[?(@.type=="Stale")].status`
// +kubebuilder:printcolumn:name="Last seen",type=date,JSONPath=`.status.lastSeen`
// +kubebuilder:printcolumn:name="Revoked",type=boolean,JSONPath=`.spec.revoked`
type Member struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemberSpec   `json:"spec,omitempty"`
	Status MemberStatus `json:"status,omitempty"`
}

// MemberSpec is who a member is. Its labels (metadata.labels) are what
// groups select.
type MemberSpec struct {
	// Mode is Connected or Carried.
	// +kubebuilder:validation:Enum=Connected;Carried
	// +kubebuilder:default=Connected
	// +optional
	Mode string `json:"mode,omitempty"`
	// PublicKey is the site's public key (PEM): a carried member's reports
	// must be signed by it.
	// +kubebuilder:validation:MaxLength=8192
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// Revoked cuts the member off: every request it makes is refused, and
	// no report of it is imported.
	// +optional
	Revoked bool `json:"revoked,omitempty"`
}

// MemberStatus is what the centre last heard from a member.
type MemberStatus struct {
	// Credential is the SHA-256 of the member's credential (sha256:<hex>):
	// what the centre checks its requests against. Never the credential.
	// +optional
	Credential string `json:"credential,omitempty"`
	// JoinedAt is when it traded its token for its credential (or its
	// first report was imported).
	// +optional
	JoinedAt *metav1.Time `json:"joinedAt,omitempty"`
	// JoinedWith names the token it joined with.
	// +optional
	JoinedWith string `json:"joinedWith,omitempty"`
	// LastSeen is when its last report came (a heartbeat, or the creation
	// time of an imported report).
	// +optional
	LastSeen *metav1.Time `json:"lastSeen,omitempty"`
	// Interval is its heartbeat (connected members).
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Agent is the ferry version its agent runs.
	// +optional
	Agent string `json:"agent,omitempty"`
	// Packages are its packages, as it last reported them.
	// +optional
	Packages []MemberPackage `json:"packages,omitempty"`
	// Receipt is the digest of its last receipt (what its registry holds),
	// stored in the centre's registry; ReceiptBlobs and ReceiptBytes
	// summarise it.
	// +optional
	Receipt string `json:"receipt,omitempty"`
	// +optional
	ReceiptBlobs int `json:"receiptBlobs,omitempty"`
	// +optional
	ReceiptBytes int64 `json:"receiptBytes,omitempty"`
	// Receipts is the digest of the manifest, beside Receipt in the
	// centre's registry, that lists the receipts of its last report that
	// carried any: Receipt's, and one per repository of its registry that
	// its Packages name (what a carried member's bundle is made against).
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Receipts string `json:"receipts,omitempty"`
	// Conditions: Ready, Stale.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MemberPackage is one package of a member, as it reported it.
type MemberPackage struct {
	// Name is the Package's name in the member.
	Name string `json:"name"`
	// Placement placed it there (empty: deployed by hand at the site).
	// +optional
	Placement string `json:"placement,omitempty"`
	// Version and Digest are what runs.
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Digest string `json:"digest,omitempty"`
	// Target is the digest the centre last asked for.
	// +optional
	Target string `json:"target,omitempty"`
	// Ready tells that it runs Ready at Digest.
	Ready bool `json:"ready"`
	// Refused is set when the member refused Target (its keys do not
	// verify it, …): Reason and Message say why.
	// +optional
	Refused bool `json:"refused,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// MemberList is a list of Members.
//
// +kubebuilder:object:root=true
type MemberList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Member `json:"items"`
}

// MemberGroup selects members by their labels.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fmg,categories=ferry
// +kubebuilder:printcolumn:name="Members",type=integer,JSONPath=`.status.count`
type MemberGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemberGroupSpec   `json:"spec,omitempty"`
	Status MemberGroupStatus `json:"status,omitempty"`
}

// MemberGroupSpec selects the members of a group.
type MemberGroupSpec struct {
	// Selector selects Members by label; an empty selector selects all.
	Selector metav1.LabelSelector `json:"selector"`
}

// MemberGroupStatus counts a group's members.
type MemberGroupStatus struct {
	// +optional
	Count int `json:"count"`
	// Members are their names, sorted.
	// +optional
	Members []string `json:"members,omitempty"`
}

// MemberGroupList is a list of MemberGroups.
//
// +kubebuilder:object:root=true
type MemberGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemberGroup `json:"items"`
}

// ReleaseTrack is a package repository of the centre's registry and its
// channels, each naming one version by digest.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=frt,categories=ferry
// +kubebuilder:printcolumn:name="Repository",type=string,JSONPath=`.spec.repository`
type ReleaseTrack struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ReleaseTrackSpec   `json:"spec,omitempty"`
	Status ReleaseTrackStatus `json:"status,omitempty"`
}

// ReleaseTrackSpec is a track's repository and channels.
type ReleaseTrackSpec struct {
	// Repository is the package's repository in the centre's registry
	// (where `ferry package push` put it).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`
	Repository string `json:"repository"`
	// Package, if set, is the package's own name (its ferry.json's): a
	// version of another package is refused on the track's channels. The
	// Package's name at members is the package's own name (PackageName).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Package string `json:"package,omitempty"`
	// Channels (beta, rc, stable, …) each name a version.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Channels []Channel `json:"channels,omitempty"`
}

// Channel is one channel of a track.
type Channel struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Digest is the package's root.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	Digest string `json:"digest"`
	// Version is the package's version at Digest.
	// +optional
	Version string `json:"version,omitempty"`
	// Package is the package's own name at Digest (its ferry.json's, as
	// its root's annotations carry it): the Package's name at members.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Package string `json:"package,omitempty"`
}

// PackageName is the Package's name at the track's members: the package's
// own name as its channels recorded it when their versions were promoted,
// else spec.package, else (a track with no version promoted since channels
// recorded it) the repository's last path element.
func (t *ReleaseTrack) PackageName() string {
	for _, ch := range t.Spec.Channels {
		if ch.Package != "" {
			return ch.Package
		}
	}
	if t.Spec.Package != "" {
		return t.Spec.Package
	}
	return t.Spec.Repository[strings.LastIndex(t.Spec.Repository, "/")+1:]
}

// ReleaseTrackStatus keeps a track's promotions.
type ReleaseTrackStatus struct {
	// Promotions, newest first (at most 50).
	// +optional
	Promotions []Promotion `json:"promotions,omitempty"`
}

// Promotion is one version put on a channel.
type Promotion struct {
	Channel string      `json:"channel"`
	Digest  string      `json:"digest"`
	Version string      `json:"version,omitempty"`
	By      string      `json:"by,omitempty"`
	At      metav1.Time `json:"at"`
}

// ReleaseTrackList is a list of ReleaseTracks.
//
// +kubebuilder:object:root=true
type ReleaseTrackList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ReleaseTrack `json:"items"`
}

// Placement phases.
const (
	PhaseProgressing = "Progressing"
	PhaseComplete    = "Complete"
	PhaseHalted      = "Halted"
)

// Placement puts a track's version on groups of members.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fp,categories=ferry
// +kubebuilder:printcolumn:name="Track",type=string,JSONPath=`.spec.track`
// +kubebuilder:printcolumn:name="Channel",type=string,JSONPath=`.spec.channel`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:validation:XValidation:rule="has(self.spec.channel) != has(self.spec.digest)",message="name a channel or pin a digest, not both"
type Placement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PlacementSpec   `json:"spec,omitempty"`
	Status PlacementStatus `json:"status,omitempty"`
}

// PlacementSpec is what goes where, and how it rolls out.
type PlacementSpec struct {
	// Track is the ReleaseTrack's name.
	// +kubebuilder:validation:MinLength=1
	Track string `json:"track"`
	// Channel follows a channel of the track.
	// +optional
	Channel string `json:"channel,omitempty"`
	// Digest pins a version (a rollback pins the previous one).
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
	// Targets are the groups it goes to, each with its values.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Targets []PlacementTarget `json:"targets"`
	// Components selects the package's components; all if empty.
	// +optional
	Components []string `json:"components,omitempty"`
	// Timeout bounds each chart's wait at a member (5m if unset).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Strategy is how a change rolls out.
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`
}

// PlacementTarget is one group and the values its members get.
type PlacementTarget struct {
	// Group is a MemberGroup's name.
	// +kubebuilder:validation:MinLength=1
	Group string `json:"group"`
	// Values are given to every chart, as `ferry deploy --set` gives them.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
}

// Strategy is how a placement change rolls out: the canaries first (the
// members labelled LabelCanary, else the first member by name), then
// waves of WaveFraction of the members at a time; a wave waits until each
// of its members runs the new version Ready, and the rollout halts at the
// first member that is not Ready within ReadyTimeout, or refuses it.
type Strategy struct {
	// Canaries is how many members go first when none is labelled (1 if
	// unset).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Canaries *int32 `json:"canaries,omitempty"`
	// WaveFraction is the percentage of the members each later wave takes
	// (25 if unset; 100: all at once).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	WaveFraction int32 `json:"waveFraction,omitempty"`
	// ReadyTimeout bounds the wait for each member of a wave (10m if
	// unset).
	// +optional
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`
}

// PlacementStatus is where a placement's rollout stands.
type PlacementStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Digest and Version are what the placement asks for now.
	// +optional
	Digest string `json:"digest,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// Current is the version every member ran Ready when the last rollout
	// completed; Previous the one before it (what a rollback returns to).
	// +optional
	Current string `json:"current,omitempty"`
	// +optional
	Previous string `json:"previous,omitempty"`
	// Phase is Progressing, Complete or Halted.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Wave is the rollout's current wave (0: the canaries).
	// +optional
	Wave int `json:"wave,omitempty"`
	// Message says why it halted, naming the member.
	// +optional
	Message string `json:"message,omitempty"`
	// Members are the members it places on and where each stands.
	// +optional
	Members []PlacedMember `json:"members,omitempty"`
	// History is its rollouts, newest first (at most 20).
	// +optional
	History []RolloutRecord `json:"history,omitempty"`
}

// PlacedMember is one member of a placement.
type PlacedMember struct {
	Name string `json:"name"`
	// Target is the digest it is asked to run now.
	Target string `json:"target"`
	// Wave is the wave it belongs to in the current rollout.
	// +optional
	Wave int `json:"wave,omitempty"`
	// Since is when it was given Target.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// State is Pending, Updating, Ready, Failed or Refused.
	State string `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
}

// RolloutRecord is one rollout of a placement, kept as history.
type RolloutRecord struct {
	// Action is rollout or rollback.
	Action string `json:"action"`
	From   string `json:"from,omitempty"`
	To     string `json:"to"`
	// +optional
	Version string `json:"version,omitempty"`
	// By is who asked for it.
	// +optional
	By      string      `json:"by,omitempty"`
	Started metav1.Time `json:"started"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Result is Progressing, Complete or Halted.
	Result string `json:"result"`
	// +optional
	Message string `json:"message,omitempty"`
	// Members are each member's outcome: "name: Ready" or "name: Failed (why)".
	// +optional
	Members []string `json:"members,omitempty"`
}

// PlacementList is a list of Placements.
//
// +kubebuilder:object:root=true
type PlacementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Placement `json:"items"`
}
