package advisory

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"
)

// load loads data as a zip with lim, and checks that a refusal is one line.
func load(t *testing.T, data []byte, lim Limits) (*DB, error) {
	t.Helper()
	db, err := Load(bytes.NewReader(data), int64(len(data)), lim)
	if err != nil && strings.Contains(err.Error(), "\n") {
		t.Errorf("refusal of more than one line: %q", err)
	}
	return db, err
}

// eocd is a zip that is only an end of central directory record claiming
// entries entries (zip64 when entries does not fit 16 bits).
func eocd(entries uint64) []byte {
	var b []byte
	if entries < 0xffff {
		e := make([]byte, 22)
		binary.LittleEndian.PutUint32(e, 0x06054b50)
		binary.LittleEndian.PutUint16(e[8:], uint16(entries))
		binary.LittleEndian.PutUint16(e[10:], uint16(entries))
		binary.LittleEndian.PutUint32(e[12:], uint32(entries*46))
		return e
	}
	z := make([]byte, 56)
	binary.LittleEndian.PutUint32(z, 0x06064b50)
	binary.LittleEndian.PutUint64(z[4:], 44)
	binary.LittleEndian.PutUint64(z[24:], entries)
	binary.LittleEndian.PutUint64(z[32:], entries)
	binary.LittleEndian.PutUint64(z[40:], entries*46)
	b = append(b, z...)
	l := make([]byte, 20)
	binary.LittleEndian.PutUint32(l, 0x07064b50)
	binary.LittleEndian.PutUint64(l[8:], 0)
	binary.LittleEndian.PutUint32(l[16:], 1)
	b = append(b, l...)
	e := make([]byte, 22)
	binary.LittleEndian.PutUint32(e, 0x06054b50)
	binary.LittleEndian.PutUint16(e[8:], 0xffff)
	binary.LittleEndian.PutUint16(e[10:], 0xffff)
	binary.LittleEndian.PutUint32(e[12:], 0xffffffff)
	binary.LittleEndian.PutUint32(e[16:], 0xffffffff)
	return append(b, e...)
}

func TestHostileZipDirectory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		lim     Limits
		wantErr string
	}{
		{"a million and one entries", eocd(1_000_001), Limits{}, "zip entries: 1000001, more than 1000000"},
		{"a million entries, limit lowered", eocd(1_000_000), Limits{MaxRecords: 999_999}, "zip entries: 1000000, more than 999999"},
		{"2^40 entries (zip64)", eocd(1 << 40), Limits{}, "zip entries: 1099511627776"},
		{"empty", nil, Limits{}, "not a zip"},
		{"garbage", bytes.Repeat([]byte("PK\x05\x06"), 5), Limits{}, "not a zip"},
		{"larger than MaxBytes", make([]byte, 2048), Limits{MaxBytes: 1024}, "bytes of the zip: 2048, more than 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := load(t, tc.data, tc.lim)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
				t.Errorf("refused after allocating %d bytes", a)
			}
		})
	}
}

// goRecord is an OSV record of id with body spliced into its affected entry.
func goRecord(id, affected string) string {
	return fmt.Sprintf(`{"id":%q,"modified":"2024-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"Go","name":"example.com/m"},%s}]}`, id, affected)
}

func TestHostileRecords(t *testing.T) {
	events := strings.Repeat(`{"introduced":"1.0.0"},{"fixed":"1.0.1"},`, 50_000)
	versions := strings.Repeat(`"1.0.0",`, 200_000)
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"10^5 events", goRecord("HOSTILE-1", `"ranges":[{"type":"SEMVER","events":[`+events+`{"fixed":"2"}]}]`), "advisory HOSTILE-1: range events: 100001, more than 10000"},
		{"10^5 events over ranges", goRecord("HOSTILE-2", `"ranges":[`+strings.Repeat(`{"type":"SEMVER","events":[{"introduced":"0"}]},`, 20_000)+`{"type":"SEMVER","events":[]}]`), "advisory HOSTILE-2: range events: 10001, more than 10000"},
		{"2*10^5 versions", goRecord("HOSTILE-3", `"versions":[`+versions+`"2"]`), "advisory HOSTILE-3: versions: 200001, more than 100000"},
		{"1 MiB version", goRecord("HOSTILE-4", `"versions":["`+strings.Repeat("1", 1<<20)+`"]`), "advisory HOSTILE-4: version length: 1048576, more than 16384"},
		{"1 MiB fixed", goRecord("HOSTILE-5", `"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"`+strings.Repeat("9", 1<<20)+`"}]}]`), "advisory HOSTILE-5: version length"},
		{"10^5 affected", `{"id":"HOSTILE-6","affected":[` + strings.Repeat(`{},`, 100_000) + `{}]}`, "advisory HOSTILE-6: affected entries: 100001, more than 10000"},
		{"malformed", `{"id":"X","affected":[`, `"bad.json": not an OSV record: unexpected end of JSON input`},
		{"no id", `{"affected":[]}`, `"bad.json": not an OSV record: no id`},
		{"not an object", `[1,2,3]`, `"bad.json": not an OSV record: json: cannot unmarshal array`},
		{"5 MiB record", `{"id":"X","summary":"` + strings.Repeat("a", 5<<20) + `"}`, `advisory "bad.json": bytes: 5242903, more than 4194304`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := zipWith(t, map[string]string{"bad.json": tc.data}, zip.Store)
			_, err := load(t, data, Limits{})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %.300v, want %q", err, tc.wantErr)
			}
			if len(err.Error()) > 300 {
				t.Errorf("refusal of %d bytes", len(err.Error()))
			}
		})
	}
}

// deflated is data compressed as a zip entry holds it.
func deflated(t *testing.T, data []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	w.Write(data)
	w.Close()
	return buf.Bytes()
}

func TestHostileZipBomb(t *testing.T) {
	t.Run("many entries each within the record bound", func(t *testing.T) {
		files := map[string]string{}
		for i := range 64 {
			files[fmt.Sprintf("r%d.json", i)] = `{"id":"X","summary":"` + strings.Repeat(" ", 3<<20) + `"}`
		}
		data := zipOf(t, files)
		_, err := load(t, data, Limits{})
		if err == nil || !strings.Contains(err.Error(), "more than 100 times its size") {
			t.Fatalf("err = %v", err)
		}
	})
	lie := func(t *testing.T, declared uint64, actual []byte) error {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, err := zw.CreateRaw(&zip.FileHeader{Name: "lie.json", Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(actual),
			CompressedSize64: uint64(len(deflated(t, actual))), UncompressedSize64: declared})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(deflated(t, actual))
		zw.Close()
		_, err = load(t, buf.Bytes(), Limits{})
		return err
	}
	t.Run("an entry larger than it declares", func(t *testing.T) {
		err := lie(t, 100, []byte(`{"id":"X","summary":"`+strings.Repeat(" ", 1<<20)+`"}`))
		if !errors.Is(err, zip.ErrFormat) {
			t.Fatalf("err = %v, want zip.ErrFormat", err)
		}
	})
	t.Run("an entry declaring a gigabyte", func(t *testing.T) {
		err := lie(t, 1<<30, []byte(`{"id":"X"}`))
		if err == nil || !strings.Contains(err.Error(), "more than 100 times its size") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestHostileNames(t *testing.T) {
	files := map[string]string{
		"../../../../tmp/evil.json": `{"id":"A","modified":"2024-01-01T00:00:00Z"}`,
		"/etc/evil.json":            `{"id":"B","modified":"2024-01-01T00:00:00Z"}`,
		"dir/":                      "",
		"C:\\x.json":                `{"id":"C","modified":"2024-01-01T00:00:00Z"}`,
	}
	data := zipOf(t, files)
	db, err := load(t, data, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if db.Len() != 3 {
		t.Errorf("Len = %d, want 3: names are only names", db.Len())
	}
}
