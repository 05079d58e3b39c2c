// Package artifact is ferry's package model: the package config
// (ferry.json), and reading and writing packages as OCI image layouts,
// either as a directory or as a .tar/.tar.zst archive; signing and
// verifying; and moving packages between oras targets (Copy). Package
// artifact/build makes one from a definition (ferry.yaml, package
// artifact/definition).
package artifact

// Media types and annotations of a ferry package. See docs/design/package-format.md.
const (
	// ArtifactTypePackage marks the package root index and the package manifest.
	ArtifactTypePackage = "application/vnd.ferry.package.v1+json"
	// MediaTypeConfig is the media type of ferry.json, the package manifest's config.
	MediaTypeConfig = "application/vnd.ferry.package.config.v1+json"
	// MediaTypeManifestBundle is a layer holding a component's Kubernetes
	// manifests as one multi-document YAML stream.
	MediaTypeManifestBundle = "application/vnd.ferry.manifests.v1+yaml"
	// MediaTypeFile is a layer holding one plain file.
	MediaTypeFile = "application/vnd.ferry.file.v1"
	// MediaTypeAdvisories is a layer holding a zip of OSV records.
	MediaTypeAdvisories = "application/vnd.ferry.advisories.osv.v1+zip"

	// MediaTypeHelmConfig and MediaTypeHelmChart are Helm's own OCI media
	// types, so that `helm pull oci://…@sha256:…` works on a stored chart.
	MediaTypeHelmConfig = "application/vnd.cncf.helm.config.v1+json"
	MediaTypeHelmChart  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

	// AnnotationComponent names the component an entry of the root index or
	// a layer of the package manifest belongs to.
	AnnotationComponent = "dev.ferry.component"
	// AnnotationKind says what a root index entry is: package, chart or image.
	AnnotationKind = "dev.ferry.kind"
	// AnnotationImageRef is the original reference of an image entry, e.g.
	// docker.io/library/nginx:1.27.
	AnnotationImageRef = "dev.ferry.image.ref"
	// AnnotationGitURL is the repository URL of a git entry, as the
	// definition gave it (without user information).
	AnnotationGitURL = "dev.ferry.git.url"
	// AnnotationPackageName and AnnotationPackageVersion name the package on its root.
	AnnotationPackageName    = "dev.ferry.package.name"
	AnnotationPackageVersion = "dev.ferry.package.version"

	// ConfigFileName is the archive's leading entry, a copy of the config blob.
	ConfigFileName = "ferry.json"

	// AnnotationPlatform is the platform (os/arch[/variant]) of the image
	// manifest an SBOM entry of the root index describes.
	AnnotationPlatform = "dev.ferry.platform"
)

// Kinds of root index entries (values of AnnotationKind).
const (
	KindPackage = "package"
	KindChart   = "chart"
	KindImage   = "image"
	// KindGit is a git repository at one commit, in the format Flux's
	// OCIRepository reads (see Repository).
	KindGit  = "git"
	KindSBOM = "sbom"
	// KindImageSignature is a publisher's signature, attestation or
	// Sigstore bundle of an image (see ImageSignature).
	KindImageSignature = "image-signature"
)
