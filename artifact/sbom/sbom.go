// Package sbom makes the SBOMs of a package's images with Syft: it
// implements artifact.SBOMGenerator. It is linked by the full binary only
// (cmd/ferry without the ferryfront tag); package artifact does not import it.
package sbom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/anchore/stereoscope/pkg/file"
	"github.com/anchore/stereoscope/pkg/image"
	"github.com/anchore/syft/syft"
	"github.com/anchore/syft/syft/format/cyclonedxjson"
	"github.com/anchore/syft/syft/format/spdxjson"
	"github.com/anchore/syft/syft/sbom"
	"github.com/anchore/syft/syft/source/stereoscopesource"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/uuid"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	// Syft reads RPM databases (Red Hat, Fedora, SUSE images) with SQL.
	_ "modernc.org/sqlite"

	"github.com/ferrypkg/ferry/artifact"
)

// NamespaceBase prefixes an SPDX document's documentNamespace, which is
// NamespaceBase + the hex of the image manifest's digest.
const NamespaceBase = "https://ferry.dev/spdx/"

// Generator makes SBOMs with Syft's default catalogers for images, with
// every network lookup off (remote licenses, Maven parents) and nothing
// read from the host (Go module cache, Maven repository). Its output is
// deterministic: the creation time is the request's, the SPDX namespace
// and the CycloneDX serial number derive from the manifest digest. The
// zero value is ready to use.
type Generator struct {
	// ToolVersion is the version of ferry named as the documents' creator
	// tool ("ferry-<version>"); if empty, "devel".
	ToolVersion string
	// TempDir is where image blobs and unpacked layers go while an SBOM is
	// made (removed after); if empty, os.TempDir().
	TempDir string
}

var _ artifact.SBOMGenerator = Generator{}

// GenerateSBOM implements artifact.SBOMGenerator.
func (g Generator) GenerateSBOM(ctx context.Context, src content.Fetcher, req artifact.SBOMRequest) ([]byte, error) {
	if req.Manifest.MediaType != ocispec.MediaTypeImageManifest && req.Manifest.MediaType != "application/vnd.docker.distribution.manifest.v2+json" {
		return nil, fmt.Errorf("%s: media type %q is not an image manifest", req.Manifest.Digest, req.Manifest.MediaType)
	}
	format := req.Format
	if format == "" {
		format = artifact.SBOMFormatSPDX
	}
	if _, err := artifact.ParseSBOMFormat(string(format)); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(g.TempDir, "ferry-sbom-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	// The image as an OCI layout, each blob checked against its digest.
	img, err := spool(ctx, src, req.Manifest, tmp+"/layout")
	if err != nil {
		return nil, err
	}
	gen := file.NewTempDirGenerator("ferry-sbom")
	defer gen.Cleanup()
	cache, err := gen.NewDirectory("content")
	if err != nil {
		return nil, err
	}
	simg := image.New(img, gen, cache, image.WithManifestDigest(req.Manifest.Digest.String()))
	defer simg.Cleanup()
	if err := simg.Read(ctx); err != nil {
		return nil, fmt.Errorf("read image: %w", err)
	}
	s, err := syft.CreateSBOM(ctx, stereoscopesource.New(simg, stereoscopesource.ImageConfig{Reference: req.Ref}), g.config())
	if err != nil {
		return nil, err
	}
	return encode(s, format, req)
}

// config is Syft's default for images, offline and independent of the host.
func (g Generator) config() *syft.CreateSBOMConfig {
	version := g.ToolVersion
	if version == "" {
		version = "devel"
	}
	cfg := syft.DefaultCreateSBOMConfig().WithTool("ferry", version)
	p := cfg.Packages
	p.Golang = p.Golang.WithSearchRemoteLicenses(false).WithSearchLocalModCacheLicenses(false).WithSearchLocalVendorLicenses(false)
	p.Golang.LocalModCacheDir = ""
	p.JavaArchive = p.JavaArchive.WithUseNetwork(false)
	p.JavaArchive.UseMavenLocalRepository = false
	p.JavaArchive.MavenLocalRepositoryDir = ""
	p.JavaScript = p.JavaScript.WithSearchRemoteLicenses(false)
	p.Python = p.Python.WithSearchRemoteLicenses(false)
	cfg.Packages = p
	// One cataloger at a time: the order of what Syft finds then does not
	// depend on scheduling, and create runs one image at a time anyway.
	return cfg.WithParallelism(1)
}

// spool copies the image manifest desc and its config and layers from src
// into a new OCI layout at dir (oras's store checks every blob against its
// descriptor) and opens it as a go-containerregistry image.
func spool(ctx context.Context, src content.Fetcher, desc ocispec.Descriptor, dir string) (v1.Image, error) {
	store, err := oci.New(dir)
	if err != nil {
		return nil, err
	}
	raw, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return nil, fmt.Errorf("fetch manifest %s: %w", desc.Digest, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("parse manifest %s: %w", desc.Digest, err)
	}
	for _, d := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
		if err := copyBlob(ctx, src, store, d); err != nil {
			return nil, err
		}
	}
	desc = ocispec.Descriptor{MediaType: desc.MediaType, Digest: desc.Digest, Size: desc.Size}
	if err := store.Push(ctx, desc, bytes.NewReader(raw)); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	if err := store.Tag(ctx, desc, "image"); err != nil {
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(desc.Digest.String())
	if err != nil {
		return nil, err
	}
	return p.Image(h)
}

func copyBlob(ctx context.Context, src content.Fetcher, dst content.Pusher, d ocispec.Descriptor) error {
	d = ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
	rc, err := src.Fetch(ctx, d)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", d.Digest, err)
	}
	defer rc.Close()
	if err := dst.Push(ctx, d, rc); err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return nil
}

// encode writes s in format, with what Syft makes up per run (the time, a
// random namespace or serial number) replaced by what req determines.
func encode(s *sbom.SBOM, format artifact.SBOMFormat, req artifact.SBOMRequest) ([]byte, error) {
	var enc sbom.FormatEncoder
	var err error
	switch format {
	case artifact.SBOMFormatCycloneDX:
		enc, err = cyclonedxjson.NewFormatEncoderWithConfig(cyclonedxjson.DefaultEncoderConfig())
	default:
		enc, err = spdxjson.NewFormatEncoderWithConfig(spdxjson.DefaultEncoderConfig())
	}
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := enc.Encode(&buf, *s); err != nil {
		return nil, fmt.Errorf("encode %s: %w", format, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		return nil, fmt.Errorf("encode %s: %w", format, err)
	}
	created := req.Created.UTC().Format(time.RFC3339)
	switch format {
	case artifact.SBOMFormatCycloneDX:
		doc["serialNumber"] = mustJSON("urn:uuid:" + uuid.NewSHA1(uuid.NameSpaceURL, []byte(req.Manifest.Digest.String())).String())
		if err := patch(doc, "metadata", "timestamp", created); err != nil {
			return nil, err
		}
	default:
		doc["documentNamespace"] = mustJSON(NamespaceBase + req.Manifest.Digest.Encoded())
		if err := patch(doc, "creationInfo", "created", created); err != nil {
			return nil, err
		}
	}
	return marshal(doc)
}

// patch sets doc[obj][key] = value.
func patch(doc map[string]json.RawMessage, obj, key, value string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc[obj], &m); err != nil {
		return fmt.Errorf("SBOM document: %s: %w", obj, err)
	}
	if m == nil {
		return errors.New("SBOM document: no " + obj)
	}
	m[key] = mustJSON(value)
	data, err := marshal(m)
	if err != nil {
		return err
	}
	doc[obj] = bytes.TrimSuffix(data, []byte("\n"))
	return nil
}

// marshal encodes v as compact JSON without HTML escaping, map keys sorted.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func mustJSON(s string) json.RawMessage {
	data, _ := json.Marshal(s)
	return data
}
