package artifact

import "github.com/opencontainers/go-digest"

// Phases of long work reported through ProgressFunc.
const (
	PhaseResolve = "resolve" // an item of the definition was resolved
	PhaseWrite   = "write"   // a blob is being written to an archive
	PhaseRead    = "read"    // a blob is being read and verified
	PhasePush    = "push"    // a blob was pushed to, or found in, a registry
	PhasePull    = "pull"    // a blob is being pulled from a registry
)

// Progress is one progress report. Byte counts are cumulative over the
// whole operation; totals are 0 when unknown.
type Progress struct {
	Phase      string
	Item       string
	Digest     digest.Digest
	Bytes      int64
	TotalBytes int64
	Blobs      int
	TotalBlobs int
}

// ProgressFunc receives progress reports. It is called from the goroutine
// doing the work and must return quickly.
type ProgressFunc func(Progress)
