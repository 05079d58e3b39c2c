package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// The tests of issue 15's CLI items: one flag meaning, typos, version,
// credentials and TLS, PKG|REF resolution, tagless push and the smaller
// output fixes.

// cliPackageDir writes goodDef and its files into a new folder.
func cliPackageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), goodDef)
	writeFile(t, filepath.Join(dir, "m.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cli\n")
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
	return dir
}

// cliPackage is cliPackageDir with the package created in it as
// cli-0.1.0.tar.zst.
func cliPackage(t *testing.T) string {
	t.Helper()
	dir := cliPackageDir(t)
	if _, stderr, code := runFerry(t, dir, "package", "create"); code != 0 {
		t.Fatal(stderr)
	}
	return dir
}

// wantFail checks a one-line error containing want, exit 1, nothing on stdout.
func wantFail(t *testing.T, stdout, stderr string, code int, want string) {
	t.Helper()
	if code != 1 || !strings.HasPrefix(stderr, "ferry: ") || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", code, stdout, stderr, want)
	}
}

// TestCLIOutputFlag: -o is the output format in every command, -f the
// archive; each wrong guess is a one-line error saying which is which.
func TestCLIOutputFlag(t *testing.T) {
	dir := cliPackageDir(t)
	out, stderr, code := runFerry(t, dir, "package", "create", "-o", "json")
	var created struct{ Path string }
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created.Path != "cli-0.1.0.tar.zst" {
		t.Fatalf("create -o json: exit %d, %q %q", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "json")); err == nil {
		t.Fatal("create -o json wrote a file named json")
	}
	noKube := []string{"KUBECONFIG=" + filepath.Join(dir, "none")}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"file to -o", []string{"package", "create", "-o", "app.tar.zst"}, "name the archive to write with -f app.tar.zst"},
		{"file to pull -o", []string{"package", "pull", "127.0.0.1:1/x:1", "-o", "x.tar"}, "name the archive to write with -f x.tar"},
		{"format to -f", []string{"package", "create", "-f", "json"}, "for json output use -o json (for a file of that name, -f ./json)"},
		{"format to pull -f", []string{"package", "pull", "127.0.0.1:1/x:1", "-f", "yaml"}, "-f/--file is the archive to write"},
		{"file to inspect -o", []string{"package", "inspect", "cli-0.1.0.tar.zst", "-o", "out.json"}, "this command writes no file"},
		{"yaml", []string{"package", "verify", "cli-0.1.0.tar.zst", "-o", "yaml"}, "-o/--output must be text or json, not \"yaml\""},
		{"list yaml", []string{"list", "-o", "yaml"}, "-o/--output must be text or json"},
		{"serve", []string{"registry", "serve", "-o", "yaml"}, "-o/--output must be text or json"},
		{"check", []string{"registry", "check", "127.0.0.1:1", "-o", "report.json"}, "this command writes no file"},
		{"old -O", []string{"package", "inspect", "cli-0.1.0.tar.zst", "-O", "json"}, "the output format is -o/--output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runFerryEnv(t, dir, noKube, tt.args...)
			wantFail(t, stdout, stderr, code, tt.want)
		})
	}
	// -o json is accepted where it was refused: list gets past its flags
	// to the (missing) cluster, inspect prints JSON.
	stdout, stderr, code := runFerryEnv(t, dir, noKube, "list", "-o", "json")
	wantFail(t, stdout, stderr, code, "kubeconfig")
	out, stderr, code = runFerry(t, dir, "package", "inspect", "cli-0.1.0.tar.zst", "-o", "json")
	if code != 0 || !strings.Contains(out, `"mode": "0644"`) || strings.Contains(out, `"mode": 420`) {
		t.Fatalf("inspect -o json: exit %d, %s %s", code, out, stderr)
	}
}

// TestCLIUnknownSubcommand: a mistyped subcommand is an error with a
// suggestion, not help with exit 0.
func TestCLIUnknownSubcommand(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"package", "inspec", "x"}, `unknown command "inspec" for "ferry package"; did you mean "inspect"?`},
		{[]string{"registry", "lgin"}, `did you mean "login"?`},
		{[]string{"key", "genrate"}, `did you mean "generate"?`},
		{[]string{"packge"}, `did you mean "package"?`},
		{[]string{"key", "zzz"}, `unknown command "zzz" for "ferry key"; commands: generate`},
	} {
		stdout, stderr, code := runFerry(t, t.TempDir(), tt.args...)
		wantFail(t, stdout, stderr, code, tt.want)
	}
	if out, _, code := runFerry(t, t.TempDir(), "package"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("ferry package: exit %d, %q", code, out)
	}
}

// TestCLIVersion: version, --version and version -o json.
func TestCLIVersion(t *testing.T) {
	out, stderr, code := runFerry(t, t.TempDir(), "version", "-o", "json")
	var v map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version -o json: exit %d, %q %q", code, out, stderr)
	}
	for _, k := range []string{"version", "commit", "modified", "goVersion", "platform"} {
		if _, ok := v[k]; !ok {
			t.Errorf("version -o json has no %q: %s", k, out)
		}
	}
	if v["goVersion"] != runtime.Version() || v["platform"] != runtime.GOOS+"/"+runtime.GOARCH || v["version"] == "" {
		t.Errorf("version -o json: %s", out)
	}
	// version: the front's line, then the full binary's (the same build);
	// --version: the front's.
	text, _, _ := runFerry(t, t.TempDir(), "version")
	flag, _, code := runFerry(t, t.TempDir(), "--version")
	front, full, _ := strings.Cut(text, "\n")
	if code != 0 || front+"\n" != flag || !strings.HasPrefix(text, "ferry ") || !strings.Contains(text, runtime.Version()) ||
		full != "ferry-full "+strings.TrimPrefix(flag, "ferry ") {
		t.Errorf("version %q, --version %q", text, flag)
	}
	if full, ok := v["full"].(map[string]any); !ok || full["goVersion"] != runtime.Version() {
		t.Errorf("version -o json has no full binary's version: %s", out)
	}
}

// authRegistry serves an in-process registry that wants bob:pa55 and
// returns its host.
func authRegistry(t *testing.T, o registryServeOptions) string {
	t.Helper()
	o.htpasswd = registrytest.Htpasswd(t, "bob", "pa55")
	url, _ := serveForTest(t, o)
	return url[strings.Index(url, "://")+3:]
}

// TestCLILoginLogout: login writes the docker config file oras-go reads
// back, push uses it, logout removes it; a wrong password stores nothing.
func TestCLILoginLogout(t *testing.T) {
	dir := cliPackage(t)
	host := authRegistry(t, registryServeOptions{})
	cfgDir := t.TempDir()
	env := []string{"DOCKER_CONFIG=" + cfgDir}
	t.Setenv("DOCKER_CONFIG", cfgDir)
	stored := func() string {
		store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := store.Get(context.Background(), host)
		if err != nil {
			t.Fatal(err)
		}
		return c.Username + ":" + c.Password
	}

	stdout, stderr, code := runFerryIn(t, dir, env, "wrong\n", "registry", "login", host, "-u", "bob", "--password-stdin")
	wantFail(t, stdout, stderr, code, "login to "+host)
	if got := stored(); got != ":" {
		t.Fatalf("a failed login stored %q", got)
	}
	stdout, stderr, code = runFerryEnv(t, dir, env, "package", "push", "cli-0.1.0.tar.zst", host+"/cli:0.1.0")
	wantFail(t, stdout, stderr, code, "")

	if out, stderr, code := runFerryIn(t, dir, env, "pa55\n", "registry", "login", host, "-u", "bob", "--password-stdin"); code != 0 || !strings.Contains(out, filepath.Join(cfgDir, "config.json")) {
		t.Fatalf("login: exit %d, %q %q", code, out, stderr)
	}
	if got := stored(); got != "bob:pa55" {
		t.Fatalf("config.json holds %q, want bob:pa55", got)
	}
	if _, stderr, code := runFerryEnv(t, dir, env, "package", "push", "cli-0.1.0.tar.zst", host+"/cli:0.1.0"); code != 0 {
		t.Fatalf("push after login: %s", stderr)
	}
	if _, stderr, code := runFerryEnv(t, dir, env, "registry", "logout", host); code != 0 {
		t.Fatalf("logout: %s", stderr)
	}
	if got := stored(); got != ":" {
		t.Fatalf("after logout config.json holds %q", got)
	}
	stdout, stderr, code = runFerryIn(t, dir, env, "pa55\n", "registry", "login", host, "--password-stdin")
	wantFail(t, stdout, stderr, code, "--username is required")
}

// TestCLIPasswordStdin: -u with --password-stdin authenticates a push, an
// inspect and a pull to that registry without any docker config file.
func TestCLIPasswordStdin(t *testing.T) {
	dir := cliPackage(t)
	host := authRegistry(t, registryServeOptions{})
	env := []string{"DOCKER_CONFIG=" + t.TempDir()}
	ref := host + "/cli:0.1.0"
	stdout, stderr, code := runFerryEnv(t, dir, env, "package", "push", "cli-0.1.0.tar.zst", ref)
	wantFail(t, stdout, stderr, code, "")
	for _, args := range [][]string{
		{"package", "push", "cli-0.1.0.tar.zst", ref},
		{"package", "inspect", ref},
		{"package", "pull", ref, "-f", "pulled.tar.zst"},
	} {
		if _, stderr, code := runFerryIn(t, dir, env, "pa55\n", append(args, "-u", "bob", "--password-stdin")...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	stdout, stderr, code = runFerryIn(t, dir, env, "pa55\n", "package", "inspect", ref, "--password-stdin")
	wantFail(t, stdout, stderr, code, "--password-stdin needs --username")
}

// TestCLICAFileInsecure: a registry with a self-signed certificate is
// reached with --ca-file, or with --insecure (and a warning), and refused
// without either.
func TestCLICAFileInsecure(t *testing.T) {
	dir := cliPackage(t)
	cert, key, _, err := fixture.SelfSignedLoopback(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	url, _ := serveForTest(t, registryServeOptions{tlsCert: cert, tlsKey: key})
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("serve with TLS at %s", url)
	}
	ref := strings.TrimPrefix(url, "https://") + "/cli:0.1.0"
	stdout, stderr, code := runFerry(t, dir, "package", "push", "cli-0.1.0.tar.zst", ref)
	wantFail(t, stdout, stderr, code, "")
	if out, stderr, code := runFerry(t, dir, "package", "push", "cli-0.1.0.tar.zst", ref, "--ca-file", cert); code != 0 || stderr != "" {
		t.Fatalf("push --ca-file: exit %d, %q %q", code, out, stderr)
	}
	out, stderr, code := runFerry(t, dir, "package", "inspect", ref, "--insecure")
	if code != 0 || !strings.Contains(out, "cli 0.1.0") || !strings.Contains(stderr, "WARNING: --insecure") {
		t.Fatalf("inspect --insecure: exit %d, %q %q", code, out, stderr)
	}
	stdout, stderr, code = runFerry(t, dir, "package", "inspect", ref, "--ca-file", key)
	wantFail(t, stdout, stderr, code, "no PEM certificate")
}

// TestCLISource: PKG|REF is resolved by explicit prefixes, then the disk;
// a missing file is "no such file", a tagless reference says so.
func TestCLISource(t *testing.T) {
	dir := cliPackageDir(t)
	for _, tt := range []struct{ arg, want string }{
		{"dist.d/app.tar.zst", "ferry: dist.d/app.tar.zst: no such file or directory"},
		{"out/app.tar.zst", "ferry: out/app.tar.zst: no such file or directory"},
		{"./registry.example/app", "ferry: ./registry.example/app: no such file or directory"},
		{"127.0.0.1:1/app", "names no tag or digest"},
		{"oci://127.0.0.1:1/Bad", "neither a file nor a valid registry reference"},
	} {
		stdout, stderr, code := runFerry(t, dir, "package", "inspect", tt.arg)
		wantFail(t, stdout, stderr, code, tt.want)
	}
}

// TestCLITaglessPush: push to host/repo tags the package's version.
func TestCLITaglessPush(t *testing.T) {
	dir := cliPackage(t)
	url, _ := serveForTest(t, registryServeOptions{})
	host := strings.TrimPrefix(url, "http://")
	out, stderr, code := runFerry(t, dir, "package", "push", "cli-0.1.0.tar.zst", "oci://"+host+"/pkgs/cli", "-o", "json")
	var res struct{ Ref, Root string }
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Ref != host+"/pkgs/cli:0.1.0" {
		t.Fatalf("tagless push: exit %d, %q %q", code, out, stderr)
	}
	repo, err := remote.NewRepository(host + "/pkgs/cli")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	if d, err := repo.Resolve(context.Background(), "0.1.0"); err != nil || d.Digest.String() != res.Root {
		t.Fatalf("tag 0.1.0: %v %v, want %s", d.Digest, err, res.Root)
	}
	stdout, stderr, code := runFerry(t, dir, "package", "push", "cli-0.1.0.tar.zst", host+"/pkgs/cli@"+res.Root)
	wantFail(t, stdout, stderr, code, "push to a tag")
}

// TestCLIFormatAndText: --format against the extension, the inspect text
// (sizes named, plurals, no trailing space).
func TestCLIFormatAndText(t *testing.T) {
	dir := cliPackageDir(t)
	stdout, stderr, code := runFerry(t, dir, "package", "create", "--format", "tar", "-f", "x.tar.zst")
	wantFail(t, stdout, stderr, code, "--format tar, but -f x.tar.zst names a tar.zst archive")
	if _, stderr, code := runFerry(t, dir, "package", "create", "--format", "tar"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code := runFerry(t, dir, "package", "inspect", "cli-0.1.0.tar")
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{"(1 file)", "Component c (required)\n", "\nContent ", "\nBlobs ", "\nArchive "} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing space in %q", line)
		}
	}
}

// TestCLILoadAddr: registry load prints the mirror configuration for the
// address given, not 127.0.0.1:5000.
func TestCLILoadAddr(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ferry.yaml"), "apiVersion: ferry.dev/v1alpha1\nkind: Package\nmetadata: {name: mir, version: 0.1.0}\nplatforms: [linux/"+runtime.GOARCH+"]\ncomponents:\n  - name: c\n    images:\n      - {ref: docker.io/library/app:1.0, layout: images}\n")
	writeLayoutImage(t, filepath.Join(dir, "images"), "1.0")
	if _, stderr, code := runFerry(t, dir, "package", "create", "-f", "mir.tar"); code != 0 {
		t.Fatal(stderr)
	}
	out, stderr, code := runFerry(t, dir, "registry", "load", "mir.tar", "--root", "store", "--addr", "mirror.example:5000")
	if code != 0 || !strings.Contains(out, "mirror.example:5000") || strings.Contains(out, "127.0.0.1:5000") {
		t.Fatalf("load --addr: exit %d, %s %s", code, out, stderr)
	}
}
