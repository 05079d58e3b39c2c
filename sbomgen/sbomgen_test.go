package sbomgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/sbomgen"
	"github.com/ferrypkg/ferry/sbomgen/internal/imagetest"
)

// TestGenerateSPDX: the SPDX document lists the dpkg packages, the Go
// module and the OS; its time and namespace are the options' and the
// manifest's; a second run gives the same bytes.
func TestGenerateSPDX(t *testing.T) {
	dir, m, _ := imagetest.Layout(t)
	ctx := context.Background()
	opts := sbomgen.Options{Ref: "example.com/app:1.0", Created: time.Unix(1700000000, 0), ToolVersion: "test"}
	doc, err := sbomgen.Generate(ctx, dir, m.String(), opts)
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
	if want := sbomgen.NamespaceBase + m.Hex; spdx.DocumentNamespace != want {
		t.Errorf("documentNamespace %q, want %q", spdx.DocumentNamespace, want)
	}
	if spdx.CreationInfo.Created != "2023-11-14T22:13:20Z" {
		t.Errorf("created %q, want the options' time", spdx.CreationInfo.Created)
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
	for _, p := range imagetest.DpkgPackages {
		if got[p.Name] != p.Version {
			t.Errorf("dpkg package %s: version %q, want %q (packages %v)", p.Name, got[p.Name], p.Version, got)
		}
	}
	if _, ok := got[imagetest.GoModule]; !ok {
		t.Errorf("Go module %s missing (packages %v)", imagetest.GoModule, got)
	}
	if _, ok := got["stdlib"]; !ok {
		t.Errorf("Go stdlib missing (packages %v)", got)
	}
	if !strings.Contains(strings.Join(purls, " "), imagetest.OSPurl) {
		t.Errorf("no purl %s naming the OS of os-release: %v", imagetest.OSPurl, purls)
	}

	again, err := sbomgen.Generate(ctx, dir, m.String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Fatalf("a second run gave other bytes:\n%s\n%s", doc, again)
	}
}

// TestGenerateCycloneDX: the CycloneDX document lists the packages; its
// serial number derives from the manifest digest, its timestamp is the
// options'; a second run gives the same bytes.
func TestGenerateCycloneDX(t *testing.T) {
	dir, m, _ := imagetest.Layout(t)
	ctx := context.Background()
	opts := sbomgen.Options{Ref: "example.com/app:1.0", Format: sbomgen.FormatCycloneDX, Created: time.Unix(0, 0)}
	doc, err := sbomgen.Generate(ctx, dir, m.String(), opts)
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
	for _, p := range imagetest.DpkgPackages {
		if got[p.Name] != p.Version {
			t.Errorf("dpkg package %s: version %q, want %q", p.Name, got[p.Name], p.Version)
		}
	}
	again, err := sbomgen.Generate(ctx, dir, m.String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, again) {
		t.Fatal("a second run gave other bytes")
	}
}

// TestGenerateErrors: what Generate cannot describe is an error naming it.
func TestGenerateErrors(t *testing.T) {
	dir, m, idx := imagetest.Layout(t)
	ctx := context.Background()
	other := "sha256:" + strings.Repeat("0", 64)
	for _, c := range []struct {
		name, dir, manifest string
		format              sbomgen.Format
		want                string
	}{
		{"format", dir, m.String(), "xml", `unknown SBOM format "xml"`},
		{"digest", dir, "sha256:xyz", "", `manifest "sha256:xyz"`},
		{"no layout", t.TempDir(), m.String(), "", "index.json"},
		{"not listed", dir, other, "", "index.json does not list " + other},
		{"an index", dir, idx.String(), "", "is not an image manifest"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sbomgen.Generate(ctx, c.dir, c.manifest, sbomgen.Options{Format: c.format})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error with %q", err, c.want)
			}
		})
	}
}
