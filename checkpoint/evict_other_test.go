//go:build !linux

package checkpoint_test

// evictCache does nothing off Linux: loads may read from the page cache.
func evictCache(string) error { return nil }

const evictsCache = false
