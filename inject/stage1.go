package inject

import (
	"fmt"
	"os"
	"path/filepath"
)

// Stage1FileName is the file name of the stage-1 binary for goarch, as
// `make injector` writes it into bin/ and LoadStage1 looks for it.
func Stage1FileName(goarch string) string { return "ferry-injector-linux-" + goarch }

// MaxStage1Size is the size budget of the stage-1 binary per architecture.
const MaxStage1Size = 3 << 20

// LoadStage1 reads the stage-1 binary for goarch from dir (e.g. the
// repository's bin/, where `make injector` builds both architectures; a
// released ferry ships them beside itself).
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
