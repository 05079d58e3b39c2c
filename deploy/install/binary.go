package install

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// BinaryFileName is the file name, in InstallOptions.BinDir, of a static
// ferry binary for linux/goarch, used for the agent when the ferry
// installing it is not one (another OS or architecture than the node's).
func BinaryFileName(goarch string) string { return "ferry-linux-" + goarch }

// FullBinaryName is the full ferry binary, which has the agent command, as
// `make build` names it beside the front binary (bin/ferry, which has not).
const FullBinaryName = "ferry-full"

// FindBinary returns the ferry binary to build the agent's image from for
// a linux/goarch node: ferry (if empty, binDir/FullBinaryName when there,
// else binDir/ferry, a single full binary as `go build ./cmd/ferry` makes
// it) when it is a static linux/goarch executable, else
// binDir/BinaryFileName(goarch), which must be one.
func FindBinary(ferry, binDir, goarch string) (string, error) {
	if ferry == "" {
		ferry = filepath.Join(binDir, FullBinaryName)
		if _, err := os.Stat(ferry); err != nil {
			ferry = filepath.Join(binDir, "ferry")
		}
	}
	errSelf := checkStatic(ferry, goarch)
	if errSelf == nil {
		return ferry, nil
	}
	other := filepath.Join(binDir, BinaryFileName(goarch))
	errOther := checkStatic(other, goarch)
	if errOther == nil {
		return other, nil
	}
	return "", &BinaryError{Arch: goarch, Path: other, Err: fmt.Errorf("%w; %w", errSelf, errOther)}
}

// BinaryError means FindBinary found no static ferry binary for the
// nodes: neither the running one nor the one at Path will do.
type BinaryError struct {
	Arch string // the nodes' GOARCH
	Path string // where a binary for Arch was looked for
	Err  error  // why neither will do
}

func (e *BinaryError) Error() string {
	return fmt.Sprintf("no static ferry binary for linux/%s to run the agent from: %v", e.Arch, e.Err)
}

func (e *BinaryError) Unwrap() error { return e.Err }

// checkStatic says why the file at path is not a static linux/goarch
// executable, if it is not.
func checkStatic(path, goarch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	machine := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	if machine != goarch || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is a %s %s, not a linux/%s executable", path, f.Type, f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}
