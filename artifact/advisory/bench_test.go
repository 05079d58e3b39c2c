package advisory

import (
	"archive/zip"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/internal/testsupport/thirdparty"
)

// benchVulndb is golang.org/x/vulndb's data/osv (see vulndb_test.go).
func benchVulndb(b *testing.B) string {
	dir, err := thirdparty.ModuleDir("golang.org/x/vulndb", "v0.0.0-20261105234957-e22db6528018")
	if err != nil {
		b.Skipf("the Go vulnerability database: %v", err)
	}
	return filepath.Join(dir, "data", "osv")
}

// BenchmarkLoadVulndb loads the Go vulnerability database's 4,789 records
// (20 MB) from their folder; heap-MiB is what the loaded DB holds.
func BenchmarkLoadVulndb(b *testing.B) {
	dir := benchVulndb(b)
	b.ReportAllocs()
	var db *DB
	for b.Loop() {
		var err error
		if db, err = LoadDir(dir, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(heapMiB(), "heap-MiB")
	b.ReportMetric(float64(db.Len()), "records")
	runtime.KeepAlive(db)
}

// BenchmarkMatch matches 10,000 components against the Go vulnerability
// database: one in ten a module it names (at a version every range
// evaluates), the rest modules it does not.
func BenchmarkMatch(b *testing.B) {
	db, err := LoadDir(benchVulndb(b), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	var named []string
	for k := range db.index {
		if len(named) == 1000 {
			break
		}
		named = append(named, k[len("Go\x00"):])
	}
	comps := make([]bom.Component, 10_000)
	for i := range comps {
		name := fmt.Sprintf("example.com/unknown/m%d", i)
		if i%10 == 0 {
			name = named[(i/10)%len(named)]
		}
		comps[i] = bom.Component{Version: "v0.1.0", PURL: "pkg:golang/" + name + "@v0.1.0"}
	}
	b.ReportAllocs()
	var hits int
	for b.Loop() {
		hits = 0
		for _, c := range comps {
			hits += len(db.Match(c))
		}
	}
	b.ReportMetric(float64(hits), "matches")
}

// BenchmarkLoadMillion loads a zip of 1,000,000 tiny records (the
// default MaxRecords), each naming one of 1,000 packages: what a database
// at the limit costs in time and memory.
func BenchmarkLoadMillion(b *testing.B) {
	path := filepath.Join(b.TempDir(), "million.zip")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for i := range 1_000_000 {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("X-%d.json", i), Method: zip.Deflate})
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(w, `{"id":"X-%d","modified":"2024-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"p%d"},"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"1.0.%d"}]}]}]}`, i, i%1000, i%50)
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	fi, _ := f.Stat()
	b.ReportAllocs()
	var db *DB
	for b.Loop() {
		if db, err = Load(f, fi.Size(), Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(heapMiB(), "heap-MiB")
	b.ReportMetric(float64(fi.Size())/(1<<20), "zip-MiB")
	runtime.KeepAlive(db)
	f.Close()
}

// heapMiB is the live heap after a collection.
func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}
