//go:build !linux

package checkpoint_test

import "time"

// evictCache does nothing off Linux: loads may read from the page cache.
func evictCache(string) error { return nil }

const evictsCache = false

// cpuTime is 0 off Linux: the benchmark reports no CPU time.
func cpuTime() time.Duration { return 0 }

// resetPeakRSS does nothing off Linux.
func resetPeakRSS() error { return nil }

// peakRSS is 0, 0 off Linux: the benchmark reports no resident set.
func peakRSS() (now, peak int64) { return 0, 0 }
