package device

import (
	"fmt"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/mem"
)

// CPU is the host backend: buffers are Go memory, streams are goroutines,
// and matrix products go to a blas.Engine.
type CPU struct {
	acct *mem.Accountant
	gemm blas.Engine
}

var _ Device = (*CPU)(nil)

// NewCPU returns the CPU device of the rank that owns acct, computing matrix
// products with engine (blas.New(...)).
func NewCPU(acct *mem.Accountant, engine blas.Engine) *CPU {
	if acct == nil || engine == nil {
		panic("device: NewCPU needs an accountant and a BLAS engine")
	}
	return &CPU{acct: acct, gemm: engine}
}

// Name is "cpu".
func (c *CPU) Name() string { return "cpu" }

// Accountant is the rank's memory accountant.
func (c *CPU) Accountant() *mem.Accountant { return c.acct }

// BLAS is the matrix-product engine. It satisfies any Gemmer interface with
// blas.Engine's Sgemm signature.
func (c *CPU) BLAS() blas.Engine { return c.gemm }

// Alloc makes an accounted buffer in mem.Device or mem.PinnedHost memory.
func (c *CPU) Alloc(cat mem.Category, t mem.Tier, dt DType, n int) (*Buffer, error) {
	switch {
	case n < 0:
		panic(fmt.Sprintf("device: Alloc of %d elements", n))
	case !dt.Valid():
		panic(fmt.Sprintf("device: Alloc of invalid %v", dt))
	case t != mem.Device && t != mem.PinnedHost:
		panic(fmt.Sprintf("device: the cpu device does not allocate %s memory", t))
	case cat < 0 || int(cat) >= len(mem.Categories()):
		panic(fmt.Sprintf("device: Alloc with invalid %v", cat))
	}
	b, err := alloc(c.acct, cat, t, dt, n)
	if err != nil {
		return nil, fmt.Errorf("device cpu: allocating %d × %s for %s: %w", n, dt, cat, err)
	}
	return b, nil
}

// Free returns b's bytes to the accountant.
func (c *CPU) Free(b *Buffer) { b.free(c.acct) }

// NewStream returns a stream whose work runs on a goroutine of its own,
// started when work arrives and gone when the queue is empty.
func (c *CPU) NewStream() Stream { return newCPUStream() }
