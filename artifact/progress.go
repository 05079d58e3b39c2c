package artifact

import ocispec "github.com/opencontainers/image-spec/specs-go/v1"

// Phase is what a progress event reports.
type Phase string

// Phases of long work reported through ProgressFunc.
const (
	PhaseResolve Phase = "resolve" // an item of the definition was resolved (Item)
	PhaseWrite   Phase = "write"   // a blob was written to an archive
	PhaseRead    Phase = "read"    // a blob was read and verified
	PhasePush    Phase = "push"    // a blob was uploaded to a registry, or found there (Skipped)
	PhasePull    Phase = "pull"    // a blob was fetched from a registry, verified and written
)

// Progress is one event: a blob (Desc) went through a phase, with the
// bytes that moved for it (0 for a blob the registry had); or, without a
// blob, an item of the work (Item: an image resolved, a release installed).
// TotalBlobs and TotalBytes are the whole operation's, when known (0
// otherwise), so that a renderer can show how far it is.
type Progress struct {
	Phase      Phase
	Desc       ocispec.Descriptor
	Bytes      int64
	Skipped    bool
	Item       string
	TotalBlobs int
	TotalBytes int64
}

// ProgressFunc receives progress events. Events of one operation may come
// from several goroutines at once (a push's parallel streams): a
// ProgressFunc must be safe for concurrent use and return quickly.
type ProgressFunc func(Progress)
