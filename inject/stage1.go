package inject

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Stage1Package is the import path of the stage-1 injector command.
const Stage1Package = "github.com/ferrypkg/ferry/injector/cmd/ferry-injector"

// Stage1FileName is the file name of the stage-1 binary for goarch, as
// `make injector` writes it into bin/ and LoadStage1 looks for it.
func Stage1FileName(goarch string) string { return "ferry-injector-linux-" + goarch }

// BuildOptions say how to build stage 1.
type BuildOptions struct {
	// Dir is a directory inside the ferry module (the go command runs
	// there); the current directory if empty.
	Dir string
	// Go is the go command; "go" if empty.
	Go string
}

// BuildStage1 builds the stage-1 injector for linux/goarch into out with
// CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' and returns its size.
// It needs the Go toolchain and the ferry source tree; a released ferry
// embeds or ships the binaries instead (see LoadStage1).
func BuildStage1(ctx context.Context, goarch, out string, opts BuildOptions) (int64, error) {
	goCmd := opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, Stage1Package)
	cmd.Dir = opts.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("build stage 1 for linux/%s: %w: %s", goarch, err, bytes.TrimSpace(stderr.Bytes()))
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, fmt.Errorf("build stage 1 for linux/%s: %w", goarch, err)
	}
	return fi.Size(), nil
}

// MaxStage1Size is the size budget of the stage-1 binary per architecture.
const MaxStage1Size = 3 << 20

// LoadStage1 reads the stage-1 binary for goarch from dir (e.g. the
// repository's bin/, where `make injector` builds both architectures).
func LoadStage1(dir, goarch string) ([]byte, error) {
	p := filepath.Join(dir, Stage1FileName(goarch))
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("stage 1 for linux/%s: %w (build it with `make injector`)", goarch, err)
	}
	if len(b) > MaxStage1Size {
		return nil, fmt.Errorf("stage 1 %s: %d bytes exceeds the %d-byte budget", p, len(b), MaxStage1Size)
	}
	return b, nil
}
