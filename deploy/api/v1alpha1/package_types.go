// Package v1alpha1 is the ferry.dev/v1alpha1 API: the Package resource, a
// signed package in the in-cluster registry that the controller (ferry
// controller, which ferry init deploys) keeps installed.
//
// +kubebuilder:object:generate=true
// +groupName=ferry.dev
package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is ferry.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "ferry.dev", Version: "v1alpha1"}

// Kind and Resource of a Package.
const (
	Kind     = "Package"
	Resource = "packages"
)

// AddToScheme adds the Package types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Package{}, &PackageList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Condition types of a Package.
const (
	// Verified: the package at status.digest is signed by one of the
	// spec's keys and every manifest of its graph was re-hashed.
	Verified = "Verified"
	// Installed: its charts and manifests are installed at that digest.
	Installed = "Installed"
	// Ready: installed, and every workload of it ready.
	Ready = "Ready"
)

// Reasons of the conditions, for people and for automation.
const (
	ReasonVerified            = "Verified"
	ReasonSkipped             = "VerificationSkipped"
	ReasonNoKeys              = "NoKeys"
	ReasonKeyNotFound         = "KeyNotFound"
	ReasonVerifyFailed        = "VerificationFailed"
	ReasonNotFound            = "PackageNotFound"
	ReasonNameMismatch        = "NameMismatch"
	ReasonInvalid             = "InvalidSpec"
	ReasonProgressing         = "Progressing"
	ReasonInstalled           = "Installed"
	ReasonInstallFailed       = "InstallFailed"
	ReasonRegistryUnreachable = "RegistryUnreachable"
	ReasonDeleting            = "Deleting"
)

// Finalizer keeps a Package until what it installed is removed.
const Finalizer = "ferry.dev/uninstall"

// RequestAnnotation, changed, asks for the Package to be reconciled again
// now, its install retried if it failed (ferry deploy sets it).
const RequestAnnotation = "ferry.dev/request"

// PackageSpec is the package to keep installed.
//
// +kubebuilder:validation:XValidation:rule="has(self.digest) || has(self.tag)",message="name the package by digest (or by a tag, resolved once)"
// +kubebuilder:validation:XValidation:rule="(has(self.insecureSkipSignatureVerification) && self.insecureSkipSignatureVerification) || (has(self.keys) && size(self.keys) > 0)",message="keys are required: name the public keys the package must be signed with"
type PackageSpec struct {
	// Repository is the package's repository in the in-cluster registry
	// (ferry deploy pushes it to the package's name).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`
	Repository string `json:"repository"`
	// Digest is the package's root, sha256:<64 hex>: what is installed.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
	// Tag names the package when Digest is empty; it is resolved once and
	// the digest recorded in the status (status.digest, status.tag):
	// moving the tag later does not change what is installed.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`
	// +optional
	Tag string `json:"tag,omitempty"`
	// Keys are the public keys (cosign, PEM) one of which must have signed
	// the package's root. Nothing is installed unless a signature verifies.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Keys []KeyReference `json:"keys,omitempty"`
	// InsecureSkipSignatureVerification installs the package unsigned
	// (its manifests are still re-hashed).
	// +optional
	InsecureSkipSignatureVerification bool `json:"insecureSkipSignatureVerification,omitempty"`
	// Components selects components by name (required ones always come
	// along); all of them when empty.
	// +listType=set
	// +optional
	Components []string `json:"components,omitempty"`
	// Values are given to every chart, under any per-chart values.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// Charts sets values per chart.
	// +listType=map
	// +listMapKey=name
	// +optional
	Charts []ChartValues `json:"charts,omitempty"`
	// Timeout bounds the wait for each chart's and bundle's resources to be
	// ready (5m if unset).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// KeyReference names a public key in a Secret or ConfigMap of the
// Package's namespace.
type KeyReference struct {
	// Kind is Secret or ConfigMap.
	// +kubebuilder:validation:Enum=Secret;ConfigMap
	// +kubebuilder:default=Secret
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name of the Secret or ConfigMap.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key holding the PEM public key; cosign.pub if empty.
	// +optional
	Key string `json:"key,omitempty"`
}

// ChartValues are the values of one chart of the package.
type ChartValues struct {
	// Name is the chart's name in the package.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Values for this chart, over spec.values and valuesFrom.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// ValuesFrom are YAML values files in Secrets or ConfigMaps, merged in
	// order, under Values.
	// +optional
	ValuesFrom []KeyReference `json:"valuesFrom,omitempty"`
}

// PackageStatus is what the controller last did and saw.
type PackageStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Version is the package's version at Digest.
	// +optional
	Version string `json:"version,omitempty"`
	// Digest is the root installed (or being installed).
	// +optional
	Digest string `json:"digest,omitempty"`
	// ShortDigest is Digest's first 12 hex digits, for kubectl get.
	// +optional
	ShortDigest string `json:"shortDigest,omitempty"`
	// Tag is the spec's tag that Digest was resolved from.
	// +optional
	Tag string `json:"tag,omitempty"`
	// SignedBy are the keys (Kind/Name/Key) whose signature verified.
	// +optional
	SignedBy []string `json:"signedBy,omitempty"`
	// Conditions: Verified, Installed, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Releases are the Helm releases of its charts.
	// +optional
	Releases []ReleaseStatus `json:"releases,omitempty"`
	// Objects are what its manifests applied.
	// +optional
	Objects []ObjectStatus `json:"objects,omitempty"`
	// Images are its images in the in-cluster registry, path@digest.
	// +optional
	Images []string `json:"images,omitempty"`
	// ImagePolicies are the signature policies the package declares for
	// its images, which the agent enforces when a Pod is admitted.
	// +optional
	ImagePolicies []ImagePolicyStatus `json:"imagePolicies,omitempty"`
	// LastError is the last failure, empty once a reconcile succeeds.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Request is the RequestAnnotation value this status answers: ferry
	// deploy sets a new one to have an unchanged Package (or one whose
	// install failed) installed again.
	// +optional
	Request string `json:"request,omitempty"`
	// Removal is what deleting the Package removed, set just before its
	// finalizer goes.
	// +optional
	Removal *RemovalStatus `json:"removal,omitempty"`
	// VerifiedFor identifies the root and keys last verified: an
	// unchanged Package is not verified again on resync.
	// +optional
	VerifiedFor string `json:"verifiedFor,omitempty"`
	// InstalledFor identifies what was last installed: the verified root
	// and keys, the components, the values and the timeout. A resync that
	// finds the same, installed and ready since InstalledAt less than the
	// drift interval ago, reads nothing from the registry and leaves Helm
	// and the cluster alone.
	// +optional
	InstalledFor string `json:"installedFor,omitempty"`
	// InstalledAt is when the package was last installed, or its
	// resources last checked for drift.
	// +optional
	InstalledAt *metav1.Time `json:"installedAt,omitempty"`
}

// ImagePolicyStatus is one image signature policy of a package, briefly.
type ImagePolicyStatus struct {
	Name string `json:"name"`
	// Required: an image without a valid signature is refused; when
	// false, only a bad signature is.
	Required bool `json:"required"`
	// Authorities are who it trusts: "key sha256:<hex>" (the SHA-256 of
	// the DER public key) or "keyless <issuer> <subject>" per identity
	// (regular expressions as /re/).
	Authorities []string `json:"authorities"`
	// Attestations are the predicate types it requires.
	// +optional
	Attestations []string `json:"attestations,omitempty"`
	// Images are the images it covers, as the package names them.
	// +optional
	Images []string `json:"images,omitempty"`
}

// RemovalStatus tells what deleting a Package removed.
type RemovalStatus struct {
	// Version is the version removed.
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Releases []ReleaseStatus `json:"releases,omitempty"`
	// +optional
	Objects []ObjectStatus `json:"objects,omitempty"`
	// Images deleted from the registry; Kept, those another package uses.
	// +optional
	Images []string `json:"images,omitempty"`
	// +optional
	Kept []string `json:"kept,omitempty"`
	// CRDs deleted: those its releases created from their charts' crds/
	// folders; KeptCRDs ("name: reason"), those kept.
	// +optional
	CRDs []string `json:"crds,omitempty"`
	// +optional
	KeptCRDs []string `json:"keptCRDs,omitempty"`
	// Repositories are the git repositories' artifacts deleted from the
	// registry, as repository@digest.
	// +optional
	Repositories []string `json:"repositories,omitempty"`
	// PullSecrets are the namespaces whose copy of the registry pull secret
	// was deleted.
	// +optional
	PullSecrets []string `json:"pullSecrets,omitempty"`
	// StorageBefore and StorageAfter are the registry's bytes around the
	// garbage collection that followed the removal (one for a batch of
	// removals).
	StorageBefore int64 `json:"storageBefore"`
	StorageAfter  int64 `json:"storageAfter"`
}

// ReleaseStatus is one Helm release.
type ReleaseStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Chart     string `json:"chart"`
	Revision  int    `json:"revision"`
}

// ObjectStatus is one applied object.
type ObjectStatus struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// Package is a signed package, in the in-cluster registry, kept installed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=ferry,shortName=fpkg
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.shortDigest`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Package struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PackageSpec   `json:"spec"`
	Status PackageStatus `json:"status,omitempty"`
}

// PackageList is a list of Packages.
//
// +kubebuilder:object:root=true
type PackageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Package `json:"items"`
}
