package advisory

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// records are hand-written OSV records, one per ecosystem rule Match keeps.
var records = map[string]string{
	"GO-1.json": `{"id":"GO-1","modified":"2024-03-01T00:00:00Z","aliases":["CVE-2021-1"],"summary":"text panics",
		"affected":[{"package":{"ecosystem":"Go","name":"golang.org/x/text"},
		"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"0.3.7"}]}],
		"ecosystem_specific":{"imports":[{"path":"golang.org/x/text/language","symbols":["Parse"]}]}}]}`,
	"GO-2.json": `{"id":"GO-2","modified":"2024-05-02T10:00:00Z","summary":"two windows",
		"affected":[{"package":{"ecosystem":"Go","name":"example.com/m"},
		"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.2.0"},{"introduced":"1.5.0"},{"fixed":"1.5.3"},{"introduced":"2.0.0"},{"last_affected":"2.1.0"}]},
		          {"type":"GIT","repo":"https://example.com/m","events":[{"introduced":"0"},{"fixed":"abcdef"}]}]}]}`,
	"GO-3.json": `{"id":"GO-3","modified":"2025-01-01T00:00:00Z","withdrawn":"2025-01-02T00:00:00Z",
		"affected":[{"package":{"ecosystem":"Go","name":"example.com/m"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"}]}]}]}`,
	"GO-4.json": `{"id":"GO-4","modified":"2024-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"Go","name":"stdlib"},
		"ranges":[{"type":"SEMVER","events":[{"introduced":"1.21.0"},{"fixed":"1.21.8"}]}]}]}`,
	"DSA-1.json": `{"id":"DSA-1","modified":"2024-02-01T00:00:00Z","aliases":["CVE-2024-9"],"summary":"openssl",
		"affected":[{"package":{"ecosystem":"Debian:12","name":"openssl"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"3.0.13-1~deb12u1"}]}]},
		            {"package":{"ecosystem":"Debian:11","name":"openssl"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1.1.1w-0+deb11u1"}]}]}]}`,
	"ALPINE-1.json": `{"id":"ALPINE-1","modified":"2024-02-01T00:00:00Z",
		"affected":[{"package":{"ecosystem":"Alpine:v3.20","name":"busybox"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1.36.1-r29"}]}]},
		            {"package":{"ecosystem":"Alpine:v3.19","name":"busybox"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1.36.1-r20"}]}]}]}`,
	"GHSA-npm.json": `{"id":"GHSA-npm","modified":"2024-02-01T00:00:00Z","database_specific":{"severity":"HIGH","cwe_ids":["CWE-1"]},
		"affected":[{"package":{"ecosystem":"npm","name":"@babel/traverse"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"7.23.2"}]}]},
		            {"package":{"ecosystem":"npm","name":"lodash"},"ranges":[{"type":"SEMVER","events":[{"introduced":"4.0.0"},{"limit":"4.17.0"}]}]}]}`,
	"PYSEC-1.json": `{"id":"PYSEC-1","modified":"2024-02-01T00:00:00Z","severity":[{"type":"CVSS_V3","score":"CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
		"affected":[{"package":{"ecosystem":"PyPI","name":"Zope.Interface"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"5.0"}]}],"versions":["4.7.1","4.7.2"]},
		            {"package":{"ecosystem":"PyPI","name":"jinja2"},"versions":["2.10.post1"]}]}`,
	"MAVEN-1.json": `{"id":"MAVEN-1","modified":"2024-02-01T00:00:00Z",
		"affected":[{"package":{"ecosystem":"Maven","name":"org.apache.logging.log4j:log4j-core"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"2.0-beta9"},{"fixed":"2.15.0"}]}]}]}`,
	"README.md": "not a record",
}

func zipOf(t testing.TB, files map[string]string) []byte {
	return zipWith(t, files, zip.Deflate)
}

// zipWith is files zipped with method (zip.Store to defeat the ratio check).
func zipWith(t testing.TB, files map[string]string, method uint16) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range sortedKeys(files) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[n]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestMatch(t *testing.T) {
	data := zipOf(t, records)
	db, err := Load(bytes.NewReader(data), int64(len(data)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if db.Len() != 8 { // GO-3 withdrawn
		t.Errorf("Len = %d, want 8", db.Len())
	}
	if want := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC); !db.Date().Equal(want) {
		t.Errorf("Date = %v, want %v (a withdrawn record is still the database's date)", db.Date(), want)
	}
	type want struct{ id, fixed string }
	tests := []struct {
		name, purl, version string
		want                []want
	}{
		{"go affected", "pkg:golang/golang.org/x/text@v0.3.5", "v0.3.5", []want{{"GO-1", "0.3.7"}}},
		{"go fixed", "pkg:golang/golang.org/x/text@v0.3.7", "v0.3.7", nil},
		{"go first window", "pkg:golang/example.com/m@v1.1.9", "v1.1.9", []want{{"GO-2", "1.2.0"}}},
		{"go between windows", "pkg:golang/example.com/m@v1.3.0", "v1.3.0", nil},
		{"go second window", "pkg:golang/example.com/m@v1.5.2", "v1.5.2", []want{{"GO-2", "1.5.3"}}},
		{"go last_affected inclusive", "pkg:golang/example.com/m@v2.1.0", "v2.1.0", []want{{"GO-2", ""}}},
		{"go past last_affected", "pkg:golang/example.com/m@v2.1.1", "v2.1.1", nil},
		{"go pseudo-version", "pkg:golang/example.com/m@v1.5.3-0.20240101000000-abcdefabcdef", "v1.5.3-0.20240101000000-abcdefabcdef", []want{{"GO-2", "1.5.3"}}},
		{"go stdlib", "pkg:golang/stdlib@go1.21.3", "go1.21.3", []want{{"GO-4", "1.21.8"}}},
		{"go unparsable", "pkg:golang/golang.org/x/text@%21%21", "!!", nil},
		{"debian 12 binary via upstream", "pkg:deb/debian/libssl3@3.0.11-1~deb12u2?arch=amd64&upstream=openssl&distro=debian-12", "3.0.11-1~deb12u2", []want{{"DSA-1", "3.0.13-1~deb12u1"}}},
		{"debian 12 fixed", "pkg:deb/debian/openssl@3.0.13-1~deb12u1?distro=debian-12", "3.0.13-1~deb12u1", nil},
		{"debian 11 release kept apart", "pkg:deb/debian/openssl@1.1.1w-0+deb11u1?distro=debian-11", "1.1.1w-0+deb11u1", nil},
		{"debian no distro: every release", "pkg:deb/debian/openssl@1.1.1n-0", "1.1.1n-0", []want{{"DSA-1", "1.1.1w-0+deb11u1"}}},
		{"alpine 3.20", "pkg:apk/alpine/busybox@1.36.1-r25?arch=x86_64&distro=alpine-3.20.1", "1.36.1-r25", []want{{"ALPINE-1", "1.36.1-r29"}}},
		{"alpine 3.19 fixed", "pkg:apk/alpine/busybox@1.36.1-r25?distro=alpine-3.19.4", "1.36.1-r25", nil},
		{"npm scoped", "pkg:npm/%40babel/traverse@7.23.0", "7.23.0", []want{{"GHSA-npm", "7.23.2"}}},
		{"npm limit", "pkg:npm/lodash@4.17.1", "4.17.1", nil},
		{"npm under limit", "pkg:npm/lodash@4.16.0", "4.16.0", []want{{"GHSA-npm", ""}}},
		{"pypi normalized name", "pkg:pypi/zope-interface@4.0", "4.0", []want{{"PYSEC-1", "5.0"}}},
		{"pypi listed version", "pkg:pypi/Jinja2@2.10.post1", "2.10.post1", []want{{"PYSEC-1", ""}}},
		{"pypi unlisted version", "pkg:pypi/jinja2@2.10", "2.10", nil},
		{"maven", "pkg:maven/org.apache.logging.log4j/log4j-core@2.14.1", "2.14.1", []want{{"MAVEN-1", "2.15.0"}}},
		{"maven before introduced", "pkg:maven/org.apache.logging.log4j/log4j-core@1.2", "1.2", nil},
		{"no purl", "", "1.0", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := db.Match(bom.Component{Name: "x", Version: tc.version, PURL: tc.purl})
			var got []want
			for _, m := range ms {
				got = append(got, want{m.ID, m.Fixed})
				if m.Installed != tc.version {
					t.Errorf("Installed = %q", m.Installed)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
	m := db.Match(bom.Component{Version: "7.0.0", PURL: "pkg:npm/%40babel/traverse@7.0.0"})
	if m[0].Severity != "HIGH" {
		t.Errorf("severity = %q, want database_specific's HIGH", m[0].Severity)
	}
	m = db.Match(bom.Component{Version: "4.0", PURL: "pkg:pypi/zope.interface@4.0"})
	if m[0].Severity == "" || m[0].Summary != "" || m[0].Ecosystem != "PyPI" {
		t.Errorf("match = %+v", m[0])
	}
	m = db.Match(bom.Component{Version: "v0.3.5", PURL: "pkg:golang/golang.org/x/text@v0.3.5"})
	if !slices.Equal(m[0].Aliases, []string{"CVE-2021-1"}) || m[0].Summary != "text panics" || m[0].Package != "golang.org/x/text" {
		t.Errorf("match = %+v", m[0])
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	for n, s := range records {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	db, err := LoadDir(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if db.Len() != 8 {
		t.Errorf("Len = %d, want 8", db.Len())
	}
}
