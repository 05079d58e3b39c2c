package bom_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestLimitsMatchArtifact: Read takes documents as large as a package may
// carry.
func TestLimitsMatchArtifact(t *testing.T) {
	if bom.DefaultLimits.MaxBytes != artifact.MaxSBOMSize {
		t.Errorf("DefaultLimits.MaxBytes %d, artifact.MaxSBOMSize %d", bom.DefaultLimits.MaxBytes, artifact.MaxSBOMSize)
	}
}

// spdxOf makes an SPDX document of n packages with names of nameLen bytes,
// padded with blanks to pad bytes if larger.
func spdxOf(n, nameLen, pad int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"spdxVersion":"SPDX-2.3","packages":[`)
	name := strings.Repeat("n", nameLen)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"` + name + `","versionInfo":"1.0"}`)
	}
	b.WriteString(`]}`)
	if b.Len() < pad {
		b.Write(bytes.Repeat([]byte(" "), pad-b.Len()))
	}
	return b.Bytes()
}

// allocated runs fn and returns the peak of the heap's live and
// not yet collected objects above where it started, sampled every
// millisecond, with the collector set to let garbage grow to half the
// live heap (GOGC=50) rather than all of it.
func allocated(fn func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	base, peak := read(), uint64(0)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(done)
	<-stopped
	if v := read(); v > peak {
		peak = v
	}
	if peak < base {
		return 0
	}
	return peak - base
}

// TestReadHostile: a document over each bound is refused in one line
// naming it, reading no more than the bound, and memory stays within a
// small multiple of the input.
func TestReadHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("reads documents of 64 MiB")
	}
	spdx := definition.ArtifactTypeSPDX
	// 10^6 components within 64 MiB: refused at the 200,001st by default,
	// read whole within a larger limit.
	million := spdxOf(1_000_000, 16, 0)
	if len(million) > 64<<20 {
		t.Fatalf("the document is %d bytes", len(million))
	}
	var err error
	var cs []bom.Component
	mem := allocated(func() { _, err = bom.Read(bytes.NewReader(million), spdx, bom.Limits{}) })
	if err == nil || err.Error() != "SBOM has more than 200000 components: not a readable SBOM" {
		t.Errorf("10^6 components: %v", err)
	}
	mem = allocated(func() { cs, err = bom.Read(bytes.NewReader(million), spdx, bom.Limits{MaxComponents: 2_000_000}) })
	if err != nil || len(cs) != 1_000_000 {
		t.Fatalf("10^6 components read: %d, %v", len(cs), err)
	}
	t.Logf("10^6 components, %d MiB: %d MiB allocated", len(million)>>20, mem>>20)
	if mem > 8*uint64(len(million)) {
		t.Errorf("10^6 components: %d MiB allocated for %d MiB", mem>>20, len(million)>>20)
	}
	cs = nil

	// 64 MiB + 1: refused, having read at most one byte past the bound.
	over := spdxOf(10, 8, 64<<20+1)
	cr := &countingReader{r: bytes.NewReader(over)}
	mem = allocated(func() { _, err = bom.Read(cr, spdx, bom.Limits{}) })
	if err == nil || !strings.Contains(err.Error(), "SPDX document is more than 67108864 bytes") || cr.n > 64<<20+1 {
		t.Errorf("64 MiB + 1: %v (read %d bytes)", err, cr.n)
	}
	if mem > 8*uint64(len(over)) {
		t.Errorf("64 MiB + 1: %d MiB allocated", mem>>20)
	}
	// An endless document: the same.
	cr = &countingReader{r: io.MultiReader(strings.NewReader(`{"packages":[{"name":"a"}`), endless{})}
	if _, err = bom.Read(cr, spdx, bom.Limits{}); err == nil || !strings.Contains(err.Error(), "more than 67108864 bytes") || cr.n > 64<<20+1 {
		t.Errorf("endless: %v (read %d bytes)", err, cr.n)
	}

	// 1 MiB names.
	_, err = bom.Read(bytes.NewReader(spdxOf(3, 1<<20, 0)), spdx, bom.Limits{})
	if err == nil || !strings.Contains(err.Error(), "SPDX document: package 0: a name of 1048576 bytes is longer than 65536") {
		t.Errorf("1 MiB names: %v", err)
	}
	// 1 MiB of nesting where Read skips, and in a component.
	deep := `{"files":` + strings.Repeat("[", 1<<20) + `}`
	if _, err = bom.Read(strings.NewReader(deep), spdx, bom.Limits{}); err == nil || !strings.Contains(err.Error(), "nested more than 256 levels deep") {
		t.Errorf("deep: %v", err)
	}
	deep = `{"packages":[{"name":` + strings.Repeat("[", 1<<20) + `}`
	if _, err = bom.Read(strings.NewReader(deep), spdx, bom.Limits{}); err == nil || !strings.Contains(err.Error(), "max depth") {
		t.Errorf("deep package: %v", err)
	}
	// Too many licenses.
	var ls []string
	for i := range 300 {
		ls = append(ls, fmt.Sprintf(`"L%d"`, i))
	}
	lic := `{"artifacts":[{"name":"x","licenses":[` + strings.Join(ls, ",") + `]}]}`
	if _, err = bom.Read(strings.NewReader(lic), definition.ArtifactTypeSyft, bom.Limits{}); err == nil || !strings.Contains(err.Error(), "more than 256 licenses") {
		t.Errorf("licenses: %v", err)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// endless is endless blanks.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// FuzzRead: any bytes read as any format give components within the
// limits or an error wrapping ErrFormat, never a panic.
func FuzzRead(f *testing.F) {
	f.Add(uint8(0), []byte(`{"spdxVersion":"SPDX-2.3","packages":[{"name":"a","versionInfo":"1","licenseDeclared":"MIT","externalRefs":[{"referenceType":"purl","referenceLocator":"pkg:deb/debian/a@1"}]}]}`))
	f.Add(uint8(1), []byte(`{"bomFormat":"CycloneDX","metadata":{"component":{"name":"img","type":"container"}},"components":[{"name":"a","purl":"pkg:npm/a@1","licenses":[{"license":{"id":"MIT"}}],"components":[{"name":"b"}]}]}`))
	f.Add(uint8(2), []byte(`{"artifacts":[{"name":"a","version":"1","type":"go-module","purl":"pkg:golang/a@v1","licenses":["MIT",{"value":"BSD"}]}]}`))
	types := []string{definition.ArtifactTypeSPDX, definition.ArtifactTypeCycloneDX, definition.ArtifactTypeSyft}
	lim := bom.Limits{MaxBytes: 1 << 16, MaxComponents: 100, MaxString: 256, MaxLicenses: 4}
	f.Fuzz(func(t *testing.T, kind uint8, doc []byte) {
		cs, err := bom.Read(bytes.NewReader(doc), types[int(kind)%len(types)], lim)
		if err != nil {
			if !errors.Is(err, bom.ErrFormat) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error: %v", err)
			}
			return
		}
		if len(cs) > lim.MaxComponents {
			t.Fatalf("%d components", len(cs))
		}
		for _, c := range cs {
			if len(c.Name) > lim.MaxString || len(c.Licenses) > lim.MaxLicenses {
				t.Fatalf("over the limits: %+v", c)
			}
		}
	})
}
