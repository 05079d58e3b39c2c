package bom_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact/bom"
)

// queryBudget is issue 53's budget: a query over 10,000 SBOMs, the index
// read from its file included, within a second.
const queryBudget = time.Second

// pool is a population of distinct components of one ecosystem, the
// popular first.
type pool []bom.Component

// makePool makes n distinct name/version pairs of a type, about three
// versions a name.
func makePool(r *rand.Rand, typ string, n int, purl func(name, version string) string, name func(i int) string) pool {
	var p pool
	for i := 0; len(p) < n; i++ {
		nm := name(i)
		for v := range 1 + r.IntN(5) {
			version := fmt.Sprintf("%d.%d.%d", r.IntN(4), r.IntN(40), v)
			switch typ {
			case "deb":
				version += fmt.Sprintf("-%d+deb12u%d", 1+r.IntN(3), v)
			case "apk":
				version += fmt.Sprintf("-r%d", v)
			case "golang":
				version = "v" + version
			}
			p = append(p, bom.Component{Name: nm, Version: version, Type: typ, PURL: purl(nm, version), Licenses: []string{[]string{"MIT", "Apache-2.0", "BSD-3-Clause", "GPL-2.0-only"}[r.IntN(4)]}})
		}
	}
	return p[:n]
}

// draw takes n components of p, the popular more often (a power law).
func (p pool) draw(r *rand.Rand, n int) []bom.Component {
	cs := make([]bom.Component, n)
	for i := range cs {
		f := r.Float64()
		cs[i] = p[int(f*f*f*float64(len(p)))]
	}
	return cs
}

// benchIndex makes an index of n SBOMs of realistic shape: a Debian
// (three in four) or Alpine base of 80–200 packages and one language's
// 70–200 modules (Go, npm or PyPI), drawn from about 20,000 distinct
// name/version pairs.
func benchIndex(n int) *bom.Index {
	r := rand.New(rand.NewPCG(53, 1))
	deb := makePool(r, "deb", 6000, func(n, v string) string { return "pkg:deb/debian/" + n + "@" + v + "?arch=amd64&distro=debian-12" },
		func(i int) string {
			return []string{"openssl", "libc6", "zlib1g", "libssl3", "curl"}[i%5] + fmt.Sprint(i/5)
		})
	apk := makePool(r, "apk", 2000, func(n, v string) string { return "pkg:apk/alpine/" + n + "@" + v + "?arch=x86_64" },
		func(i int) string { return []string{"musl", "busybox", "openssl", "zlib"}[i%4] + fmt.Sprint(i/4) })
	golang := makePool(r, "golang", 5000, func(n, v string) string { return "pkg:golang/" + n + "@" + v },
		func(i int) string {
			return []string{"golang.org/x/net", "golang.org/x/text", "github.com/spf13/cobra", "k8s.io/client-go"}[i%4] + fmt.Sprint("/m", i/4)
		})
	npm := makePool(r, "npm", 5000, func(n, v string) string { return "pkg:npm/" + n + "@" + v },
		func(i int) string {
			return []string{"lodash", "react", "express", "@angular/core"}[i%4] + fmt.Sprint("-", i/4)
		})
	pypi := makePool(r, "pypi", 2000, func(n, v string) string { return "pkg:pypi/" + n + "@" + v },
		func(i int) string { return []string{"requests", "django", "numpy"}[i%3] + fmt.Sprint("-", i/3) })
	// The packages the benchmark asks for, at a few versions.
	for i, v := range []string{"v0.30.0", "v0.37.0", "v0.38.0", "v0.40.0"} {
		golang[i] = bom.Component{Name: "golang.org/x/net", Version: v, Type: "golang", PURL: "pkg:golang/golang.org/x/net@" + v}
	}
	for i, v := range []string{"3.0.11-1~deb12u2", "3.0.15-1~deb12u1"} {
		deb[i] = bom.Component{Name: "openssl", Version: v, Type: "deb", PURL: "pkg:deb/debian/openssl@" + v + "?arch=amd64&distro=debian-12"}
	}
	x := bom.NewIndex()
	for i := range n {
		base := deb
		if r.IntN(4) == 0 {
			base = apk
		}
		cs := base.draw(r, 80+r.IntN(121))
		lang := []pool{golang, npm, pypi}[r.IntN(3)]
		cs = append(cs, lang.draw(r, 70+r.IntN(131))...)
		x.Add(sbomDigest(i), cs)
	}
	return x
}

// BenchmarkQueryIndex: issue 53's budget — an index of 10,000 SBOMs read
// from its file, then a package URL range query and a name query, within
// a second. It fails over the budget.
func BenchmarkQueryIndex(b *testing.B) {
	x := benchIndex(10_000)
	path := filepath.Join(b.TempDir(), "index")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	size, err := x.WriteTo(f)
	if cerr := f.Close(); err != nil || cerr != nil {
		b.Fatal(err, cerr)
	}
	ranged, err := bom.ParseQuery("pkg:golang/golang.org/x/net@<0.38.0")
	if err != nil {
		b.Fatal(err)
	}
	named, err := bom.ParseQuery("openssl")
	if err != nil {
		b.Fatal(err)
	}
	var hits int
	var querying time.Duration
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		y, err := bom.ReadIndex(bufio.NewReader(f), bom.IndexLimits{})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		hits = 0
		start := time.Now()
		for _, q := range []bom.Query{ranged, named} {
			y.Query(q, func(_ digest.Digest, _ bom.Component) bool { hits++; return true })
		}
		querying += time.Since(start)
		if y.Len() != 10_000 || hits == 0 {
			b.Fatalf("%d SBOMs, %d hits", y.Len(), hits)
		}
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(size)/(1<<20), "index-MiB")
	b.ReportMetric(float64(hits), "hits")
	b.ReportMetric(float64(querying.Microseconds())/float64(b.N), "query-µs")
	if per > queryBudget {
		b.Errorf("a query over 10,000 SBOMs took %v: over the budget of %v", per, queryBudget)
	}
}
