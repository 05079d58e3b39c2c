package zarftest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/artifact/zarf"
)

// Hostile is an input built to make `ferry package convert` or `ferry
// package import` spend memory or time, hang, or read outside its folder
// (issue 49), and the one-line refusal it must get.
type Hostile struct {
	Name string
	// Path is what the command is given: for convert the folder holding
	// zarf.yaml, for import the package (the .part000 of a multi-part one).
	Path   string
	Import bool
	// Want is a regular expression the error matches.
	Want string
	// Secret is text of a file outside the folder that must not be read:
	// no output may hold it.
	Secret string
	// Budget is how long the refusal may take, when it is more than the
	// caller's default: refusing a package whose strays come before its
	// checksums.txt costs a file written for each of them.
	Budget time.Duration
}

// The text a file outside a definition's folder holds: a deploy-time
// template that convert would report with its file and line if it read it.
const outsideSecret = "###ZARF_VAR_OUTSIDE_SECRET###"

const zarfHead = "kind: ZarfPackageConfig\nmetadata:\n  name: hostile\n  version: 1.0.0\n"

// HostileDefinitions writes, under dir, one folder per hostile zarf.yaml.
func HostileDefinitions(t testing.TB, dir string) []Hostile {
	t.Helper()
	outside := filepath.Join(dir, "outside")
	WriteFile(t, filepath.Join(outside, "secret.yaml"), "password: "+outsideSecret+"\n")
	WriteFile(t, filepath.Join(outside, "kustomization.yaml"), "resources: [secret.yaml]\n")
	var hs []Hostile
	def := func(name, yaml, want string, prepare func(folder string)) {
		folder := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name))
		WriteFile(t, filepath.Join(folder, "zarf.yaml"), yaml)
		if prepare != nil {
			prepare(folder)
		}
		hs = append(hs, Hostile{Name: name, Path: folder, Want: want, Secret: outsideSecret})
	}
	link := func(target, name string) func(string) {
		return func(folder string) {
			if err := os.Symlink(target, filepath.Join(folder, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	file := func(source string) string {
		return zarfHead + "components:\n  - name: c\n    required: true\n    files:\n      - source: " + source + "\n        target: /data\n        shasum: " + strings.Repeat("0", 64) + "\n"
	}
	def("230k components", Components(4<<20-200), `too much YAML for a Zarf definition: its [0-9,]+ .* could make [0-9,]+ nodes, more than 200,000$`, nil)
	var flow strings.Builder
	flow.WriteString(zarfHead + "components: [")
	for i := range zarf.MaxComponents + 1 {
		fmt.Fprintf(&flow, "{name: c%d}, ", i)
	}
	flow.WriteString("]\n")
	def("10,001 components", flow.String(), `components: 10,001 components, more than 10,000$`, nil)
	// Nine levels of ten aliases each: 10^9 nodes when expanded.
	var bomb strings.Builder
	bomb.WriteString(zarfHead + "x-0: &a0 [z, z, z, z, z, z, z, z, z, z]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&bomb, "x-%d: &a%d [", i, i)
		for range 10 {
			fmt.Fprintf(&bomb, "*a%d, ", i-1)
		}
		bomb.WriteString("]\n")
	}
	bomb.WriteString("components:\n  - name: c\n    images: *a8\n")
	def("alias bomb", bomb.String(), `its aliases make more than 200,000 YAML nodes$`, nil)
	def("alias cycle", "kind: ZarfPackageConfig\nmetadata: &m\n  name: a\n  <<: *m\n", `alias \*m stands for a node that holds it$`, nil)
	def("shasum of /dev/zero", file("zero"), `files\[0\]\.source: zero leads outside the definition's folder$`, link("/dev/zero", "zero"))
	def("shasum of a FIFO", file("fifo"), `files\[0\]\.source: fifo is not a regular file`, func(folder string) {
		if err := syscall.Mkfifo(filepath.Join(folder, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	def("shasum of /etc/passwd", file("passwd"), `files\[0\]\.source: passwd leads outside the definition's folder$`, link("/etc/passwd", "passwd"))
	def("manifest linked outside", zarfHead+"components:\n  - name: c\n    required: true\n    manifests:\n      - name: m\n        files: [secret.yaml]\n",
		`files\[0\]: secret.yaml leads outside the definition's folder$`, link("../outside/secret.yaml", "secret.yaml"))
	def("files folder linked outside", zarfHead+"components:\n  - name: c\n    required: true\n    files:\n      - source: conf\n        target: /etc/conf\n",
		`files\[0\]\.source: conf leads outside the definition's folder$`, link("../outside", "conf"))
	def("kustomization linked outside", zarfHead+"components:\n  - name: c\n    required: true\n    manifests:\n      - name: m\n        kustomizeAllowAnyDirectory: true\n        kustomizations: [k]\n",
		`kustomizations\[0\]: kustomize build k: .*leads outside the definition's folder`, func(folder string) {
			WriteFile(t, filepath.Join(folder, "k", "kustomization.yaml"), "resources: [../../outside/secret.yaml]\n")
		})
	var tmpl strings.Builder
	tmpl.WriteString(zarfHead + "components:\n  - name: c\n    description: |\n")
	for i := 0; tmpl.Len() < 4<<20-100; i++ {
		fmt.Fprintf(&tmpl, "      x ###ZARF_PKG_TMPL_V%d###\n", i)
	}
	def("200k templates without a value", tmpl.String(), `package templates without a value: ###ZARF_PKG_TMPL_V0### \(line 8\) and [0-9,]+ more`, nil)
	def("a 4 MiB name", "kind: ZarfPackageConfig\nmetadata:\n  name: "+strings.Repeat("A", 4<<20-100)+"\n", `metadata.name: "A+… \([0-9,]+ bytes\)`, nil)
	return hs
}

// Components is a zarf.yaml of as many components as fit in size bytes
// (230,000 in 4 MiB), each a name alone.
func Components(size int) string {
	var b strings.Builder
	b.WriteString(zarfHead + "components:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  - name: c%d\n", i)
	}
	return b.String()
}

// Largest is the largest zarf.yaml the limits let through, by components:
// zarf.MaxComponents of them, each required.
func Largest() string {
	var b strings.Builder
	b.WriteString(zarfHead + "components:\n")
	for i := range zarf.MaxComponents {
		fmt.Fprintf(&b, "  - name: c%d\n    required: true\n", i)
	}
	return b.String()
}

// Entry is a file of a built package.
type Entry struct {
	Name string
	Data []byte
	// Link makes the entry a symbolic link to Link.
	Link string
}

// BuiltPackage writes a plain-tar Zarf package holding def (its
// aggregateChecksum filled in) and the entries listed in checksums.txt,
// with strays before or after checksums.txt, not listed; components named
// in listed are component tars made of their entries.
func BuiltPackage(t testing.TB, p, def string, listed map[string][]Entry, before, after []Entry) {
	t.Helper()
	files := map[string][]byte{}
	for name, entries := range listed {
		files[name] = TarOf(t, entries)
	}
	var lines []string
	for n, b := range files {
		lines = append(lines, fmt.Sprintf("%x %s", sha256.Sum256(b), n))
	}
	sort.Strings(lines)
	sums := strings.Join(lines, "\n") + "\n"
	if len(lines) == 0 {
		sums = ""
	}
	def = strings.Replace(def, "metadata:\n", fmt.Sprintf("metadata:\n  aggregateChecksum: %x\n", sha256.Sum256([]byte(sums))), 1)
	all := append(append([]Entry(nil), before...), Entry{Name: zarf.ChecksumsFile, Data: []byte(sums)})
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		all = append(all, Entry{Name: n, Data: files[n]})
	}
	all = append(append(all, after...), Entry{Name: zarf.ZarfYAML, Data: []byte(def)})
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(TarOf(t, all)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TarOf is a tar of entries, in their order.
func TarOf(t testing.TB, entries []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: 0o600, Size: int64(len(e.Data)), Typeflag: tar.TypeReg}
		if e.Link != "" {
			h = &tar.Header{Name: e.Name, Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: e.Link}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// strays is n empty files that no checksums.txt lists.
func strays(n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Name: fmt.Sprintf("stray/file-%06d", i)}
	}
	return es
}

// HostilePackages writes, under dir, each hostile built package.
func HostilePackages(t testing.TB, dir string) []Hostile {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	small := zarfHead + "components:\n  - name: app\n    required: true\n"
	var hs []Hostile
	pkg := func(name, want string, make func(p string) string) {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".tar")
		hs = append(hs, Hostile{Name: name, Path: make(p), Import: true, Want: want, Secret: outsideSecret})
	}
	// Before checksums.txt, each entry is written (Zarf v0.60.0 writes the
	// package's top-level files in any order): 0.1 ms each on ext4.
	slow := func() { hs[len(hs)-1].Budget = time.Minute }
	pkg("230k components", `zarf.yaml: too much YAML for a Zarf definition: .* more than 200,000$`, func(p string) string {
		BuiltPackage(t, p, Components(4<<20-400), nil, nil, nil)
		return p
	})
	pkg("200k strays after checksums.txt", `zarf package integrity: stray/file-000000: not listed in checksums.txt$`, func(p string) string {
		BuiltPackage(t, p, small, nil, nil, strays(200_000))
		return p
	})
	pkg("50k strays before checksums.txt", `zarf package integrity: stray/file-000000 and 49,999 more: not listed in checksums.txt$`, func(p string) string {
		BuiltPackage(t, p, small, nil, strays(50_000), nil)
		return p
	})
	slow()
	pkg("200k entries before checksums.txt", `package is corrupt: more than 100,000 entries$`, func(p string) string {
		BuiltPackage(t, p, small, nil, strays(200_000), nil)
		return p
	})
	slow()
	pkg("link out in a component", `components/app.tar: entry components/app/files/0/data links outside the package \(to /etc/passwd\)$`, func(p string) string {
		BuiltPackage(t, p, small, map[string][]Entry{"components/app.tar": {{Name: "app/files/0/data", Link: "/etc/passwd"}}}, nil, nil)
		return p
	})
	multi := func(name, want string, part func(base string, whole []byte) (sum string)) {
		pkg(name, want, func(p string) string {
			sub := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			whole := filepath.Join(sub, "whole.tar")
			BuiltPackage(t, whole, small, nil, nil, nil)
			data, err := os.ReadFile(whole)
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(whole)
			base := filepath.Join(sub, "zarf-package-hostile-amd64-1.0.0.tar")
			sum := part(base, data)
			head, _ := json.Marshal(map[string]any{"Sha256Sum": sum, "Bytes": len(data), "Count": 1})
			WriteFile(t, base+".part000", string(head))
			return base + ".part000"
		})
	}
	multi("wrong Sha256Sum in part000", `\.part000: zarf package integrity: the parts hold sha256 [0-9a-f]{64}, not the 0{64} it records$`, func(base string, whole []byte) string {
		WriteFile(t, base+".part001", string(whole))
		return strings.Repeat("0", 64)
	})
	multi("part linked to /dev/zero", `part 1 of 1: .*\.part001 is a symbolic link, not a regular file$`, func(base string, whole []byte) string {
		if err := os.Symlink("/dev/zero", base+".part001"); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%x", sha256.Sum256(whole))
	})
	multi("FIFO part", `part 1 of 1: .*\.part001 is not a regular file \(a named pipe\)$`, func(base string, whole []byte) string {
		if err := syscall.Mkfifo(base+".part001", 0o644); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%x", sha256.Sum256(whole))
	})
	return hs
}
