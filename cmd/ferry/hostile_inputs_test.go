package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrypkg/ferry/internal/inputs"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// corpusItem is one hostile input: a path (or a registry reference) made
// once, fed to every input of its kinds.
type corpusItem struct {
	name  string
	value string
}

// corpus makes the hostile items of each kind in dir.
type corpus struct {
	dir   string
	kinds map[inputs.Kind][]corpusItem
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newCorpus makes the hostile inputs: for files, /dev/zero (through a
// link and as itself), a FIFO nobody writes, a folder, a 1 TiB sparse
// file, a missing path and garbage; YAML adds many small nodes, deep
// nesting and an alias bomb; packages add a damaged archive and one with
// bytes after its end; charts the templates that render without end.
func newCorpus(t *testing.T, pkg string) *corpus {
	t.Helper()
	dir := t.TempDir()
	c := &corpus{dir: dir, kinds: map[inputs.Kind][]corpusItem{}}
	p := func(name string) string { return filepath.Join(dir, name) }

	mustDo(t, os.Symlink("/dev/zero", p("zero-link")))
	mustDo(t, syscall.Mkfifo(p("fifo"), 0o644))
	mustDo(t, os.Mkdir(p("folder"), 0o755))
	f, err := os.Create(p("sparse"))
	mustDo(t, err)
	mustDo(t, f.Truncate(1<<40))
	f.Close()
	garbage := make([]byte, 1<<20)
	rand.Read(garbage)
	mustDo(t, os.WriteFile(p("garbage"), garbage, 0o644))
	// What random bytes only sometimes are: one long line, not UTF-8,
	// that reads as a key, a user or a name wherever a parser quotes
	// what it refuses.
	long := strings.Repeat("\xb9", 20_000)
	mustDo(t, os.WriteFile(p("long-line"), []byte(long+":"+long+"\n"+long+"\n"), 0o644))
	key := strings.Repeat("k", 1000) // the longest a YAML key may be
	mustDo(t, os.WriteFile(p("long-key"), []byte(key+": "+key+"\n"+key+":\n  "+key+": 1\n"), 0o644))
	files := []corpusItem{
		{"dev-zero", "/dev/zero"}, {"zero-link", p("zero-link")}, {"fifo", p("fifo")},
		{"folder", p("folder")}, {"sparse", p("sparse")}, {"missing", p("missing")}, {"garbage", p("garbage")},
		{"long-line", p("long-line")}, {"long-key", p("long-key")},
	}
	c.kinds[inputs.File] = files

	// YAML: ~1M nodes under the 4 MiB definition bound; nesting 100k
	// deep; a billion laughs.
	var nodes bytes.Buffer
	nodes.WriteString("a:\n")
	for nodes.Len() < 4<<20-64 {
		nodes.WriteString("- 1\n")
	}
	mustDo(t, os.WriteFile(p("nodes.yaml"), nodes.Bytes(), 0o644))
	mustDo(t, os.WriteFile(p("deep.yaml"), []byte(strings.Repeat("[", 100_000)+strings.Repeat("]", 100_000)+"\n"), 0o644))
	laughs := "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
	prev := "a"
	for i, n := range "bcdefghi" {
		_ = i
		name := string(n)
		laughs += fmt.Sprintf("%s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	mustDo(t, os.WriteFile(p("laughs.yaml"), []byte(laughs), 0o644))
	c.kinds[inputs.YAML] = append(slicesClone(files),
		corpusItem{"nodes", p("nodes.yaml")}, corpusItem{"deep", p("deep.yaml")}, corpusItem{"laughs", p("laughs.yaml")})

	// Folders.
	mustDo(t, os.WriteFile(p("a-file"), []byte("x"), 0o644))
	c.kinds[inputs.Folder] = []corpusItem{
		{"zero-link", p("zero-link")}, {"fifo", p("fifo")}, {"missing", p("missing")}, {"a-file", p("a-file")}, {"dev-zero", "/dev/zero"},
	}

	// Packages: damaged (a byte flipped half-way) and with bytes after
	// its end.
	good, err := os.ReadFile(pkg)
	mustDo(t, err)
	damaged := bytes.Clone(good)
	damaged[len(damaged)/2] ^= 0xff
	mustDo(t, os.WriteFile(p("damaged.tar.zst"), damaged, 0o644))
	mustDo(t, os.WriteFile(p("trailing.tar.zst"), append(bytes.Clone(good), garbage[:4096]...), 0o644))
	c.kinds[inputs.Package] = append(slicesClone(files),
		corpusItem{"damaged", p("damaged.tar.zst")}, corpusItem{"trailing", p("trailing.tar.zst")})

	// Registries: a hostile one on loopback, one behaviour per path.
	for _, mode := range []string{"endless", "huge", "pages", "garbage", "error"} {
		c.kinds[inputs.Registry] = append(c.kinds[inputs.Registry], corpusItem{"registry-" + mode, hostileRegistry(t, mode) + "/hostile/pkg:1.0.0"})
	}

	// Charts that render without end.
	charts := map[string]string{
		"until":   `{{ range until 100000000 }}{{ . }}{{ end }}`,
		"repeat":  `{{ repeat 1073741824 "x" }}`,
		"output":  `{{ range until 1000000 }}{{ range until 1000 }}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{{ end }}{{ end }}`,
		"include": `{{ define "b" }}{{ if lt (len .) 40 }}{{ include "b" (append . 1) }}{{ include "b" (append . 1) }}{{ end }}{{ end }}{{ include "b" (list) }}`,
	}
	for name, tpl := range charts {
		cd := p("chart-" + name)
		mustDo(t, os.MkdirAll(filepath.Join(cd, "templates"), 0o755))
		mustDo(t, os.WriteFile(filepath.Join(cd, "Chart.yaml"), []byte("apiVersion: v2\nname: hostile\nversion: 0.1.0\n"), 0o644))
		mustDo(t, os.WriteFile(filepath.Join(cd, "templates", "t.yaml"), []byte(tpl+"\n"), 0o644))
		c.kinds[inputs.Chart] = append(c.kinds[inputs.Chart], corpusItem{"chart-" + name, cd})
	}
	c.kinds[inputs.Chart] = append(c.kinds[inputs.Chart], files...)

	// Standard input: endless, and a megabyte with no line end.
	mustDo(t, os.WriteFile(p("one-line"), bytes.Repeat([]byte("a"), 1<<20), 0o644))
	c.kinds[inputs.Stdin] = []corpusItem{{"dev-zero", "/dev/zero"}, {"one-line", p("one-line")}}
	// Outputs: a folder where the file would go (a missing folder is made,
	// as mkdir -p would).
	c.kinds[inputs.Output] = []corpusItem{{"folder", p("folder")}}
	return c
}

func slicesClone(s []corpusItem) []corpusItem { return append([]corpusItem(nil), s...) }

// hostileRegistry answers every request as mode says: endless bodies, a
// declared size of 1 TiB, endless pages of tags and repositories, garbage,
// errors with endless bodies.
func hostileRegistry(t *testing.T, mode string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, "/v2/")
		endless := func() {
			buf := bytes.Repeat([]byte("{"), 64<<10)
			for i := 0; i < 1<<16; i++ { // at most 4 GiB
				if _, err := w.Write(buf); err != nil {
					return
				}
			}
		}
		switch mode {
		case "endless":
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			if r.Method == http.MethodHead {
				w.Header().Set("Content-Length", "1099511627776")
				return
			}
			endless()
		case "huge":
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("a", 64))
			w.Header().Set("Content-Length", "1099511627776")
			if r.Method != http.MethodHead {
				endless()
			}
		case "pages":
			if r.URL.Path == "/v2/" {
				endless()
				return
			}
			if strings.Contains(rest, "/manifests/") || strings.Contains(rest, "/blobs/") {
				http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"no"}]}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Link", fmt.Sprintf(`<%s?n=100&last=%d>; rel="next"`, r.URL.Path, time.Now().UnixNano()))
			if rest == "_catalog" {
				fmt.Fprintf(w, `{"repositories":["pages/r%d"]}`, time.Now().UnixNano())
			} else {
				fmt.Fprintf(w, `{"name":"pages/pkg","tags":["t%d"]}`, time.Now().UnixNano())
			}
		case "garbage":
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Write([]byte(`{"schemaVersion": 2, "layers": [`))
		case "error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			endless()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// hostileFixtures are the good inputs a Try line names besides the hostile
// one.
type hostileFixtures map[string]string

// newHostileFixtures makes a key pair, a definition, a signed package
// pushed to a registry on loopback, a receipt, a dead cluster's
// kubeconfig and a TLS pair.
func newHostileFixtures(t *testing.T) (hostileFixtures, []string) {
	t.Helper()
	dir := t.TempDir()
	env := []string{"COSIGN_PASSWORD=pw", "DOCKER_CONFIG=" + filepath.Join(dir, "docker")}
	fx := hostileFixtures{}
	run := func(args ...string) {
		t.Helper()
		if _, stderr, code := runFerryEnv(t, dir, env, args...); code != 0 {
			t.Fatalf("fixture: ferry %s: %s", strings.Join(args, " "), stderr)
		}
	}
	run("key", "generate", dir)
	fx["{key}"], fx["{pub}"] = filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
	def := filepath.Join(dir, "def")
	writeFile(t, filepath.Join(def, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(def, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(def, "f.txt"), "hello\n")
	fx["{def}"] = def
	fx["{pkg}"] = filepath.Join(dir, "pkg.tar.zst")
	run("package", "create", def, "-f", fx["{pkg}"], "--sbom=false", "--sign-key", fx["{key}"])
	fx["{reg}"] = registrytest.New(t)
	run("package", "push", fx["{pkg}"], fx["{reg}"]+"/test/pkg:0.1.0")
	fx["{receipt}"] = filepath.Join(dir, "receipt.json")
	run("registry", "have", fx["{reg}"], "-f", fx["{receipt}"], "--key", fx["{key}"])
	fx["{kube}"] = filepath.Join(dir, "kubeconfig")
	writeFile(t, fx["{kube}"], "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
	cert, key, _, err := fixture.SelfSignedLoopback(dir)
	mustDo(t, err)
	fx["{tlscert}"], fx["{tlskey}"] = cert, key
	fx["{pw}"] = filepath.Join(dir, "pw")
	writeFile(t, fx["{pw}"], "pw\n")
	fx["{osv}"] = filepath.Join(dir, "osv")
	writeFile(t, filepath.Join(fx["{osv}"], "DSA-TEST-1.json"), osvRecord("DSA-TEST-1", "1.2.4-1"))
	fx["{repos}"] = filepath.Join(dir, "repos.json")
	writeFile(t, fx["{repos}"], "[]\n")
	zdef := filepath.Join(dir, "zarfdef")
	writeFile(t, filepath.Join(zdef, "zarf.yaml"), zarfHeader+"components:\n- name: c\n  required: true\n  manifests:\n  - name: m\n    files: [m.yaml]\n")
	writeFile(t, filepath.Join(zdef, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: z\n")
	fx["{zarfdef}"] = zdef
	fx["{zarfpkg}"] = filepath.Join(dir, "zarf-package-x-amd64-1.0.0.tar.zst")
	writeFile(t, fx["{zarfpkg}"], "not a zarf package")
	return fx, env
}

const zarfHeader = "kind: ZarfPackageConfig\nmetadata:\n  name: hostile\n  version: 1.0.0\n"

// hostileRun is the outcome of one hostile run.
type hostileRun struct {
	stderr  string
	code    int
	elapsed time.Duration
	rssMiB  int64
	killed  bool
}

// runHostile runs the ferry command line args (stdin from a file when
// given) in dir, killed past the budget.
func runHostile(t *testing.T, dir string, env []string, stdin string, args []string, b inputs.Budget) hostileRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.Seconds)*time.Second+5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	cmd.Dir = dir
	cmd.Env = append(withoutPassword(os.Environ()), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if stdin != "" {
		f, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	var errb bytes.Buffer
	cmd.Stderr = &limitedBuffer{buf: &errb, max: 64 << 10}
	start := time.Now()
	err := cmd.Run()
	r := hostileRun{stderr: errb.String(), elapsed: time.Since(start), killed: ctx.Err() != nil}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code = -1
	}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.rssMiB = ru.Maxrss >> 10
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return r
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// TestHostileInputs feeds every input of the register (internal/inputs)
// the hostile corpus of its kind, through the command line as a user
// would: each run must end in a one-line refusal (exit 1, "ferry: …" on
// one line, no panic), within its budget of time and memory, having
// written nothing. An input whose guard is removed fails here.
func TestHostileInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fixtures and runs ferry some hundred times")
	}
	fx, env := newHostileFixtures(t)
	c := newCorpus(t, fx["{pkg}"])
	sem := make(chan struct{}, 2)
	for _, e := range inputs.Register {
		if !e.Kind.Fed() || e.Try == "" {
			continue
		}
		items := c.kinds[e.Kind]
		if len(items) == 0 {
			t.Fatalf("no corpus for kind %s", e.Kind)
		}
		budget := inputs.DefaultBudget
		if e.Budget != nil {
			budget = *e.Budget
		}
		for _, it := range items {
			if slices.Contains(e.Accepts, it.name) {
				continue
			}
			t.Run(e.Where+"/"+it.name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				dir := t.TempDir()
				out := filepath.Join(dir, "out", "result.tar.zst")
				mustDo(t, os.MkdirAll(filepath.Dir(out), 0o755))
				args, stdin, runEnv := hostileCommand(t, e, it, fx, dir, out)
				r := runHostile(t, dir, append(slicesCloneStr(env), runEnv...), stdin, args, budget)
				line := strings.TrimSuffix(r.stderr, "\n")
				if r.killed {
					t.Errorf("ferry %s: still running after %s (budget %d s), killed; stderr: %.300s", strings.Join(args, " "), r.elapsed.Round(time.Millisecond), budget.Seconds, line)
				} else if fault := refusalLinesFault(r.code, r.stderr, max(e.Lines, 1)); fault != "" {
					t.Errorf("ferry %s: %s", strings.Join(args, " "), fault)
				}
				if r.elapsed > time.Duration(budget.Seconds)*time.Second {
					t.Errorf("ferry %s: %s, budget %d s", strings.Join(args, " "), r.elapsed.Round(time.Millisecond), budget.Seconds)
				}
				if r.rssMiB > int64(budget.MiB) {
					t.Errorf("ferry %s: peak RSS %d MiB, budget %d MiB", strings.Join(args, " "), r.rssMiB, budget.MiB)
				}
				if left, _ := os.ReadDir(filepath.Dir(out)); len(left) > 0 {
					t.Errorf("ferry %s: left %s behind after refusing", strings.Join(args, " "), left[0].Name())
				}
				t.Logf("%s: %s, %d MiB: %.200s", it.name, r.elapsed.Round(time.Millisecond), r.rssMiB, line)
			})
		}
	}
}

// refusalFault says what is wrong with a refusal, given its exit status
// and standard error, or "" when it is what a user should read: exit 1
// and one line "ferry: …" of at most 1 KiB, in the user's words — no
// name of Go's or the kernel's (goInternals), no prefix said twice in a
// row (doubledPrefix).
func refusalFault(code int, stderr string) string {
	return refusalLinesFault(code, stderr, 1)
}

// refusalLinesFault is refusalFault for a refusal of up to max lines, one
// a problem, each held to what refusalFault holds one line to.
func refusalLinesFault(code int, stderr string, max int) string {
	text := strings.TrimSuffix(stderr, "\n")
	lines := strings.Split(text, "\n")
	switch {
	case code != 1:
		return fmt.Sprintf("exit %d, want 1 (a refusal); stderr: %.300s", code, text)
	case len(lines) > max && max == 1:
		return fmt.Sprintf("%d lines on stderr, want one:\n%.600s", len(lines), text)
	case len(lines) > max:
		return fmt.Sprintf("%d lines on stderr, want at most %d:\n%.600s", len(lines), max, text)
	}
	for _, line := range lines {
		switch {
		case !strings.HasPrefix(line, "ferry: "):
			return fmt.Sprintf("stderr %.300q is not one `ferry: …` line", line)
		case len(line) > 1024:
			// Below cli.MaxErrorLine: refusals of hostile input name it in
			// short, they are not merely cut.
			return fmt.Sprintf("a refusal of %d bytes, want at most 1 KiB: %.300s…", len(line), line)
		case goInternals.MatchString(line):
			return fmt.Sprintf("the refusal shows Go's internals (%s): %.300s", goInternals.FindString(line), line)
		case doubledPrefix(line) != "":
			return fmt.Sprintf("the refusal says %q twice: %.300s", doubledPrefix(line), line)
		}
	}
	return ""
}

// goInternals are words of Go's and the kernel's, not the user's: the
// *at system calls os.Root makes, Go's own call and type names.
// (A word boundary cannot stand before "*" or after ":", which are not
// word characters: those are matched apart.)
// net/http's request line (`Get "https://…"`) and its dial are Go's too,
// as are os's operations in front of a path (`stat /x: …`).
var goInternals = regexp.MustCompile(`\b(statat|openat|fstatat|lstatat|readlinkat|unlinkat|mkdirat|fstat|lstat|runtime error|goroutine|panic|dial tcp)\b|\*[a-z0-9]+\.[A-Z][A-Za-z0-9]*\b|\b(Get|Head|Put|Post|Patch|Delete) "http|\b(stat|open|lstat) /`)

// doubledPrefix returns a "prefix: " that a message says twice in a row
// ("package is corrupt: package is corrupt: …"), or "".
func doubledPrefix(line string) string {
	parts := strings.Split(line, ": ")
	for i := 1; i < len(parts); i++ {
		if len(parts[i]) >= 4 && parts[i] == parts[i-1] {
			return parts[i]
		}
	}
	return ""
}

func slicesCloneStr(s []string) []string { return append([]string(nil), s...) }

// hostileCommand turns an entry's Try line into a command line with the
// hostile item it and the fixtures in place: "<{}" is standard input,
// leading NAME=VALUE words are environment; a definition field's Try is a
// definition (ferry.yaml or zarf.yaml) written into dir, with the hostile
// item linked into it as "hostile", and the command is create or convert.
func hostileCommand(t *testing.T, e inputs.Entry, it corpusItem, fx hostileFixtures, dir, out string) (args []string, stdin string, env []string) {
	t.Helper()
	switch e.Family() {
	case "ferry.yaml", "zarf.yaml":
		def := filepath.Join(dir, "def")
		mustDo(t, os.MkdirAll(def, 0o755))
		// The hostile item is placed inside the definition's folder, as
		// a link: a link to /dev/zero, a FIFO or a folder must be refused
		// as what it leads to, one out of the folder as leading out.
		mustDo(t, os.Symlink(it.value, filepath.Join(def, "hostile")))
		body := strings.ReplaceAll(e.Try, "{}", "hostile")
		writeFile(t, filepath.Join(def, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n")
		if e.Family() == "ferry.yaml" {
			writeFile(t, filepath.Join(def, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata:\n  name: hostile\n  version: 1.0.0\n"+body)
			return []string{"package", "create", def, "-f", out, "--sbom=false"}, "", nil
		}
		writeFile(t, filepath.Join(def, "zarf.yaml"), zarfHeader+body)
		return []string{"package", "convert", filepath.Join(def, "zarf.yaml"), "-f", filepath.Join(filepath.Dir(out), "ferry.yaml")}, "", nil
	}
	words := strings.Fields(e.Try)
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		k, v, _ := strings.Cut(words[0], "=")
		env = append(env, k+"="+fill(v, it.value, fx, dir, out))
		words = words[1:]
	}
	for _, w := range words {
		if strings.HasPrefix(w, "<") {
			stdin = fill(w[1:], it.value, fx, dir, out)
			continue
		}
		args = append(args, fill(w, it.value, fx, dir, out))
	}
	return args, stdin, env
}

// fill puts the hostile item and the fixtures into one word of a Try line.
func fill(w, item string, fx hostileFixtures, dir, out string) string {
	// {host} is the hostile registry's host of a registry item.
	host, _, _ := strings.Cut(item, "/")
	w = strings.ReplaceAll(w, "{host}", host)
	w = strings.ReplaceAll(w, "{}", item)
	w = strings.ReplaceAll(w, "{outdir}", filepath.Dir(out))
	w = strings.ReplaceAll(w, "{out}", out)
	if strings.Contains(w, "{root}") {
		root := filepath.Join(dir, "root")
		os.MkdirAll(root, 0o755)
		w = strings.ReplaceAll(w, "{root}", root)
	}
	if strings.Contains(w, "{dockerdir}") {
		d := filepath.Join(dir, "docker")
		os.MkdirAll(d, 0o755)
		os.Symlink(item, filepath.Join(d, "config.json"))
		w = strings.ReplaceAll(w, "{dockerdir}", d)
	}
	for k, v := range fx {
		w = strings.ReplaceAll(w, k, v)
	}
	return w
}

// TestHostileKubeconfigFiles: the files a kubeconfig names (a CA, a
// client key, a token file) are held to the kubeconfig's own bounds, not
// read whole or waited on by client-go.
func TestHostileKubeconfigFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	mustDo(t, syscall.Mkfifo(fifo, 0o644))
	for field, value := range map[string]string{"certificate-authority": "/dev/zero", "token-file": fifo, "client-key": "/dev/zero"} {
		t.Run(field, func(t *testing.T) {
			cluster, user := "server: https://127.0.0.1:1", "token: t"
			if field == "certificate-authority" {
				cluster += ", certificate-authority: " + value
			} else if field == "token-file" {
				user = "tokenFile: " + value
			} else {
				user = "client-certificate: " + value + ", client-key: " + value
			}
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			writeFile(t, kc, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {"+cluster+"}}]\nusers: [{name: u, user: {"+user+"}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n")
			r := runHostile(t, dir, nil, "", []string{"list", "--kubeconfig", kc}, inputs.DefaultBudget)
			if r.killed || r.code != 1 || !strings.Contains(r.stderr, value) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
				t.Errorf("a kubeconfig naming %s as its %s: exit %d, killed %v, after %s: %.300s", value, field, r.code, r.killed, r.elapsed, r.stderr)
			}
		})
	}
}

// TestOutputIsNotInput: a command never writes its result over a file it
// reads — the definition, a manifest it names, the package a delta is made
// of — whatever path names it.
func TestOutputIsNotInput(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "def")
	writeFile(t, filepath.Join(def, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(def, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(def, "f.txt"), "hello\n")
	pkg := filepath.Join(dir, "p.tar.zst")
	if _, stderr, code := runFerry(t, dir, "package", "create", def, "-f", pkg, "--sbom=false"); code != 0 {
		t.Fatal(stderr)
	}
	for _, args := range [][]string{
		{"package", "create", def, "-f", filepath.Join(def, "ferry.yaml"), "--sbom=false"},
		{"package", "create", def, "-f", filepath.Join(def, "..", "def", "m.yaml"), "--sbom=false"},
		{"package", "delta", pkg, "--have", pkg, "-f", pkg},
	} {
		before := map[string][]byte{}
		for _, p := range []string{filepath.Join(def, "ferry.yaml"), filepath.Join(def, "m.yaml"), pkg} {
			before[p], _ = os.ReadFile(p)
		}
		_, stderr, code := runFerry(t, dir, args...)
		if code != 1 || !strings.Contains(stderr, "which this command reads") {
			t.Errorf("ferry %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		for p, b := range before {
			if now, _ := os.ReadFile(p); !bytes.Equal(now, b) {
				t.Errorf("ferry %s changed %s", strings.Join(args, " "), p)
			}
		}
	}
}
