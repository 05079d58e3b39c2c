package zarf_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/artifact/zarf"
)

// builtDef is a zarf.yaml as zarf package create writes it (the checksum
// filled in by zarfPackage).
const builtDef = `kind: ZarfPackageConfig
metadata:
  name: built
  version: 1.0.0
  architecture: amd64
  aggregateChecksum: %s
build:
  terminal: host
  user: me
  architecture: amd64
  timestamp: Fri, 27 Nov 2026 14:00:00 +0000
  version: v0.60.0
components:
  - name: app
    required: true
    manifests:
      - name: cfg
        namespace: app
        files:
          - cm.yaml
    files:
      - source: tool.sh
        target: /usr/local/bin/tool
        executable: true
`

func tarOf(t *testing.T, files map[string][]byte, modes map[string]int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mode := modes[n]
		if mode == 0 {
			mode = 0o600
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: mode, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[n])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zarfPackage writes a built Zarf package in Zarf v0.60.0's layout
// (zarf.yaml, checksums.txt, components/app.tar), optionally signed with
// signer, zstd-compressed, and returns its path and its files.
func zarfPackage(t *testing.T, dir string, signer *key.Private, tamper func(files map[string][]byte)) string {
	t.Helper()
	comp := tarOf(t, map[string][]byte{
		"app/manifests/cfg-0.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"###ZARF_VAR_A###\"\n"),
		"app/files/0/tool":         []byte("#!/bin/sh\necho tool\n"),
	}, map[string]int64{"app/files/0/tool": 0o700})
	files := map[string][]byte{"components/app.tar": comp, "sboms.tar": tarOf(t, map[string][]byte{"x.json": []byte("{}")}, nil)}
	var lines []string
	for n, b := range files {
		lines = append(lines, fmt.Sprintf("%x %s", sha256.Sum256(b), n))
	}
	sort.Strings(lines)
	sums := []byte(strings.Join(lines, "\n") + "\n")
	files["checksums.txt"] = sums
	files["zarf.yaml"] = []byte(fmt.Sprintf(builtDef, fmt.Sprintf("%x", sha256.Sum256(sums))))
	if signer != nil {
		sig, err := signer.SignPayload(files["zarf.yaml"])
		if err != nil {
			t.Fatal(err)
		}
		files["zarf.yaml.sig"] = []byte(base64.StdEncoding.EncodeToString(sig))
	}
	if tamper != nil {
		tamper(files)
	}
	var zbuf bytes.Buffer
	zw, _ := zstd.NewWriter(&zbuf)
	zw.Write(tarOf(t, files, nil))
	zw.Close()
	p := filepath.Join(dir, "zarf-package-built-amd64-1.0.0.tar.zst")
	if err := os.WriteFile(p, zbuf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExtractImport(t *testing.T) {
	dir := t.TempDir()
	pair, err := key.Generate([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.WriteFiles(filepath.Join(dir, "zarf.key"), filepath.Join(dir, "zarf.pub")); err != nil {
		t.Fatal(err)
	}
	priv, err := key.LoadPrivate(filepath.Join(dir, "zarf.key"), []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := artifact.LoadPublicKey(filepath.Join(dir, "zarf.pub"))
	if err != nil {
		t.Fatal(err)
	}
	archive := zarfPackage(t, dir, priv, nil)
	pkg, err := zarf.Extract(archive, filepath.Join(dir, "x"), pub)
	if err != nil {
		t.Fatal(err)
	}
	if !pkg.Signed || !pkg.Verified {
		t.Errorf("signed %v verified %v", pkg.Signed, pkg.Verified)
	}
	res, err := zarf.Import(pkg)
	if err != nil {
		t.Fatal(err)
	}
	defFile := filepath.Join(pkg.Dir, "ferry.yaml")
	if err := os.WriteFile(defFile, res.Definition, 0o600); err != nil {
		t.Fatal(err)
	}
	def, err := definition.Load(defFile)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Definition)
	}
	c := def.Components[0]
	if len(c.Manifests) != 1 || c.Manifests[0].Files[0] != "components/app/manifests/cfg-0.yaml" || c.Manifests[0].Namespace != "app" {
		t.Errorf("manifests = %+v", c.Manifests)
	}
	if len(c.Files) != 1 || c.Files[0].Source != "components/app/files/0/tool" || c.Files[0].Mode != 0o700 || c.Files[0].Target != "/usr/local/bin/tool" {
		t.Errorf("files = %+v", c.Files)
	}
	var whats []string
	for _, g := range res.Gaps {
		whats = append(whats, g.What)
	}
	joined := strings.Join(whats, "\n")
	for _, want := range []string{"a document that names no image", "###ZARF_VAR_A###", "writes it to /usr/local/bin/tool"} {
		if !strings.Contains(joined, want) {
			t.Errorf("gaps lack %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "build record") || strings.Contains(joined, "aggregateChecksum") {
		t.Errorf("a built package's own records reported:\n%s", joined)
	}
	created, err := build.Create(context.Background(), def, build.CreateOptions{Output: filepath.Join(dir, "built.tar.zst")})
	if err != nil {
		t.Fatal(err)
	}
	if created.Config.Name != "built" || created.Config.Version != "1.0.0" {
		t.Errorf("created %+v", created.Config)
	}
}

func TestExtractRefuses(t *testing.T) {
	dir := t.TempDir()
	pair, _ := key.Generate([]byte("pw"))
	pair.WriteFiles(filepath.Join(dir, "zarf.key"), filepath.Join(dir, "zarf.pub"))
	other, _ := key.Generate([]byte("pw"))
	other.WriteFiles(filepath.Join(dir, "other.key"), filepath.Join(dir, "other.pub"))
	priv, _ := key.LoadPrivate(filepath.Join(dir, "zarf.key"), []byte("pw"))
	pub, _ := artifact.LoadPublicKey(filepath.Join(dir, "zarf.pub"))
	otherPub, _ := artifact.LoadPublicKey(filepath.Join(dir, "other.pub"))
	for _, tc := range []struct {
		name   string
		signer bool
		key    *artifact.PublicKey
		tamper func(map[string][]byte)
		want   string
		is     error
	}{
		{"other key", true, otherPub, nil, "does not verify with", nil},
		{"key, unsigned", false, pub, nil, "not signed", nil},
		{"a changed file", false, nil, func(f map[string][]byte) { f["sboms.tar"] = append(f["sboms.tar"], 0) }, "sboms.tar has sha256", zarf.ErrIntegrity},
		{"a changed checksums.txt", false, nil, func(f map[string][]byte) { f["checksums.txt"] = append(f["checksums.txt"], '\n') }, "aggregateChecksum", zarf.ErrIntegrity},
		{"an extra file", false, nil, func(f map[string][]byte) { f["extra"] = []byte("x") }, "extra: not listed in checksums.txt", zarf.ErrIntegrity},
		{"a missing file", false, nil, func(f map[string][]byte) { delete(f, "sboms.tar") }, "sboms.tar: listed in checksums.txt but not in the package", zarf.ErrIntegrity},
		{"a changed zarf.yaml, signed", true, pub, func(f map[string][]byte) { f["zarf.yaml"] = append(f["zarf.yaml"], '\n') }, "does not verify", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *key.Private
			if tc.signer {
				s = priv
			}
			sub := t.TempDir()
			archive := zarfPackage(t, sub, s, tc.tamper)
			_, err := zarf.Extract(archive, filepath.Join(sub, "x"), tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A multi-part package (zarf package create --max-package-size): the
// .part000 header names the parts' count, size and sha256.
func TestExtractMultiPart(t *testing.T) {
	dir := t.TempDir()
	archive := zarfPackage(t, dir, nil, nil)
	data, _ := os.ReadFile(archive)
	os.Remove(archive)
	chunk := len(data)/3 + 1
	n := 0
	for off := 0; off < len(data); off += chunk {
		n++
		os.WriteFile(fmt.Sprintf("%s.part%03d", archive, n), data[off:min(off+chunk, len(data))], 0o644)
	}
	head, _ := json.Marshal(map[string]any{"Sha256Sum": fmt.Sprintf("%x", sha256.Sum256(data)), "Bytes": len(data), "Count": n})
	os.WriteFile(archive+".part000", head, 0o644)
	if _, err := zarf.Extract(archive+".part000", filepath.Join(dir, "x"), nil); err != nil {
		t.Fatal(err)
	}
	// A part changed: the header's sha256 no longer matches.
	os.WriteFile(archive+".part002", bytes.Repeat([]byte{0}, chunk), 0o644)
	if _, err := zarf.Extract(archive+".part000", filepath.Join(dir, "y"), nil); !errors.Is(err, zarf.ErrIntegrity) || !strings.Contains(err.Error(), "the parts hold sha256") {
		t.Errorf("a changed part: %v", err)
	}
	// A part of another size is refused at that part, before anything is
	// hashed or written; so is a header naming too many parts.
	os.WriteFile(archive+".part002", bytes.Repeat([]byte{0}, chunk-1), 0o644)
	if _, err := zarf.Extract(archive+".part000", filepath.Join(dir, "z"), nil); !errors.Is(err, zarf.ErrIntegrity) || !strings.Contains(err.Error(), ".part002 is "+fmt.Sprint(chunk-1)+" bytes") {
		t.Errorf("a part of another size: %v", err)
	}
	head, _ = json.Marshal(map[string]any{"Sha256Sum": fmt.Sprintf("%x", sha256.Sum256(data)), "Bytes": len(data), "Count": zarf.MaxParts + 1})
	os.WriteFile(archive+".part000", head, 0o644)
	if _, err := zarf.Extract(archive+".part000", filepath.Join(dir, "z"), nil); err == nil || !strings.Contains(err.Error(), "names 10,001 parts, more than 10,000") {
		t.Errorf("too many parts: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "z")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused multi-part package left %v", err)
	}
}

// TestExtractBounded: a built package is bounded as the package archive
// reader is — a zstd bomb is refused by its expansion, before it fills the
// disk, and an oversized zarf.yaml by its size — and nothing is left
// extracted beyond what was read.
func TestExtractBounded(t *testing.T) {
	dir := t.TempDir()
	// 1 GiB of zeros in one tar entry: a few hundred KiB compressed.
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	const size = 1 << 30
	if err := tw.WriteHeader(&tar.Header{Name: "images/blobs/sha256/big", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	var bomb bytes.Buffer
	zw, err := zstd.NewWriter(&bomb, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		t.Fatal(err)
	}
	for range size / len(zeros) {
		if _, err := zw.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	zw.Close()
	archive := filepath.Join(dir, "zarf-package-bomb-amd64.tar.zst")
	if err := os.WriteFile(archive, bomb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = zarf.Extract(archive, filepath.Join(dir, "x"), nil)
	if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "zstd bomb") {
		t.Fatalf("a zstd bomb of %d bytes: %v", bomb.Len(), err)
	}
	var written int64
	filepath.Walk(filepath.Join(dir, "x"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			written += fi.Size()
		}
		return nil
	})
	if limit := int64(artifact.MaxExpansion)*int64(bomb.Len()) + 1<<20; written > limit {
		t.Fatalf("%d bytes written before the refusal, more than %d", written, limit)
	}

	// A plain tar whose zarf.yaml is larger than a definition may be.
	big := tarOf(t, map[string][]byte{"zarf.yaml": bytes.Repeat([]byte("# x\n"), artifact.MaxManifestSize/4+1)}, nil)
	plain := filepath.Join(dir, "zarf-package-big-amd64.tar")
	if err := os.WriteFile(plain, big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := zarf.Extract(plain, filepath.Join(dir, "y"), nil); !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("an oversized zarf.yaml: %v", err)
	}
}
