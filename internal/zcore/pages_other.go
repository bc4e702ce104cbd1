//go:build !linux

package zcore

import "errors"

type mapping struct{}

func mapF32(n int) ([]float32, mapping, error) { return make([]float32, n), mapping{}, nil }

func (mapping) release(p *Pages, lo, hi, _, _ int) { clear(p.f32[lo:hi]) }

func (mapping) acquire(*Pages, int, int, bool) {}

// Off Linux a mapping has no huge pages to park: Pages release by
// clearing, and a PageCache never holds a page.
func (mapping) firstHuge() int       { return 0 }
func (mapping) hugePages(int) int    { return 0 }
func (mapping) hugeAddr(int) uintptr { return 0 }
func (mapping) dropHuge(int)         {}

func movePage(uintptr, uintptr) error { return errors.ErrUnsupported }

func (mapping) unmap() {}
