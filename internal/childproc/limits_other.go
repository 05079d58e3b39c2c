//go:build !linux

package childproc

import "os"

// setLimits does nothing where there is no prlimit: the time and output
// limits still hold.
func setLimits(int, Limits) {}

// usage is unknown outside Linux.
func usage(int) (rss, data, written int64, ok bool) { return 0, 0, 0, false }

func fileTooLarge(error, string) bool { return false }

func peakRSS(*os.ProcessState) int64 { return 0 }
