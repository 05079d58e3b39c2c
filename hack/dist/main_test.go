package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stage writes a staged folder with files (name → body); a name ending in
// "*" is an executable (without the star).
func stage(t *testing.T, dir string, files map[string]string, execMode, fileMode os.FileMode, mtime time.Time) {
	t.Helper()
	for name, body := range files {
		mode := fileMode
		if strings.HasSuffix(name, "*") {
			name, mode = strings.TrimSuffix(name, "*"), execMode
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeHelper writes a stand-in for ferry-sbom: it checks the layout it is
// given holds the manifest and prints a small document naming its flags.
func fakeHelper(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ferry-sbom")
	script := `#!/bin/sh
set -e
while [ $# -gt 0 ]; do
  case $1 in
    --layout) layout=$2;; --manifest) manifest=$2;; --created) created=$2;; --ref) ref=$2;; --tool-version) tv=$2;; --format) format=$2;;
  esac
  shift 2
done
test -f "$layout/oci-layout"
grep -q "$manifest" "$layout/index.json"
test -f "$layout/blobs/sha256/${manifest#sha256:}"
case $TMPDIR in /*ferry-dist-sbom-*) ;; *) echo "TMPDIR $TMPDIR" >&2; exit 1;; esac
printf '{"created":"%s","format":"%s","layers":%s,"packages":[{"SPDXID":"SPDXRef-DocumentRoot-Image-x","externalRefs":[{"referenceLocator":"pkg:oci/x"}],"name":"%s","versionInfo":"%s"},{"SPDXID":"SPDXRef-Package-go-module-m","name":"oras.land/oras-go/v2","versionInfo":"v2.6.4"},{"SPDXID":"SPDXRef-Package-go-module-f","externalRefs":[{"referenceLocator":"pkg:golang/github.com/ferrypkg/ferry/sbomgen","referenceType":"purl"}],"name":"github.com/ferrypkg/ferry/sbomgen","versionInfo":"UNKNOWN"}],"tool":"%s"}\n' \
  "$created" "$format" "$(cat "$layout/blobs/sha256/${manifest#sha256:}")" "$ref" "$manifest" "$tv"
`
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func readArchive(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header: mtime %v, name %q", zr.ModTime, zr.Name)
	}
	tr := tar.NewReader(zr)
	var entries []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, fmt.Sprintf("%s %o %d:%d %s:%s %d %q", h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime.Unix(), body))
	}
}

func TestRun(t *testing.T) {
	files := map[string]string{"ferry*": "front", "ferry-full*": "full", "README.md": "# ferry\n", "docs/a.md": "a\n"}
	helper := fakeHelper(t)
	var archives [2][]byte
	for i, mode := range []struct {
		exec, file os.FileMode
		mtime      time.Time
	}{{0o755, 0o644, time.Unix(1, 0)}, {0o700, 0o600, time.Now()}} {
		root, out := t.TempDir(), t.TempDir()
		st := filepath.Join(root, "ferry_v1.0.0_linux_arm64")
		stage(t, st, files, mode.exec, mode.file, mode.mtime)
		var table bytes.Buffer
		if err := run(context.Background(), []string{"-o", out, "-epoch", "1700000000", "-sbom", helper, "-version", "v1.0.0+dirty", st}, &table); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "ferry_v1.0.0_linux_arm64.tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		archives[i] = b
		if i > 0 {
			continue
		}
		got := readArchive(t, filepath.Join(out, "ferry_v1.0.0_linux_arm64.tar.gz"))
		want := []string{
			`README.md 644 0:0 root:root 1700000000 "# ferry\n"`,
			`docs/ 755 0:0 root:root 1700000000 ""`,
			`docs/a.md 644 0:0 root:root 1700000000 "a\n"`,
			`ferry 755 0:0 root:root 1700000000 "front"`,
			`ferry-full 755 0:0 root:root 1700000000 "full"`,
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// The SBOM: made over a layout whose layer is the archive.
		sbom, err := os.ReadFile(filepath.Join(out, "ferry_v1.0.0_linux_arm64.spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		for _, s := range []string{
			`"format":"spdx-json"`, `"created":"2023-11-14T22:13:20Z"`, `"tool":"v1.0.0+dirty"`,
			// The layer is the archive.
			`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:` + hex.EncodeToString(sum[:]),
			// The root package describes the archive; the others are kept.
			`{"SPDXID":"SPDXRef-DocumentRoot-Image-x","checksums":[{"algorithm":"SHA256","checksumValue":"` + hex.EncodeToString(sum[:]) + `"}],"name":"ferry_v1.0.0_linux_arm64.tar.gz","primaryPackagePurpose":"ARCHIVE","versionInfo":"v1.0.0+dirty"}`,
			`{"SPDXID":"SPDXRef-Package-go-module-m","name":"oras.land/oras-go/v2","versionInfo":"v2.6.4"}`,
			// ferry's own modules get the version.
			`{"SPDXID":"SPDXRef-Package-go-module-f","externalRefs":[{"referenceLocator":"pkg:golang/github.com/ferrypkg/ferry/sbomgen@v1.0.0%2Bdirty","referenceType":"purl"}],"name":"github.com/ferrypkg/ferry/sbomgen","versionInfo":"v1.0.0+dirty"}`,
		} {
			if !bytes.Contains(sbom, []byte(s)) {
				t.Errorf("SBOM %s does not hold %s", sbom, s)
			}
		}
		sbomSum := sha256.Sum256(sbom)
		sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
		if err != nil {
			t.Fatal(err)
		}
		wantSums := hex.EncodeToString(sbomSum[:]) + "  ferry_v1.0.0_linux_arm64.spdx.json\n" + hex.EncodeToString(sum[:]) + "  ferry_v1.0.0_linux_arm64.tar.gz\n"
		if string(sums) != wantSums {
			t.Errorf("checksums.txt:\n%s\nwant:\n%s", sums, wantSums)
		}
		if !strings.Contains(table.String(), "ferry_v1.0.0_linux_arm64.tar.gz") {
			t.Errorf("table:\n%s", table.String())
		}
		left, err := os.ReadDir(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 3 {
			t.Errorf("%d files in the output folder, want 3 (archive, SBOM, checksums.txt)", len(left))
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("the same files with other modes and times gave other archive bytes")
	}
}

func TestRunRefused(t *testing.T) {
	helper := fakeHelper(t)
	link := t.TempDir()
	if err := os.Symlink("/etc/passwd", filepath.Join(link, "passwd")); err != nil {
		t.Fatal(err)
	}
	badName := t.TempDir()
	failing := filepath.Join(t.TempDir(), "ferry-sbom")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'ferry-sbom: no layers' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rootless := filepath.Join(t.TempDir(), "ferry-sbom")
	if err := os.WriteFile(rootless, []byte("#!/bin/sh\necho '{\"packages\":[{\"SPDXID\":\"SPDXRef-Package-x\"}]}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(t.TempDir(), "x_linux_amd64")
	stage(t, ok, map[string]string{"a": "a"}, 0o755, 0o644, time.Unix(0, 0))
	withLink := filepath.Join(t.TempDir(), "x_linux_amd64")
	if err := os.Rename(link, withLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no epoch", []string{"-o", t.TempDir(), "-sbom", helper, ok}, "usage"},
		{"no output folder", []string{"-epoch", "0", ok}, "usage"},
		{"no folder", []string{"-o", t.TempDir(), "-epoch", "0", "-sbom", helper}, "no folder"},
		{"a name without its platform", []string{"-o", t.TempDir(), "-epoch", "0", "-sbom", helper, badName}, "<name>_<os>_<arch>"},
		{"a symbolic link", []string{"-o", t.TempDir(), "-epoch", "0", "-sbom", helper, withLink}, "passwd: L"},
		{"the helper fails", []string{"-o", t.TempDir(), "-epoch", "0", "-sbom", failing, ok}, "ferry-sbom: no layers"},
		{"an SBOM without its root", []string{"-o", t.TempDir(), "-epoch", "0", "-sbom", rootless, ok}, "0 packages named SPDXRef-DocumentRoot-…, want 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestRunWithoutSBOM(t *testing.T) {
	out := t.TempDir()
	st := filepath.Join(t.TempDir(), "ferry-cluster_v1_linux_amd64")
	stage(t, st, map[string]string{"ferry-linux-amd64*": "agent"}, 0o755, 0o644, time.Unix(0, 0))
	if err := run(context.Background(), []string{"-o", out, "-epoch", "0", st}, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "ferry-cluster_v1_linux_amd64.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]) + "  ferry-cluster_v1_linux_amd64.tar.gz\n"; string(sums) != want {
		t.Errorf("checksums.txt %q, want %q", sums, want)
	}
	if got := readArchive(t, filepath.Join(out, "ferry-cluster_v1_linux_amd64.tar.gz")); len(got) != 1 || got[0] != `ferry-linux-amd64 755 0:0 root:root 0 "agent"` {
		t.Errorf("entries %q", got)
	}
}
