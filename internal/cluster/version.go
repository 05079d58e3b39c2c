package cluster

import (
	"errors"
	"fmt"
	"strconv"
)

// FormatGeneration numbers the formats ferry stores in a cluster and its
// registry (the Secrets and ConfigMaps of this package's schemas, the
// deployed packages' records, the CRDs, the registry's repositories and
// storage layout; docs/operations.md lists them). A ferry refuses to init
// a cluster whose recorded generation is newer than its own: it would
// write formats the newer ferry's objects do not expect.
//
// Generation 0 is every ferry before the record (VersionName) existed;
// generation 1 writes it. A change to a stored format comes with a
// migration run by init (deploy/install) and the next generation.
const FormatGeneration = 1

// VersionName is the ConfigMap of ferry's namespace that records which
// ferry set the cluster up and which ran init last (see Setup).
const VersionName = "ferry-version"

// Keys of the VersionName ConfigMap's data.
const (
	versionVersion       = "version"
	versionCommit        = "commit"
	versionGeneration    = "generation"
	versionSetUpVersion  = "setUpVersion"
	versionSetUpCommit   = "setUpCommit"
	versionSetUpGenerate = "setUpGeneration"
)

// Ferry names one ferry: its version and commit (as `ferry version`
// prints them; empty when unknown) and the format generation it writes.
type Ferry struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	Generation int    `json:"generation"`
}

// String is "v1.2.3 (commit abc123456789, formats 1)"; an unknown version
// is "unknown", an unknown commit left out.
func (f Ferry) String() string {
	v := f.Version
	if v == "" {
		v = "unknown"
	}
	if f.Commit == "" {
		return fmt.Sprintf("%s (formats %d)", v, f.Generation)
	}
	return fmt.Sprintf("%s (commit %.12s, formats %d)", v, f.Commit, f.Generation)
}

// Setup is what the VersionName ConfigMap records: the ferry whose init
// first wrote it, and the ferry whose init ran last. A cluster an earlier
// ferry set up (generation 0) records SetUpBy with no version.
type Setup struct {
	SetUpBy  Ferry `json:"setUpBy"`
	LastInit Ferry `json:"lastInit"`
}

// Generation is the newest format generation written to the cluster.
func (s Setup) Generation() int { return max(s.SetUpBy.Generation, s.LastInit.Generation) }

// Data returns s as the ConfigMap's data.
func (s Setup) Data() map[string]string {
	return map[string]string{
		versionVersion: s.LastInit.Version, versionCommit: s.LastInit.Commit, versionGeneration: strconv.Itoa(s.LastInit.Generation),
		versionSetUpVersion: s.SetUpBy.Version, versionSetUpCommit: s.SetUpBy.Commit, versionSetUpGenerate: strconv.Itoa(s.SetUpBy.Generation),
	}
}

// SetupFromData reads a Setup from the ConfigMap's data; a generation
// that is not a number in [0, 1000000] is an error naming the key; a
// version or commit that is not at most 64 printable characters is read
// as "(unreadable)".
func SetupFromData(data map[string]string) (Setup, error) {
	gen := func(key string) (int, error) {
		v := data[key]
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return 0, fmt.Errorf("ConfigMap %s: %s %.40q is not a format generation: %w", VersionName, key, v, ErrUnreadableRecord)
		}
		return n, nil
	}
	last, err := gen(versionGeneration)
	if err != nil {
		return Setup{}, err
	}
	first, err := gen(versionSetUpGenerate)
	if err != nil {
		return Setup{}, err
	}
	return Setup{
		SetUpBy:  Ferry{Version: printable(data[versionSetUpVersion]), Commit: printable(data[versionSetUpCommit]), Generation: first},
		LastInit: Ferry{Version: printable(data[versionVersion]), Commit: printable(data[versionCommit]), Generation: last},
	}, nil
}

// printable is v when it is at most 64 bytes of printable ASCII with no
// space (a version or a commit, said in one-line messages), else
// "(unreadable)".
func printable(v string) string {
	if len(v) > 64 {
		return "(unreadable)"
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return "(unreadable)"
		}
	}
	return v
}

// ErrUnreadableRecord means the VersionName ConfigMap's generations are
// not numbers ferry writes: garbled, or written by a ferry of another
// record format; the cluster's formats are unknown.
var ErrUnreadableRecord = errors.New("the record is unreadable")

// ErrDowngrade means a ferry older than the cluster's formats was asked to
// write them (see DowngradeError).
var ErrDowngrade = errors.New("the cluster's formats are newer than this ferry's")

// DowngradeError is ErrDowngrade with both ferrys: Recorded, the newest
// the cluster records, and Running, the one refused.
type DowngradeError struct {
	Recorded, Running Ferry
}

func (e *DowngradeError) Error() string {
	return fmt.Sprintf("the cluster holds formats of generation %d, written by ferry %s; this ferry is %s",
		e.Recorded.Generation, e.Recorded, e.Running)
}

// Unwrap gives ErrDowngrade.
func (e *DowngradeError) Unwrap() error { return ErrDowngrade }

// CheckGeneration returns a *DowngradeError when the cluster's recorded
// formats (s) are newer than running's, nil otherwise.
func CheckGeneration(s Setup, running Ferry) error {
	if s.Generation() <= running.Generation {
		return nil
	}
	rec := s.LastInit
	if s.SetUpBy.Generation > rec.Generation {
		rec = s.SetUpBy
	}
	return &DowngradeError{Recorded: rec, Running: running}
}
