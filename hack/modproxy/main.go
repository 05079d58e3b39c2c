// Command modproxy writes a commit of this repository as a module version
// into a file-system module proxy, so that `go install …@VERSION` can be
// tried offline, as a user would run it against a published release:
//
//	GOPROXY=file://DIR,$(go env GOPROXY) GONOSUMDB=github.com/ferrypkg/ferry \
//	  go install github.com/ferrypkg/ferry/cmd/ferry@VERSION
//
// Usage:
//
//	modproxy version [-C REPO] [-rev REV]
//	modproxy write -o DIR [-C REPO] [-rev REV] [-version V] [-modules .,sbomgen]
//
// REPO is a git work tree (default .; a linked worktree works). version prints the module version of REV (default HEAD): the highest
// semantic-version tag on it, else a pseudo-version as the go command
// derives one (v0.0.0-<commit time>-<12 hex>, or vX.Y.(Z+1)-0.<time>-<hex>
// after the last tag vX.Y.Z).
//
// write puts each module of -modules (folders of the repository, each with
// its go.mod; default the root module and sbomgen, the SBOM helper's) at
// REV into DIR as version V (default: what version prints), in the
// proxy's layout: <module>/@v/list, V.info, V.mod and V.zip. The zip holds
// the committed files only (golang.org/x/mod/zip.CreateFromVCS, as the go
// command makes it): uncommitted changes are not in it. DIR may already
// hold other modules or versions; list gains V.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: modproxy version [-C REPO] [-rev REV] | modproxy write -o DIR [-C REPO] [-rev REV] [-version V] [-modules .,sbomgen]")
	}
	fs := flag.NewFlagSet("modproxy "+args[0], flag.ContinueOnError)
	rev := fs.String("rev", "HEAD", "the commit to write")
	dir := fs.String("C", ".", "the repository's work tree")
	switch args[0] {
	case "version":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		r, err := openRepo(*dir, *rev)
		if err != nil {
			return err
		}
		v, err := r.version()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, v)
		return nil
	case "write":
		out := fs.String("o", "", "the proxy folder (GOPROXY=file://DIR)")
		version := fs.String("version", "", "the version to write (default: what `modproxy version` prints)")
		modules := fs.String("modules", ".,sbomgen", "comma-separated folders of the repository whose modules are written")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return errors.New("write: -o DIR is required")
		}
		r, err := openRepo(*dir, *rev)
		if err != nil {
			return err
		}
		v := *version
		if v == "" {
			if v, err = r.version(); err != nil {
				return err
			}
		}
		for _, m := range strings.Split(*modules, ",") {
			p, err := r.write(*out, path.Clean(m), v)
			if err != nil {
				return fmt.Errorf("%s: %w", m, err)
			}
			fmt.Fprintf(stdout, "%s@%s\n", p, v)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q (version or write)", args[0])
}

// repo is one commit of a git repository.
type repo struct {
	// root is the folder that holds .git: for a linked worktree, that of
	// the main worktree, since zip.CreateFromVCS runs git there (the
	// commit is in their shared object store).
	root   string
	commit string    // full hex
	time   time.Time // commit time, UTC
}

func openRepo(dir, rev string) (*repo, error) {
	common, err := git(dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return nil, err
	}
	if filepath.Base(common) != ".git" {
		return nil, fmt.Errorf("%s is not a .git folder (a bare repository?)", common)
	}
	commit, err := git(dir, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	ct, err := git(dir, "log", "-1", "--format=%ct", commit)
	if err != nil {
		return nil, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("commit time %q: %w", ct, err)
	}
	return &repo{root: filepath.Dir(common), commit: commit, time: time.Unix(sec, 0).UTC()}, nil
}

// version is the highest semantic-version tag on the commit, else its
// pseudo-version after the highest tag reachable from it.
func (r *repo) version() (string, error) {
	on, err := r.tags("--points-at", r.commit)
	if err != nil {
		return "", err
	}
	if len(on) > 0 {
		return on[len(on)-1], nil
	}
	before, err := r.tags("--merged", r.commit)
	if err != nil {
		return "", err
	}
	older := ""
	if len(before) > 0 {
		older = before[len(before)-1]
	}
	return module.PseudoVersion("", older, r.time, r.commit[:12]), nil
}

// tags lists the canonical semantic-version tags git tag selects with
// args, lowest first.
func (r *repo) tags(args ...string) ([]string, error) {
	out, err := git(r.root, append([]string{"tag", "--list", "v*"}, args...)...)
	if err != nil {
		return nil, err
	}
	var tags []string
	for _, t := range strings.Fields(out) {
		if semver.IsValid(t) && semver.Canonical(t) == t {
			tags = append(tags, t)
		}
	}
	semver.Sort(tags)
	return tags, nil
}

// write writes the module in folder dir at the commit into the proxy
// folder out as version v, and returns its path.
func (r *repo) write(out, dir, v string) (string, error) {
	subdir := ""
	if dir != "." {
		subdir = dir
	}
	gomod, err := gitOutput(r.root, "show", r.commit+":"+path.Join(subdir, "go.mod"))
	if err != nil {
		return "", err
	}
	modPath := modfile.ModulePath(gomod)
	if modPath == "" {
		return "", errors.New("go.mod names no module")
	}
	m := module.Version{Path: modPath, Version: v}
	if err := module.Check(m.Path, m.Version); err != nil {
		return "", err
	}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return "", err
	}
	escV, err := module.EscapeVersion(v)
	if err != nil {
		return "", err
	}
	vdir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	var zip bytes.Buffer
	if err := modzip.CreateFromVCS(&zip, m, r.root, r.commit, subdir); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, r.time})
	if err != nil {
		return "", err
	}
	files := []struct {
		name string
		data []byte
	}{{escV + ".zip", zip.Bytes()}, {escV + ".mod", gomod}, {escV + ".info", info}}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(vdir, f.name), f.data, 0o644); err != nil {
			return "", err
		}
	}
	return m.Path, addToList(filepath.Join(vdir, "list"), v)
}

// addToList adds v to the proxy's version list at p (one version a line).
func addToList(p, v string) error {
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	list := strings.Fields(string(b))
	if !slices.Contains(list, v) {
		list = append(list, v)
	}
	semver.Sort(list)
	return os.WriteFile(p, []byte(strings.Join(list, "\n")+"\n"), 0o644)
}

// git runs git in dir and returns its trimmed standard output.
func git(dir string, args ...string) (string, error) {
	out, err := gitOutput(dir, args...)
	return strings.TrimSpace(string(out)), err
}

// gitOutput runs git in dir and returns its standard output.
func gitOutput(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
