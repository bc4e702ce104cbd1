package cuda

import (
	"errors"
	"fmt"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/device"
)

// Gemm describes a row-major matrix product, batched with strides:
//
//	C = alpha·op(A)·op(B) + beta·C,   op(A) M×K, op(B) K×N, C M×N
//
// A is stored M×K with row stride LDA (K×M when TransA), B K×N with LDB
// (N×K when TransB), C M×N with LDC; zero strides mean packed (K, N, N
// or M, K as the shapes say). Batch > 1 multiplies Batch matrices StrideA,
// StrideB and StrideC elements apart (attention's per-head products).
// Every product accumulates in float32 (CUBLAS_COMPUTE_32F): fp32 GEMMs
// never use TF32, and bf16/fp16 ones add their products in float32.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	LDA, LDB, LDC  int
	Batch          int
	StrideA        int64
	StrideB        int64
	StrideC        int64
	AType, BType   device.DType
	CType          device.DType
}

func (g Gemm) normalized() Gemm {
	if g.LDA == 0 {
		g.LDA = g.K
		if g.TransA {
			g.LDA = g.M
		}
	}
	if g.LDB == 0 {
		g.LDB = g.N
		if g.TransB {
			g.LDB = g.K
		}
	}
	if g.LDC == 0 {
		g.LDC = g.N
	}
	if g.Batch == 0 {
		g.Batch = 1
	}
	return g
}

// extent is how many elements of a row-major rows×cols matrix with row
// stride ld, batch members stride apart, the product touches.
func extent(rows, cols, ld, batch int, stride int64) int64 {
	return int64(batch-1)*stride + int64(rows-1)*int64(ld) + int64(cols)
}

// gemmPlan is what a Gemm shape needs, cached: the cuBLASLt descriptors
// and the algorithm the heuristic chose. Reusing one algorithm per shape
// keeps results identical from step to step.
type gemmPlan struct {
	desc      driver.LtDesc
	a, b, c   driver.LtLayout
	pref      driver.LtPref
	algo      driver.LtAlgo
	workspace uint64
}

// planKey is a shape and the alignment of its three matrices: cuBLASLt's
// fastest kernels assume 16-byte or wider alignment, so a view at an odd
// offset needs an algorithm chosen for it.
type planKey struct {
	Gemm
	alignA, alignB, alignC uint32
}

// alignment is the largest power of two, up to 256, dividing p.
func alignment(p driver.DevicePtr) uint32 {
	a := uint32(256)
	for a > 1 && uint64(p)%uint64(a) != 0 {
		a /= 2
	}
	return a
}

// blasState is the device's cuBLASLt handle and plan cache (worker-owned).
type blasState struct {
	h     driver.LtHandle
	plans map[planKey]*gemmPlan
}

// gemmWorkspace is each stream's cuBLASLt workspace (NVIDIA's
// recommendation for Hopper).
const gemmWorkspace = 32 << 20

func ltType(dt device.DType) driver.DataType {
	switch dt {
	case device.F32:
		return driver.R32F
	case device.BF16:
		return driver.R16BF
	case device.F16:
		return driver.R16F
	}
	panic(fmt.Sprintf("cuda: no cuBLASLt type for %v", dt))
}

func (q *Issuer) blas() (*blasState, error) {
	if q.blasSt != nil {
		return q.blasSt, nil
	}
	h, err := q.d.libs.BlasLt.Create()
	if err != nil {
		return nil, fmt.Errorf("cuda: cublasLtCreate: %w", err)
	}
	q.blasSt = &blasState{h: h, plans: map[planKey]*gemmPlan{}}
	return q.blasSt, nil
}

// plan maps the row-major product onto cuBLASLt's column-major one. A
// row-major matrix is the column-major matrix of its transpose, and
// (A·B)ᵀ = Bᵀ·Aᵀ, so C (M×N, row-major) is computed as the column-major
// N×M product op(B)ᵀ-as-stored times op(A)ᵀ-as-stored: cuBLASLt's "A" is
// our B with our TransB, its "B" is our A with our TransA, and m, n swap.
func (q *Issuer) plan(st *blasState, key planKey) (*gemmPlan, error) {
	if p, ok := st.plans[key]; ok {
		return p, nil
	}
	g := key.Gemm
	lt := q.d.libs.BlasLt
	p := &gemmPlan{}
	var err error
	if p.desc, err = lt.MatmulDescCreate(driver.Compute32F, driver.R32F); err != nil {
		return nil, err
	}
	if p.pref, err = lt.MatmulPreferenceCreate(); err != nil {
		return nil, err
	}
	op := func(t bool) int32 {
		if t {
			return driver.OpT
		}
		return driver.OpN
	}
	errs := []error{
		lt.MatmulDescSetAttribute(p.desc, driver.LtDescTransA, driver.Int32Attr(op(g.TransB))),
		lt.MatmulDescSetAttribute(p.desc, driver.LtDescTransB, driver.Int32Attr(op(g.TransA))),
	}
	// Stored shapes, column-major: our B (K×N row-major, or N×K with
	// TransB) is N×K (K×N); our A (M×K, or K×M) is K×M (M×K); C is N×M.
	ar, ac := uint64(g.N), uint64(g.K)
	if g.TransB {
		ar, ac = uint64(g.K), uint64(g.N)
	}
	br, bc := uint64(g.K), uint64(g.M)
	if g.TransA {
		br, bc = uint64(g.M), uint64(g.K)
	}
	layout := func(dt device.DType, rows, cols uint64, ld int, stride int64) driver.LtLayout {
		l, err := lt.MatrixLayoutCreate(ltType(dt), rows, cols, int64(ld))
		errs = append(errs, err)
		if err == nil && g.Batch > 1 {
			errs = append(errs, lt.MatrixLayoutSetAttribute(l, driver.LtLayoutBatchCount, driver.Int32Attr(int32(g.Batch))),
				lt.MatrixLayoutSetAttribute(l, driver.LtLayoutStridedOffset, driver.Int64Attr(stride)))
		}
		return l
	}
	p.a = layout(g.BType, ar, ac, g.LDB, g.StrideB)
	p.b = layout(g.AType, br, bc, g.LDA, g.StrideA)
	p.c = layout(g.CType, uint64(g.N), uint64(g.M), g.LDC, g.StrideC)
	// cuBLASLt's A is our B, its B our A; C and D are our C.
	errs = append(errs,
		lt.MatmulPreferenceSetAttribute(p.pref, driver.LtPrefMaxWorkspaceBytes, driver.Uint64Attr(gemmWorkspace)),
		lt.MatmulPreferenceSetAttribute(p.pref, driver.LtPrefMinAlignmentA, driver.Uint32Attr(key.alignB)),
		lt.MatmulPreferenceSetAttribute(p.pref, driver.LtPrefMinAlignmentB, driver.Uint32Attr(key.alignA)),
		lt.MatmulPreferenceSetAttribute(p.pref, driver.LtPrefMinAlignmentC, driver.Uint32Attr(key.alignC)),
		lt.MatmulPreferenceSetAttribute(p.pref, driver.LtPrefMinAlignmentD, driver.Uint32Attr(key.alignC)))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res, err := lt.MatmulAlgoGetHeuristic(st.h, p.desc, p.a, p.b, p.c, p.c, p.pref, 1)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 || res[0].State != 0 {
		return nil, fmt.Errorf("cuBLASLt has no algorithm for %+v", g)
	}
	p.algo, p.workspace = res[0].Algo, res[0].WorkspaceSize
	st.plans[key] = p
	return p, nil
}

// Gemm queues the product on s (see Gemm); A, B and C must hold the
// elements the shape touches.
func (q *Issuer) Gemm(s *Stream, g Gemm, alpha float32, A, B Mem, beta float32, C Mem) error {
	g = g.normalized()
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = g.K, g.M
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = g.N, g.K
	}
	if g.M <= 0 || g.N <= 0 || g.K <= 0 || g.LDA < ac || g.LDB < bc || g.LDC < g.N {
		panic(fmt.Sprintf("cuda: invalid Gemm %+v", g))
	}
	need("Gemm A", A, extent(ar, ac, g.LDA, g.Batch, g.StrideA), g.AType)
	need("Gemm B", B, extent(br, bc, g.LDB, g.Batch, g.StrideB), g.BType)
	need("Gemm C", C, extent(g.M, g.N, g.LDC, g.Batch, g.StrideC), g.CType)
	st, err := q.blas()
	if err != nil {
		return err
	}
	p, err := q.plan(st, planKey{g, alignment(A.ptr), alignment(B.ptr), alignment(C.ptr)})
	if err != nil {
		return fmt.Errorf("cuda: planning %+v: %w", g, err)
	}
	var ws Mem
	if p.workspace > 0 {
		if s.ws.IsNull() {
			if s.ws, err = q.Alloc(gemmWorkspace, s); err != nil {
				return err
			}
		}
		ws = s.ws
	}
	err = q.d.libs.BlasLt.Matmul(st.h, p.desc, &alpha, B.ptr, p.a, A.ptr, p.b, &beta, C.ptr, p.c, C.ptr, p.c,
		&p.algo, ws.ptr, min(p.workspace, uint64(ws.n)), s.h)
	if err != nil {
		return fmt.Errorf("cuda: cublasLtMatmul %+v: %w", g, err)
	}
	return nil
}

// dropBlas releases the handle and every cached plan.
func (q *Issuer) dropBlas() error {
	st := q.blasSt
	if st == nil {
		return nil
	}
	lt := q.d.libs.BlasLt
	var errs []error
	for _, p := range st.plans {
		errs = append(errs, lt.MatmulDescDestroy(p.desc), lt.MatrixLayoutDestroy(p.a), lt.MatrixLayoutDestroy(p.b),
			lt.MatrixLayoutDestroy(p.c), lt.MatmulPreferenceDestroy(p.pref))
	}
	errs = append(errs, lt.Destroy(st.h))
	q.blasSt = nil
	return errors.Join(errs...)
}

// GemmPlans reports how many GEMM shapes have a cached plan.
func (d *Device) GemmPlans() int {
	n := 0
	d.Do(func(q *Issuer) error {
		if q.blasSt != nil {
			n = len(q.blasSt.plans)
		}
		return nil
	})
	return n
}
