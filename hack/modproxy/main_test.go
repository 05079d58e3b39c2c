package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// gitIn runs git in dir with a fixed identity and commit time.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newRepo makes a repository with a root module and a nested one, one
// commit, and a linked worktree of it.
func newRepo(t *testing.T) (main, worktree, commit string) {
	main = t.TempDir()
	gitIn(t, main, "init", "-q", "-b", "main")
	writeFiles(t, main, map[string]string{
		"go.mod":              "module example.com/m\n\ngo 1.26\n",
		"m.go":                "package m\n",
		"cmd/m/main.go":       "package main\n\nfunc main() {}\n",
		"helper/go.mod":       "module example.com/m/helper\n\ngo 1.26\n",
		"helper/helper.go":    "package helper\n",
		"testdata/x/data.txt": "data\n",
	})
	gitIn(t, main, "add", "-A")
	gitIn(t, main, "commit", "-q", "-m", "one")
	commit = gitIn(t, main, "rev-parse", "HEAD")
	worktree = filepath.Join(t.TempDir(), "wt")
	gitIn(t, main, "worktree", "add", "-q", worktree, "HEAD")
	return main, worktree, commit
}

func runOut(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(args, &out); err != nil {
		t.Fatalf("modproxy %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out.String())
}

func TestVersion(t *testing.T) {
	main, wt, commit := newRepo(t)
	pseudo := "v0.0.0-20260102030405-" + commit[:12]
	if got := runOut(t, "version", "-C", wt); got != pseudo {
		t.Errorf("untagged: %s, want %s", got, pseudo)
	}
	// A later commit after a tag: the next patch's pseudo-version.
	gitIn(t, main, "tag", "v1.2.0")
	gitIn(t, main, "tag", "sbomgen/v9.0.0") // another module's tag: not ours
	writeFiles(t, main, map[string]string{"n.go": "package m\n"})
	gitIn(t, main, "add", "-A")
	gitIn(t, main, "commit", "-q", "-m", "two")
	next := gitIn(t, main, "rev-parse", "HEAD")
	for _, tc := range []struct{ name, rev, want string }{
		{"after a tag", "HEAD", "v1.2.1-0.20260102030405-" + next[:12]},
		{"on a tag", commit, "v1.2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runOut(t, "version", "-C", main, "-rev", tc.rev); got != tc.want {
				t.Errorf("%s, want %s", got, tc.want)
			}
		})
	}
	gitIn(t, main, "tag", "v1.3.0-rc.1")
	gitIn(t, main, "tag", "v1.3.0")
	if got := runOut(t, "version", "-C", main); got != "v1.3.0" {
		t.Errorf("two tags on HEAD: %s, want the highest, v1.3.0", got)
	}
}

func TestWrite(t *testing.T) {
	_, wt, commit := newRepo(t)
	// Uncommitted changes stay out of the module.
	writeFiles(t, wt, map[string]string{"m.go": "package m // changed\n", "new.go": "package m\n"})
	out := t.TempDir()
	v := "v0.0.0-20260102030405-" + commit[:12]
	got := runOut(t, "write", "-C", wt, "-o", out, "-modules", ".,helper")
	if want := "example.com/m@" + v + "\nexample.com/m/helper@" + v; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
	for _, tc := range []struct {
		mod, gomod string
		files      []string
	}{
		{"example.com/m", "module example.com/m\n\ngo 1.26\n", []string{"cmd/m/main.go", "go.mod", "m.go", "testdata/x/data.txt"}},
		{"example.com/m/helper", "module example.com/m/helper\n\ngo 1.26\n", []string{"go.mod", "helper.go"}},
	} {
		t.Run(tc.mod, func(t *testing.T) {
			dir := filepath.Join(out, filepath.FromSlash(tc.mod), "@v")
			read := func(name string) string {
				t.Helper()
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			if got := read("list"); got != v+"\n" {
				t.Errorf("list %q", got)
			}
			if got, want := read(v+".info"), `{"Version":"`+v+`","Time":"2026-01-02T03:04:05Z"}`; got != want {
				t.Errorf("info %s, want %s", got, want)
			}
			if got := read(v + ".mod"); got != tc.gomod {
				t.Errorf("mod %q, want %q", got, tc.gomod)
			}
			cf, err := modzip.CheckZip(modVersion(tc.mod, v), filepath.Join(dir, v+".zip"))
			if err != nil {
				t.Fatal(err)
			}
			var files []string
			for _, f := range cf.Valid {
				files = append(files, strings.TrimPrefix(f, tc.mod+"@"+v+"/"))
			}
			if strings.Join(files, " ") != strings.Join(tc.files, " ") || len(cf.Omitted)+len(cf.Invalid) > 0 {
				t.Errorf("zip holds %v (omitted %v, invalid %v), want %v", files, cf.Omitted, cf.Invalid, tc.files)
			}
			zb := read(v + ".zip")
			if strings.Contains(zb, "changed") || strings.Contains(zb, "new.go") {
				t.Error("the zip holds uncommitted changes")
			}
		})
	}
	// A second version joins the list, in order.
	runOut(t, "write", "-C", wt, "-o", out, "-modules", ".", "-version", "v0.0.1")
	b, err := os.ReadFile(filepath.Join(out, "example.com", "m", "@v", "list"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), v+"\nv0.0.1\n"; got != want {
		t.Errorf("list %q, want %q", got, want)
	}
}

func TestWriteRefused(t *testing.T) {
	_, wt, _ := newRepo(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"write", "-C", wt}, "-o DIR is required"},
		{"no go.mod", []string{"write", "-C", wt, "-o", t.TempDir(), "-modules", "cmd"}, "cmd/go.mod"},
		{"bad version", []string{"write", "-C", wt, "-o", t.TempDir(), "-version", "1.0"}, "1.0"},
		{"unknown revision", []string{"version", "-C", wt, "-rev", "nope"}, "nope"},
		{"unknown command", []string{"publish"}, `unknown command "publish"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func modVersion(path, v string) module.Version { return module.Version{Path: path, Version: v} }
