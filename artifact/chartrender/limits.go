package chartrender

import (
	"time"

	"github.com/ferrypkg/ferry/artifact"
)

// Limits on the child that loads, packages and renders charts (Limited). A
// chart is a program nobody here vetted: `{{ until 100000000 }}`, `{{ repeat
// 1073741824 "x" }}`, a template including itself twice at each of 40
// levels, a values.yaml of millions of nodes each cost gigabytes or minutes.
// Real charts need a small part of each limit (see docs/performance.md).
const (
	// DefaultMemory bounds the child's memory (512 MiB): its heap
	// (RLIMIT_DATA, on Linux) and its resident set, polled.
	DefaultMemory = 512 << 20
	// DefaultTimeout bounds loading and packaging one chart, or rendering
	// it (30 s).
	DefaultTimeout = 30 * time.Second
	// DefaultOutput bounds what one chart renders to (64 MiB): what
	// find-images and create hold of a chart's rendering, as of a
	// manifest bundle (artifact.MaxManifestBundleSize).
	DefaultOutput = artifact.MaxManifestBundleSize
)

// Limits bound the child of a Limited for each chart. A zero field is its
// default.
type Limits struct {
	// Memory bounds the child's memory; DefaultMemory if 0.
	Memory int64
	// Timeout bounds each chart's loading and packaging, and each
	// chart's rendering; DefaultTimeout if 0.
	Timeout time.Duration
	// Output bounds what one chart renders to, its hooks included;
	// DefaultOutput if 0.
	Output int64
}

// withDefaults is l with its zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	if l.Memory <= 0 {
		l.Memory = DefaultMemory
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.Output <= 0 {
		l.Output = DefaultOutput
	}
	return l
}
