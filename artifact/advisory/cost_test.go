package advisory

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// matchTime is the mean time of Match(c) over a few hundred milliseconds.
func matchTime(db *DB, c bom.Component) time.Duration {
	start := time.Now()
	n := 0
	for time.Since(start) < 200*time.Millisecond {
		db.Match(c)
		n++
	}
	return time.Since(start) / time.Duration(n)
}

// TestHostileMatchCost: records within every limit cost Match little per
// component. Before: 21 s a component for 200 events of 16 KiB versions
// (osv-scalibr's parsers are quadratic in a version's length, and every
// event was parsed at every Match), 13 ms for 10,000 events, 65 µs for
// 100,000 listed versions; an audit matches 10^5 components.
func TestHostileMatchCost(t *testing.T) {
	long := "1" + strings.Repeat("0", 16000)
	var ev []string
	for range 200 {
		ev = append(ev, `{"introduced":"`+long+`"}`)
	}
	ev = append(ev, `{"introduced":"0"}`)
	rec1 := `{"id":"LONG","affected":[{"package":{"ecosystem":"npm","name":"x"},"ranges":[{"type":"ECOSYSTEM","events":[` + strings.Join(ev, ",") + `]}]}]}`
	ev = nil
	for i := range 5000 {
		ev = append(ev, fmt.Sprintf(`{"introduced":"%d.0.0"},{"fixed":"%d.0.1"}`, i, i))
	}
	rec2 := `{"id":"MANY","affected":[{"package":{"ecosystem":"npm","name":"y"},"ranges":[{"type":"ECOSYSTEM","events":[` + strings.Join(ev, ",") + `]}]}]}`
	var vs []string
	for i := range 100_000 {
		vs = append(vs, fmt.Sprintf(`"%d.%d.7"`, i/1000, i%1000))
	}
	rec3 := `{"id":"VERS","affected":[{"package":{"ecosystem":"npm","name":"z"},"versions":[` + strings.Join(vs, ",") + `]}]}`
	data := zipWith(t, map[string]string{"a.json": rec1, "b.json": rec2, "c.json": rec3}, 8)
	start := time.Now()
	db, err := load(t, data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded in %v", time.Since(start))
	for _, tc := range []struct {
		name, version string
		want          []string
		max           time.Duration
	}{
		// A 16 KiB event is no version: the range is the "0" event's.
		{"x", "5.0.0", []string{"LONG"}, 10 * time.Millisecond},
		{"y", "4999.0.0", []string{"MANY"}, 20 * time.Millisecond},
		{"y", "4999.0.1", nil, 20 * time.Millisecond},
		{"z", "99.999.7", []string{"VERS"}, time.Millisecond},
		{"z", "99.999.8", nil, time.Millisecond},
	} {
		c := bom.Component{Name: tc.name, Version: tc.version, PURL: "pkg:npm/" + tc.name + "@" + tc.version}
		var got []string
		for _, m := range db.Match(c) {
			got = append(got, m.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s@%s: %v, want %v", tc.name, tc.version, got, tc.want)
		}
		if d := matchTime(db, c); d > tc.max {
			t.Errorf("%s@%s: Match takes %v, want at most %v", tc.name, tc.version, d, tc.max)
		}
	}
}

// TestMatchEcosystems: what real SBOMs record against real records'
// spellings: a Debian binary package by its source (the purl's upstream
// qualifier, whose version is the source's), epochs, Alpine revisions,
// npm pre-releases, Go's +incompatible, and events out of order.
func TestMatchEcosystems(t *testing.T) {
	recs := map[string]string{
		"DEB.json":      `{"id":"DEB","affected":[{"package":{"ecosystem":"Debian:12","name":"src"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"2.0-3"}]}]}]}`,
		"EPOCH.json":    `{"id":"EPOCH","affected":[{"package":{"ecosystem":"Debian:12","name":"ep"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1:2.3-4"}]}]}]}`,
		"APK.json":      `{"id":"APK","affected":[{"package":{"ecosystem":"Alpine:v3.20","name":"musl"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"0"},{"fixed":"1.2.5-r1"}]}]}]}`,
		"NPM.json":      `{"id":"NPM","affected":[{"package":{"ecosystem":"npm","name":"pre"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"2.0.0"}]}]}]}`,
		"GOINC.json":    `{"id":"GOINC","affected":[{"package":{"ecosystem":"Go","name":"github.com/docker/docker"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"20.10.11+incompatible"}]}]}]}`,
		"UNSORTED.json": `{"id":"UNSORTED","affected":[{"package":{"ecosystem":"npm","name":"u"},"ranges":[{"type":"SEMVER","events":[{"fixed":"1.5.0"},{"introduced":"2.0.0"},{"introduced":"1.0.0"},{"fixed":"2.5.0"}]}]}]}`,
		"LAST.json":     `{"id":"LAST","affected":[{"package":{"ecosystem":"PyPI","name":"last"},"ranges":[{"type":"ECOSYSTEM","events":[{"introduced":"1.0"},{"last_affected":"1.4"}]}]}]}`,
	}
	data := zipOf(t, recs)
	db, err := load(t, data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, purl, version string
		want                string
	}{
		// The binary's version is below the fix, its source's above it:
		// the source's decides, as the advisory names the source.
		{"debian binary, source fixed", "pkg:deb/debian/libsrc1@1.5-1?arch=amd64&distro=debian-12&upstream=src%402.1-1", "1.5-1", ""},
		{"debian binary, source affected", "pkg:deb/debian/libsrc1@2.1-1?arch=amd64&distro=debian-12&upstream=src%402.0-2", "2.1-1", "DEB"},
		{"debian binary, source of its version", "pkg:deb/debian/libsrc1@1.9-1?distro=debian-12&upstream=src", "1.9-1", "DEB"},
		{"debian epoch below", "pkg:deb/debian/ep@1:2.3-3?distro=debian-12", "1:2.3-3", "EPOCH"},
		{"debian no epoch is epoch 0", "pkg:deb/debian/ep@9.9-9?distro=debian-12", "9.9-9", "EPOCH"},
		{"debian epoch fixed", "pkg:deb/debian/ep@1:2.3-4?distro=debian-12", "1:2.3-4", ""},
		{"alpine revision below", "pkg:apk/alpine/musl@1.2.5-r0?distro=alpine-3.20.3", "1.2.5-r0", "APK"},
		{"alpine revision 10 above 1", "pkg:apk/alpine/musl@1.2.5-r10?distro=alpine-3.20.3", "1.2.5-r10", ""},
		{"npm pre-release below its release", "pkg:npm/pre@2.0.0-rc.1", "2.0.0-rc.1", "NPM"},
		{"npm release", "pkg:npm/pre@2.0.0", "2.0.0", ""},
		{"go +incompatible below", "pkg:golang/github.com/docker/docker@v20.10.7%2Bincompatible", "v20.10.7+incompatible", "GOINC"},
		{"go +incompatible fixed", "pkg:golang/github.com/docker/docker@v20.10.11%2Bincompatible", "v20.10.11+incompatible", ""},
		{"unsorted events: first window", "pkg:npm/u@1.2.0", "1.2.0", "UNSORTED"},
		{"unsorted events: between", "pkg:npm/u@1.7.0", "1.7.0", ""},
		{"unsorted events: second window", "pkg:npm/u@2.1.0", "2.1.0", "UNSORTED"},
		{"last_affected itself", "pkg:pypi/last@1.4", "1.4", "LAST"},
		{"last_affected, PyPI spelling", "pkg:pypi/last@1.4.0", "1.4.0", "LAST"},
		{"past last_affected", "pkg:pypi/last@1.4.1", "1.4.1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			for _, m := range db.Match(bom.Component{Version: tc.version, PURL: tc.purl}) {
				got += m.ID
			}
			if got != tc.want {
				t.Errorf("Match = %q, want %q", got, tc.want)
			}
		})
	}
}
