// Package benchenv steadies a benchmark's machine before it measures.
//
// On a virtual machine whose balloon device reports free pages to the host
// (virtio free page reporting), the host discards every page the guest
// frees, and the guest pays a host fault the next time it touches one. On
// the 2-core VMs ferry is measured on, writing a 1 GiB file took 0.2 s into
// pages the kernel had used before and 2.5 s into reported ones, depending
// only on which pages the kernel picked: that drowned the ratios the budgets
// are about. Quiet turns reporting off for the benchmark and warms memory
// once, so that every tool measured writes into the same kind of page.
package benchenv

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// reportingOrder is the kernel's knob: free blocks of at least this order
// are reported; above the largest order (10), none are.
const reportingOrder = "/sys/module/page_reporting/parameters/page_reporting_order"

// Quiet turns free page reporting off until the benchmark ends (when the
// kernel has it and the process may change it) and touches warmGiB GiB of
// memory once, then frees it, so the page cache finds pages the host backs.
// It reports what it did on the benchmark's log.
func Quiet(b testing.TB, warmGiB int) {
	b.Helper()
	old, err := os.ReadFile(reportingOrder)
	if err != nil {
		b.Logf("benchenv: no free page reporting here (%v)", err)
		return
	}
	if err := os.WriteFile(reportingOrder, []byte("11"), 0); err != nil {
		b.Logf("benchenv: cannot turn free page reporting off (%v); measurements may be noisy", err)
		return
	}
	b.Cleanup(func() { _ = os.WriteFile(reportingOrder, old, 0) })
	if s := os.Getenv("FERRY_BENCH_WARM_GIB"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			warmGiB = n
		}
	}
	warm(warmGiB)
	b.Logf("benchenv: free page reporting off (order %s → 11), %d GiB of memory warmed", strings.TrimSpace(string(old)), warmGiB)
}

// warm touches gib GiB of anonymous memory and gives it back to the kernel.
func warm(gib int) {
	chunks := make([][]byte, 0, gib)
	for range gib {
		c := make([]byte, 1<<30)
		for i := 0; i < len(c); i += 4096 {
			c[i] = 1
		}
		chunks = append(chunks, c)
	}
	runtime.KeepAlive(chunks)
	chunks = nil
	debug.FreeOSMemory()
}
