package sbom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/memory"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/sbom"
	"github.com/ferrypkg/ferry/internal/fixture"
)

// fixtureImage pushes the SBOM fixture image (dpkg status with two
// packages, os-release, a Go binary with build info) into a memory store.
func fixtureImage(t *testing.T) (*memory.Store, ocispec.Descriptor) {
	t.Helper()
	ctx := context.Background()
	bin, err := fixture.GoBinary(ctx, t.TempDir(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	desc, err := fixture.SBOMImage(ctx, mem, fixture.Platform("linux", "amd64", ""), bin)
	if err != nil {
		t.Fatal(err)
	}
	return mem, desc
}

// TestGenerateSPDX: the SPDX document lists the dpkg packages, the Go
// module and the OS; its time and namespace are the request's and the
// manifest's; a second run gives the same bytes.
func TestGenerateSPDX(t *testing.T) {
	mem, desc := fixtureImage(t)
	ctx := context.Background()
	epoch := time.Unix(1700000000, 0)
	req := artifact.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc, Platform: "linux/amd64", Created: epoch}
	gen := sbom.Generator{ToolVersion: "test"}
	doc, err := gen.GenerateSBOM(ctx, mem, req)
	if err != nil {
		t.Fatal(err)
	}
	var spdx struct {
		SPDXVersion       string `json:"spdxVersion"`
		DocumentNamespace string `json:"documentNamespace"`
		CreationInfo      struct {
			Created  string   `json:"created"`
			Creators []string `json:"creators"`
		} `json:"creationInfo"`
		Packages []struct {
			Name         string `json:"name"`
			VersionInfo  string `json:"versionInfo"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(doc, &spdx); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if !strings.HasPrefix(spdx.SPDXVersion, "SPDX-2.") {
		t.Errorf("spdxVersion %q", spdx.SPDXVersion)
	}
	if want := sbom.NamespaceBase + desc.Digest.Encoded(); spdx.DocumentNamespace != want {
		t.Errorf("documentNamespace %q, want %q", spdx.DocumentNamespace, want)
	}
	if spdx.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %q, want the request's time", spdx.CreationInfo.Created)
	}
	if !strings.Contains(strings.Join(spdx.CreationInfo.Creators, ","), "Tool: ferry-test") {
		t.Errorf("creators %v", spdx.CreationInfo.Creators)
	}
	got := map[string]string{}
	var purls []string
	for _, p := range spdx.Packages {
		got[p.Name] = p.VersionInfo
		for _, r := range p.ExternalRefs {
			purls = append(purls, r.Locator)
		}
	}
	for _, p := range fixture.DpkgPackages {
		if got[p.Name] != p.Version {
			t.Errorf("dpkg package %s: version %q, want %q (packages %v)", p.Name, got[p.Name], p.Version, got)
		}
	}
	if _, ok := got[fixture.GoModule]; !ok {
		t.Errorf("Go module %s missing (packages %v)", fixture.GoModule, got)
	}
	if _, ok := got["stdlib"]; !ok {
		t.Errorf("Go stdlib missing (packages %v)", got)
	}
	if want := "pkg:deb/debian/libferry1@1.2.3-1?arch=amd64&distro=debian-12"; !strings.Contains(strings.Join(purls, " "), want) {
		t.Errorf("no purl %s naming the OS of os-release: %v", want, purls)
	}

	again, err := gen.GenerateSBOM(ctx, mem, req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Fatalf("a second run gave other bytes:\n%s\n%s", doc, again)
	}
}

// TestGenerateCycloneDX: the CycloneDX document lists the packages; its
// serial number derives from the manifest digest, its timestamp is the
// request's; a second run gives the same bytes.
func TestGenerateCycloneDX(t *testing.T) {
	mem, desc := fixtureImage(t)
	ctx := context.Background()
	req := artifact.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc, Platform: "linux/amd64", Format: artifact.SBOMFormatCycloneDX, Created: time.Unix(0, 0)}
	doc, err := sbom.Generator{}.GenerateSBOM(ctx, mem, req)
	if err != nil {
		t.Fatal(err)
	}
	var cdx struct {
		BOMFormat    string `json:"bomFormat"`
		SerialNumber string `json:"serialNumber"`
		Metadata     struct {
			Timestamp string `json:"timestamp"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &cdx); err != nil {
		t.Fatal(err)
	}
	if cdx.BOMFormat != "CycloneDX" || !strings.HasPrefix(cdx.SerialNumber, "urn:uuid:") || cdx.Metadata.Timestamp != "1970-01-01T00:00:00Z" {
		t.Errorf("bomFormat %q serialNumber %q timestamp %q", cdx.BOMFormat, cdx.SerialNumber, cdx.Metadata.Timestamp)
	}
	got := map[string]string{}
	for _, c := range cdx.Components {
		got[c.Name] = c.Version
	}
	for _, p := range fixture.DpkgPackages {
		if got[p.Name] != p.Version {
			t.Errorf("dpkg package %s: version %q, want %q", p.Name, got[p.Name], p.Version)
		}
	}
	again, err := sbom.Generator{}.GenerateSBOM(ctx, mem, req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Fatal("a second run gave other bytes")
	}
}

// tamperFetcher returns a layer whose bytes differ from its digest.
type tamperFetcher struct{ *memory.Store }

func (f tamperFetcher) Fetch(ctx context.Context, d ocispec.Descriptor) (io.ReadCloser, error) {
	rc, err := f.Store.Fetch(ctx, d)
	if err != nil || d.MediaType != ocispec.MediaTypeImageLayerGzip {
		return rc, err
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	data[len(data)/2] ^= 1
	return io.NopCloser(bytes.NewReader(data)), nil
}

// TestGenerateChecksBlobs: a layer that does not match its digest is an
// error, not an SBOM of other content.
func TestGenerateChecksBlobs(t *testing.T) {
	mem, desc := fixtureImage(t)
	_, err := sbom.Generator{}.GenerateSBOM(context.Background(), tamperFetcher{mem}, artifact.SBOMRequest{Ref: "example.com/app:1.0", Manifest: desc})
	if err == nil || !strings.Contains(err.Error(), "mismatch") {
		t.Fatalf("a tampered layer: %v", err)
	}
}
