package artifact

import (
	"github.com/ferrypkg/ferry/artifact/imagesig"
	digest "github.com/opencontainers/go-digest"
)

// ConfigSchemaVersion is the version of the ferry.json schema written by this code.
const ConfigSchemaVersion = 1

// Config is ferry.json: the package manifest's config blob and the archive's
// leading entry. It records every item with its resolved digest, so that
// deploy never resolves a tag again.
type Config struct {
	SchemaVersion int         `json:"schemaVersion"`
	Name          string      `json:"name"`
	Version       string      `json:"version"`
	Description   string      `json:"description,omitempty"`
	Created       string      `json:"created,omitempty"`
	Platforms     []string    `json:"platforms"`
	Components    []Component `json:"components"`
	// ImagePolicies are the image verification policies the definition
	// named (keys and trusted roots inline); images name them.
	ImagePolicies []imagesig.Policy `json:"imagePolicies,omitempty"`
}

// Component is one component of a package with its resolved content.
type Component struct {
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	Required    bool       `json:"required"`
	Images      []Image    `json:"images,omitempty"`
	Charts      []Chart    `json:"charts,omitempty"`
	Manifests   []Manifest `json:"manifests,omitempty"`
	Files       []File     `json:"files,omitempty"`
	// Repositories are git repositories, each at the commit create resolved.
	Repositories []Repository `json:"repositories,omitempty"`
	// Advisories are vulnerability databases; deploy installs nothing of them.
	Advisories []Advisories `json:"advisories,omitempty"`
}

// Image is an image as stored: its original reference and digest, and the
// digest the cluster pulls (the same, or a platform-filtered manifest/index).
type Image struct {
	Ref            string        `json:"ref"`
	Source         string        `json:"source,omitempty"`
	OriginalDigest digest.Digest `json:"originalDigest"`
	Digest         digest.Digest `json:"digest"`
	MediaType      string        `json:"mediaType"`
	Platforms      []string      `json:"platforms"`
	// Size is the total size of the image's distinct blobs, manifests included.
	Size int64 `json:"size"`
	// SBOMs describe the image's platform manifests, one each (none when
	// the package was created without).
	SBOMs []SBOM `json:"sboms,omitempty"`
	// Signatures are the publisher's signatures and attestations of the
	// image, carried as create found them.
	Signatures []ImageSignature `json:"signatures,omitempty"`
	// Policy names the Config.ImagePolicies entry create checked the image
	// against; empty when none applies.
	Policy string `json:"policy,omitempty"`
}

// ImageSignature is a signature, attestation or Sigstore bundle of an
// image, carried as a manifest (Digest) of the package's graph, listed in
// the root with kind image-signature.
type ImageSignature struct {
	// Kind is imagesig.KindSignature, KindAttestation or KindBundle.
	Kind string `json:"kind"`
	// Subject is the digest it names: the image's original digest, its
	// stored digest or one of its platform manifests.
	Subject digest.Digest `json:"subject"`
	Digest  digest.Digest `json:"digest"`
	// ArtifactType is the referrer's artifactType; empty for cosign's
	// tag-scheme manifests.
	ArtifactType string `json:"artifactType,omitempty"`
	// Tag is the cosign tag it was found under (sha256-<hex>.sig or
	// .att), which deploy and mirror give it again; empty for a referrer.
	Tag string `json:"tag,omitempty"`
	// Size is the manifest's size plus its config's and layers'; for
	// evidence of the original index when create kept some platforms only,
	// plus the manifest carrying that index (see AnnotationSignedIndex).
	Size int64 `json:"size"`
}

// Chart is a Helm chart stored as a Helm OCI artifact; Digest is its manifest's.
type Chart struct {
	Name       string        `json:"name"`
	Version    string        `json:"version"`
	AppVersion string        `json:"appVersion,omitempty"`
	Source     string        `json:"source"`
	Digest     digest.Digest `json:"digest"`
	Size       int64         `json:"size"`
	// Namespace and ReleaseName are where deploy installs it, when the
	// definition says (else "default" and Name).
	Namespace   string `json:"namespace,omitempty"`
	ReleaseName string `json:"releaseName,omitempty"`
}

// Release is the Helm release deploy makes of c: its namespace and name.
func (c Chart) Release() (namespace, name string) {
	namespace, name = c.Namespace, c.ReleaseName
	if namespace == "" {
		namespace = "default"
	}
	if name == "" {
		name = c.Name
	}
	return namespace, name
}

// Repository is a git repository carried at one commit: an OCI artifact in
// the format Flux's OCIRepository reads (the tree as a gzip tar, the source
// and revision as annotations), with the history as a git bundle when
// History is set. Nothing in it is resolved by branch name again.
type Repository struct {
	// URL is the repository's identity, as GitRepository and Argo CD
	// Application objects name it (without user information); Key is its
	// canonical form (host/path) and Path where it goes in a registry.
	URL  string `json:"url"`
	Key  string `json:"key"`
	Path string `json:"path"`
	// Source is the local clone create read, if not URL.
	Source string `json:"source,omitempty"`
	// Ref is the full ref resolved (refs/heads/main); empty when the
	// definition named a commit. Commit is the 40-hex commit, Revision
	// Flux's form of both (main@sha1:<commit>).
	Ref      string `json:"ref,omitempty"`
	Commit   string `json:"commit"`
	Revision string `json:"revision"`
	History  bool   `json:"history"`
	// Digest is the artifact's manifest; Size its blobs' total bytes,
	// manifest included.
	Digest digest.Digest `json:"digest"`
	Size   int64         `json:"size"`
}

// Manifest is a bundle of Kubernetes manifests stored as one YAML layer.
type Manifest struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace,omitempty"`
	Files     []string      `json:"files"`
	Digest    digest.Digest `json:"digest"`
	Size      int64         `json:"size"`
}

// File is a plain file stored as one layer, to be placed at Target.
type File struct {
	Source string        `json:"source"`
	Target string        `json:"target"`
	Mode   int64         `json:"mode"`
	Digest digest.Digest `json:"digest"`
	Size   int64         `json:"size"`
}

// Advisories is a vulnerability database carried as one MediaTypeAdvisories
// layer (package artifact/advisory): the zip or folder the definition named,
// the layer, how many records create loaded and their newest modified time.
type Advisories struct {
	Source   string        `json:"source"`
	Digest   digest.Digest `json:"digest"`
	Size     int64         `json:"size"`
	Records  int           `json:"records"`
	Modified string        `json:"modified,omitempty"`
}
