// Package sbomgen makes the SBOM of an image manifest held in an OCI image
// layout, with Syft. It is the library of the ferry-sbom helper
// (cmd/ferry-sbom), which `ferry package create` runs for each image
// platform: Syft, its catalogers and their dependencies (go-containerregistry,
// stereoscope, an SQLite for RPM databases) stay out of the ferry binaries,
// in this module of their own.
//
// The layout is read as given: ferry writes it with every blob checked
// against its descriptor before it runs the helper.
package sbomgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/uuid"
	// Syft reads RPM databases (Red Hat, Fedora, SUSE images) with SQL.
	_ "modernc.org/sqlite"
)

// Format is the document format of an SBOM, as ferry's --sbom-format
// names it.
type Format string

// Formats. FormatSPDX is the default.
const (
	FormatSPDX      Format = "spdx-json"
	FormatCycloneDX Format = "cyclonedx-json"
)

// ParseFormat parses a format name; "" is FormatSPDX.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "":
		return FormatSPDX, nil
	case FormatSPDX, FormatCycloneDX:
		return f, nil
	}
	return "", fmt.Errorf("unknown SBOM format %q: want %s or %s", s, FormatSPDX, FormatCycloneDX)
}

// NamespaceBase prefixes an SPDX document's documentNamespace, which is
// NamespaceBase + the hex of the image manifest's digest.
const NamespaceBase = "https://ferry.dev/spdx/"

// Options say how Generate describes an image.
type Options struct {
	// Format is the document format; if empty, FormatSPDX.
	Format Format
	// Ref is the image's original reference, e.g.
	// docker.io/library/nginx:1.27, named as the document's subject.
	Ref string
	// Created is the creation time the document states, so that the same
	// image gives the same bytes; its zero value is stated as is.
	Created time.Time
	// ToolVersion is the version of ferry named as the documents' creator
	// tool ("ferry-<version>"); if empty, "devel".
	ToolVersion string
}

// Generate returns the SBOM of the image manifest whose digest is manifest
// (sha256:…), which the index of the OCI image layout at dir lists, with
// its config and layers in the layout's blobs. It runs Syft's default
// catalogers for images with every network lookup off (remote licenses,
// Maven parents) and nothing read from the host (Go module cache, Maven
// repository). Its output is deterministic: the creation time is
// opts.Created, the SPDX namespace and the CycloneDX serial number derive
// from the manifest digest. Unpacked layers go to os.TempDir(), removed
// before it returns.
func Generate(ctx context.Context, dir, manifest string, opts Options) ([]byte, error) {
	format, err := ParseFormat(string(opts.Format))
	if err != nil {
		return nil, err
	}
	img, err := open(dir, manifest)
	if err != nil {
		return nil, err
	}
	gen := file.NewTempDirGenerator("ferry-sbom")
	defer gen.Cleanup()
	cache, err := gen.NewDirectory("content")
	if err != nil {
		return nil, err
	}
	simg := image.New(img, gen, cache, image.WithManifestDigest(manifest))
	defer simg.Cleanup()
	if err := simg.Read(ctx); err != nil {
		return nil, fmt.Errorf("read image %s: %w", manifest, err)
	}
	s, err := syft.CreateSBOM(ctx, stereoscopesource.New(simg, stereoscopesource.ImageConfig{Reference: opts.Ref}), config(opts.ToolVersion))
	if err != nil {
		return nil, err
	}
	return encode(s, format, manifest, opts.Created)
}

// open opens the image manifest of the layout at dir.
func open(dir, manifest string) (v1.Image, error) {
	h, err := v1.NewHash(manifest)
	if err != nil {
		return nil, fmt.Errorf("manifest %q: %w", manifest, err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: index.json: %w", dir, err)
	}
	for _, d := range im.Manifests {
		if d.Digest != h {
			continue
		}
		if d.MediaType != types.OCIManifestSchema1 && d.MediaType != types.DockerManifestSchema2 {
			return nil, fmt.Errorf("%s: media type %q is not an image manifest", manifest, d.MediaType)
		}
		return idx.Image(h)
	}
	return nil, fmt.Errorf("OCI layout %s: index.json does not list %s", dir, manifest)
}

// config is Syft's default for images, offline and independent of the host.
func config(version string) *syft.CreateSBOMConfig {
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

// encode writes s in format, with what Syft makes up per run (the time, a
// random namespace or serial number) replaced by what the manifest digest
// and created determine.
func encode(s *sbom.SBOM, format Format, manifest string, created time.Time) ([]byte, error) {
	var enc sbom.FormatEncoder
	var err error
	switch format {
	case FormatCycloneDX:
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
	stamp := created.UTC().Format(time.RFC3339)
	switch format {
	case FormatCycloneDX:
		doc["serialNumber"] = mustJSON("urn:uuid:" + uuid.NewSHA1(uuid.NameSpaceURL, []byte(manifest)).String())
		if err := patch(doc, "metadata", "timestamp", stamp); err != nil {
			return nil, err
		}
	default:
		h, _ := v1.NewHash(manifest) // checked by open
		doc["documentNamespace"] = mustJSON(NamespaceBase + h.Hex)
		if err := patch(doc, "creationInfo", "created", stamp); err != nil {
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
