//go:build !linux

package checkpoint_test

import "time"

// evictCache does nothing off Linux: loads may read from the page cache.
func evictCache(string) error { return nil }

const evictsCache = false

// cpuTime is 0 off Linux: the benchmark reports no CPU time.
func cpuTime() time.Duration { return 0 }
