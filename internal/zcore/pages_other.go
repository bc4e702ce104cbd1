//go:build !linux

package zcore

type mapping struct{}

func mapF32(n int) ([]float32, mapping, error) { return make([]float32, n), mapping{}, nil }

func (mapping) release(f []float32, lo, hi, _, _ int, _ *PageCache) { clear(f[lo:hi]) }

func (mapping) acquire([]float32, int, int, *PageCache, bool) {}

// stash holds no pages off Linux: Pages release by clearing.
type stash struct{ held []struct{} }

func newStash(int) (stash, error) { return stash{}, nil }
func (*stash) put(uintptr) bool   { return false }
func (*stash) take(uintptr) bool  { return false }
func (*stash) disable()           {}
func (*stash) setRoom(int)        {}
func (*stash) close()             {}

func (mapping) unmap() {}
