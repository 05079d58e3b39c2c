// Package sbomexectest builds the ferry-sbom helper (module sbomgen) for
// tests that make real SBOMs, with the go command on PATH and the flags
// `make build` uses, so that the build cache `make build` fills serves it.
package sbomexectest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ferrypkg/ferry/artifact/sbomexec"
)

// EnvHelper names an environment variable that, when set, is the helper
// binary Path returns, instead of one it builds.
const EnvHelper = "FERRY_SBOM"

// Build builds the helper into dir and returns its path.
func Build(dir string) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	out := filepath.Join(dir, sbomexec.HelperName)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/ferry-sbom")
	cmd.Dir = filepath.Join(root, "sbomgen")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s in %s: %v\n%s", sbomexec.HelperName, cmd.Dir, err, msg)
	}
	return out, nil
}

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path returns the helper: $FERRY_SBOM if set, else one built (once per
// process) into a temporary folder that Cleanup removes.
func Path() (string, error) {
	if p := os.Getenv(EnvHelper); p != "" {
		return p, nil
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "ferry-sbom-bin-")
		if built.err == nil {
			built.path, built.err = Build(built.dir)
		}
	})
	return built.path, built.err
}

// Generator returns a Generator running the helper Path returns.
func Generator() (sbomexec.Generator, error) {
	p, err := Path()
	return sbomexec.Generator{Path: p}, err
}

// Cleanup removes what Path built; call it from TestMain after m.Run.
func Cleanup() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
}
