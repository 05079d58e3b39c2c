package wire_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// allocated is what f allocates, in bytes, and how long it takes.
func allocated(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// many is a JSON array of n copies of item.
func many(item string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

// TestDecodeBounds: a report or desired state of 10⁶ tiny entries within
// its byte bound is refused before the entries are decoded: in one
// sentence, allocating a small multiple of its size (decoded, 10⁶ empty
// packages cost 800 MiB), and each bound holds exactly.
func TestDecodeBounds(t *testing.T) {
	n := (wire.MaxReport - 64) / 3
	for _, tc := range []struct {
		name, json string
		into       any
		says       string
	}{
		{"packages", `{"member":"m","packages":` + many("{}", n) + `}`, new(wire.Report), "the report lists 1398080 packages, more than 256"},
		{"packages given twice", `{"packages":[],"packages":` + many("{}", n) + `,"packages":[]}`, new(wire.Report), "the report lists 1398080 packages, more than 256"},
		{"repositories", `{"member":"m","repositories":{` + strings.TrimSuffix(strings.Repeat(`"a":0,`, n/2), ",") + `}}`, new(wire.Report), "the report carries receipts of 699040 repositories, more than 256"},
		{"labels", `{"member":"m","labels":{` + strings.TrimSuffix(strings.Repeat(`"a":"",`, 65), ",") + `}}`, new(wire.Report), "the report has 65 labels, more than 64"},
		{"desired packages", `{"packages":` + many("{}", n) + `}`, new(wire.Desired), "the desired state lists 1398080 packages, more than 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			bytes, took := allocated(func() { err = json.Unmarshal([]byte(tc.json), tc.into) })
			var be *wire.BoundError
			if !errors.As(err, &be) || err.Error() != tc.says {
				t.Fatalf("%v, want %q", err, tc.says)
			}
			t.Logf("%d bytes refused in %v, %d MiB allocated", len(tc.json), took, bytes>>20)
			if limit := uint64(4*len(tc.json)) + 1<<20; bytes > limit {
				t.Errorf("allocated %d bytes refusing %d, more than %d", bytes, len(tc.json), limit)
			}
		})
	}

	// At the bounds: taken, and decoded as encoding/json decodes them.
	var r wire.Report
	at := `{"member":"m","packages":` + many(`{"name":"a,]}\"{["}`, wire.MaxPackages) + `,"labels":{` +
		strings.TrimSuffix(strings.Repeat(`"k":"v",`, wire.MaxLabels), ",") + `},"repositories":{}}`
	if err := json.Unmarshal([]byte(at), &r); err != nil || len(r.Packages) != wire.MaxPackages || r.Packages[0].Name != `a,]}"{[` || r.Repositories == nil {
		t.Fatalf("a report at its bounds: %v (%d packages)", err, len(r.Packages))
	}
	var d wire.Desired
	if err := json.Unmarshal([]byte(`{"generation":"g","packages":`+many(`{"name":"a"}`, wire.MaxPackages)+`}`), &d); err != nil || len(d.Packages) != wire.MaxPackages || d.Generation != "g" {
		t.Fatalf("a desired state at its bound: %v", err)
	}
	for _, bad := range []string{`{"packages":5}`, `{"packages":"x"}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s: taken", bad)
		}
	}
}

// TestOpenReportBomb: a report file of the largest size carrying 24
// million empty packages is refused before its signature is looked at,
// within a second or so and a few times its size of memory (before the
// count came first: 27 s and 5.5 GiB).
func TestOpenReportBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("a 96 MiB report")
	}
	payload := []byte(`{"member":"m","packages":` + many("{}", (wire.MaxReportFile/4*3-1024)/3) + `}`)
	data, err := json.Marshal(wire.SignedReport{MediaType: wire.MediaTypeReport, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	payload = nil
	bytes, took := allocated(func() { _, _, err = wire.OpenReport(data) })
	if err == nil || !strings.Contains(err.Error(), "packages, more than 256") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("OpenReport: %v", err)
	}
	t.Logf("%d MiB refused in %v, %d MiB allocated: %v", len(data)>>20, took, bytes>>20, err)
	if limit := uint64(3 * len(data)); bytes > limit {
		t.Errorf("allocated %d MiB refusing %d MiB", bytes>>20, len(data)>>20)
	}
}

// TestOpenReportStrict: a report file is the three fields of a
// SignedReport, as encoding/json matches them, and nothing else.
func TestOpenReportStrict(t *testing.T) {
	payload := `"` + base64.StdEncoding.EncodeToString([]byte(`{"member":"m"}`)) + `"`
	for _, tc := range []struct{ file, says string }{
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload + `,"signature":""}`, ""},
		{`{"MediaType":"` + wire.MediaTypeReport + `","PAYLOAD":` + payload + `}`, ""},
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload + `,"extra":{"a":[1,"b"]}}`, `unknown field "extra"`},
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload + `,"p\u0061yload2":1}`, `unknown field "payload2"`},
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload + `} {}`, "invalid character"},
		{`[]`, "cannot unmarshal array"},
	} {
		_, _, err := wire.OpenReport([]byte(tc.file))
		if (tc.says == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%s: %v, want %q", tc.file, err, tc.says)
		}
	}
}

// TestOpenReportNamesLongStringsInShort: a report file's media type, member
// or unknown field of 1 MiB is refused in at most 512 bytes naming it.
func TestOpenReportNamesLongStringsInShort(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	payload := func(p string) string { return `"` + base64.StdEncoding.EncodeToString([]byte(p)) + `"` }
	for _, tc := range []struct{ file, says string }{
		{`{"mediaType":"` + long + `","payload":` + payload(`{"member":"m"}`) + `}`, "not a signed fleet report: media type"},
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload(`{"member":"`+long+`"}`) + `}`, "the report names no valid member"},
		{`{"mediaType":"` + wire.MediaTypeReport + `","payload":` + payload(`{"member":"m"}`) + `,"` + long + `":1}`, "unknown field"},
	} {
		_, _, err := wire.OpenReport([]byte(tc.file))
		if err == nil || len(err.Error()) > 512 || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%.200v (%d bytes), want at most 512 naming %q", err, len(fmt.Sprint(err)), tc.says)
		}
	}
}
