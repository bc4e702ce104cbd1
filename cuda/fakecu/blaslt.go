package fakecu

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"github.com/dszero/dszero/cuda/driver"
	"github.com/dszero/dszero/half"
)

// BlasLt is a driver.BlasLt whose matmul runs on the fake driver's
// streams, in float64 from the widened inputs, rounded once to D's type.
// It supports what dszero asks for and rejects the rest as cuBLASLt
// would reject a bad descriptor: compute type CUBLAS_COMPUTE_32F only (so a
// TF32 request fails), float32 alpha and beta.
type BlasLt struct {
	d *Driver

	mu         sync.Mutex
	handles    map[driver.LtHandle]bool
	descs      map[driver.LtDesc]*ltDesc
	layouts    map[driver.LtLayout]*ltLayout
	prefs      map[driver.LtPref]*ltPref
	heuristics int
	matmuls    int
}

var _ driver.BlasLt = (*BlasLt)(nil)

type ltDesc struct {
	compute        driver.ComputeType
	scale          driver.DataType
	transA, transB int32
}

type ltLayout struct {
	typ        driver.DataType
	rows, cols uint64
	ld         int64
	batch      int32
	stride     int64
}

type ltPref struct {
	maxWorkspace uint64
	align        [4]uint32 // minimum alignment of A, B, C, D the algorithm may assume
}

// NewBlasLt returns a fake cuBLASLt over d's memory and streams.
func NewBlasLt(d *Driver) *BlasLt {
	return &BlasLt{d: d, handles: map[driver.LtHandle]bool{}, descs: map[driver.LtDesc]*ltDesc{},
		layouts: map[driver.LtLayout]*ltLayout{}, prefs: map[driver.LtPref]*ltPref{}}
}

// Counts reports how many heuristic queries and matmuls ran.
func (l *BlasLt) Counts() (heuristics, matmuls int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heuristics, l.matmuls
}

var ltStatusNames = map[driver.Result]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
}

func ltError(fn string, code driver.Result, why string) *driver.Error {
	return &driver.Error{Lib: driver.LibCublasLt, Func: fn, Code: code, Name: ltStatusNames[code], Msg: why}
}

func (l *BlasLt) Version() int { return 120804 }

func (l *BlasLt) Create() (driver.LtHandle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := driver.LtHandle(l.d.lockedHandle())
	l.handles[h] = true
	return h, nil
}

func (l *BlasLt) Destroy(h driver.LtHandle) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.handles[h] {
		return ltError("cublasLtDestroy", 1, "unknown handle")
	}
	delete(l.handles, h)
	return nil
}

func (l *BlasLt) MatmulDescCreate(c driver.ComputeType, s driver.DataType) (driver.LtDesc, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := driver.LtDesc(l.d.lockedHandle())
	l.descs[h] = &ltDesc{compute: c, scale: s}
	return h, nil
}

func (l *BlasLt) MatmulDescDestroy(h driver.LtDesc) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.descs[h] == nil {
		return ltError("cublasLtMatmulDescDestroy", 7, "unknown descriptor")
	}
	delete(l.descs, h)
	return nil
}

func attrInt(v []byte, size int) (int64, bool) {
	if len(v) != size {
		return 0, false
	}
	var b [8]byte
	copy(b[:], v)
	x := binary.LittleEndian.Uint64(b[:])
	if size == 4 {
		return int64(int32(uint32(x))), true
	}
	return int64(x), true
}

func (l *BlasLt) MatmulDescSetAttribute(h driver.LtDesc, a driver.LtDescAttr, v []byte) error {
	const fn = "cublasLtMatmulDescSetAttribute"
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.descs[h]
	x, ok := attrInt(v, 4)
	if d == nil || !ok {
		return ltError(fn, 7, "bad descriptor or value size")
	}
	switch a {
	case driver.LtDescTransA:
		d.transA = int32(x)
	case driver.LtDescTransB:
		d.transB = int32(x)
	default:
		return ltError(fn, 7, fmt.Sprintf("attribute %d is not supported by the fake", a))
	}
	return nil
}

func (l *BlasLt) MatrixLayoutCreate(t driver.DataType, rows, cols uint64, ld int64) (driver.LtLayout, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ld < int64(rows) || rows == 0 || cols == 0 {
		return 0, ltError("cublasLtMatrixLayoutCreate", 7, fmt.Sprintf("rows %d cols %d ld %d", rows, cols, ld))
	}
	h := driver.LtLayout(l.d.lockedHandle())
	l.layouts[h] = &ltLayout{typ: t, rows: rows, cols: cols, ld: ld, batch: 1}
	return h, nil
}

func (l *BlasLt) MatrixLayoutDestroy(h driver.LtLayout) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.layouts[h] == nil {
		return ltError("cublasLtMatrixLayoutDestroy", 7, "unknown layout")
	}
	delete(l.layouts, h)
	return nil
}

func (l *BlasLt) MatrixLayoutSetAttribute(h driver.LtLayout, a driver.LtLayoutAttr, v []byte) error {
	const fn = "cublasLtMatrixLayoutSetAttribute"
	l.mu.Lock()
	defer l.mu.Unlock()
	lay := l.layouts[h]
	if lay == nil {
		return ltError(fn, 7, "unknown layout")
	}
	switch a {
	case driver.LtLayoutBatchCount:
		x, ok := attrInt(v, 4)
		if !ok || x < 1 {
			return ltError(fn, 7, "batch count")
		}
		lay.batch = int32(x)
	case driver.LtLayoutStridedOffset:
		x, ok := attrInt(v, 8)
		if !ok || x < 0 {
			return ltError(fn, 7, "batch stride")
		}
		lay.stride = x
	default:
		return ltError(fn, 7, fmt.Sprintf("attribute %d is not supported by the fake", a))
	}
	return nil
}

func (l *BlasLt) MatmulPreferenceCreate() (driver.LtPref, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := driver.LtPref(l.d.lockedHandle())
	l.prefs[h] = &ltPref{}
	return h, nil
}

func (l *BlasLt) MatmulPreferenceDestroy(h driver.LtPref) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.prefs, h)
	return nil
}

func (l *BlasLt) MatmulPreferenceSetAttribute(h driver.LtPref, a driver.LtPrefAttr, v []byte) error {
	const fn = "cublasLtMatmulPreferenceSetAttribute"
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.prefs[h]
	if p == nil {
		return ltError(fn, 7, "unknown preference")
	}
	switch a {
	case driver.LtPrefMaxWorkspaceBytes:
		x, ok := attrInt(v, 8)
		if !ok {
			return ltError(fn, 7, "workspace size")
		}
		p.maxWorkspace = uint64(x)
	case driver.LtPrefMinAlignmentA, driver.LtPrefMinAlignmentB, driver.LtPrefMinAlignmentC, driver.LtPrefMinAlignmentD:
		x, ok := attrInt(v, 4)
		if !ok {
			return ltError(fn, 7, "alignment")
		}
		p.align[a-driver.LtPrefMinAlignmentA] = uint32(x)
	default:
		return ltError(fn, 7, "unsupported preference")
	}
	return nil
}

// check validates a matmul's descriptors and returns the problem size.
func (l *BlasLt) check(fn string, h driver.LtHandle, dh driver.LtDesc, a, b, c, dd driver.LtLayout) (desc *ltDesc, la, lb, lc *ltLayout, m, n, k int, err error) {
	desc, la, lb, lc = l.descs[dh], l.layouts[a], l.layouts[b], l.layouts[c]
	ld := l.layouts[dd]
	if !l.handles[h] || desc == nil || la == nil || lb == nil || lc == nil || ld == nil {
		return nil, nil, nil, nil, 0, 0, 0, ltError(fn, 7, "unknown handle, descriptor or layout")
	}
	if desc.compute != driver.Compute32F || desc.scale != driver.R32F {
		return nil, nil, nil, nil, 0, 0, 0, ltError(fn, 15, fmt.Sprintf("compute type %d, scale %v: the fake runs CUBLAS_COMPUTE_32F only", desc.compute, desc.scale))
	}
	if *lc != *ld {
		return nil, nil, nil, nil, 0, 0, 0, ltError(fn, 7, "C and D layouts differ")
	}
	m, n = int(lc.rows), int(lc.cols)
	ar, ac := int(la.rows), int(la.cols)
	if desc.transA == driver.OpT {
		ar, ac = ac, ar
	}
	br, bc := int(lb.rows), int(lb.cols)
	if desc.transB == driver.OpT {
		br, bc = bc, br
	}
	if ar != m || bc != n || ac != br || la.batch != lc.batch || lb.batch != lc.batch {
		return nil, nil, nil, nil, 0, 0, 0, ltError(fn, 7, fmt.Sprintf("op(A) %dx%d, op(B) %dx%d, C %dx%d, batches %d %d %d",
			ar, ac, br, bc, m, n, la.batch, lb.batch, lc.batch))
	}
	return desc, la, lb, lc, m, n, ac, nil
}

func (l *BlasLt) MatmulAlgoGetHeuristic(h driver.LtHandle, d driver.LtDesc, a, b, c, dd driver.LtLayout, p driver.LtPref, n int) ([]driver.LtHeuristic, error) {
	const fn = "cublasLtMatmulAlgoGetHeuristic"
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, _, _, _, _, _, _, err := l.check(fn, h, d, a, b, c, dd); err != nil {
		return nil, err
	}
	if l.prefs[p] == nil || n < 1 {
		return nil, ltError(fn, 7, "preference or count")
	}
	l.heuristics++
	r := driver.LtHeuristic{WorkspaceSize: min(1<<20, l.prefs[p].maxWorkspace), WavesCount: 1}
	r.Algo.Data[0] = 0xFA4E
	// The algorithm remembers the alignment it was chosen for; Matmul
	// rejects pointers less aligned, as cuBLASLt does.
	for i, al := range l.prefs[p].align {
		if al == 0 {
			al = 256
		}
		r.Algo.Data[1+i] = uint64(al)
	}
	return []driver.LtHeuristic{r}, nil
}

// extent is the number of elements a layout spans.
func (lay *ltLayout) extent() int {
	return int(int64(lay.batch-1)*lay.stride + int64(lay.cols-1)*lay.ld + int64(lay.rows))
}

// element reads element (i, j) of batch member bt, widened.
func element(t driver.DataType, buf []byte, lay *ltLayout, bt, i, j int) float64 {
	off := int64(bt)*lay.stride + int64(j)*lay.ld + int64(i)
	switch t {
	case driver.R32F:
		return float64(*(*float32)(unsafe.Pointer(&buf[4*off])))
	case driver.R16BF:
		return float64(half.F32FromBF16(*(*uint16)(unsafe.Pointer(&buf[2*off]))))
	}
	return float64(half.F32FromF16(*(*uint16)(unsafe.Pointer(&buf[2*off]))))
}

func store(t driver.DataType, buf []byte, off int64, v float32) {
	switch t {
	case driver.R32F:
		*(*float32)(unsafe.Pointer(&buf[4*off])) = v
	case driver.R16BF:
		*(*uint16)(unsafe.Pointer(&buf[2*off])) = half.BF16FromF32(v)
	default:
		*(*uint16)(unsafe.Pointer(&buf[2*off])) = half.F16FromF32(v)
	}
}

func (l *BlasLt) Matmul(h driver.LtHandle, dh driver.LtDesc, alpha *float32, a driver.DevicePtr, ad driver.LtLayout, b driver.DevicePtr, bd driver.LtLayout,
	beta *float32, c driver.DevicePtr, cd driver.LtLayout, dst driver.DevicePtr, dd driver.LtLayout,
	algo *driver.LtAlgo, workspace driver.DevicePtr, workspaceSize uint64, sh driver.Stream) error {
	const fn = "cublasLtMatmul"
	l.mu.Lock()
	desc, la, lb, lc, m, n, k, err := l.check(fn, h, dh, ad, bd, cd, dd)
	if err == nil && (alpha == nil || beta == nil || algo == nil || algo.Data[0] != 0xFA4E) {
		err = ltError(fn, 7, "alpha, beta or an algorithm not from the heuristic")
	}
	if err == nil {
		for i, p := range []driver.DevicePtr{a, b, c, dst} {
			if al := algo.Data[1+i]; al > 0 && uint64(p)%al != 0 {
				err = ltError(fn, 15, fmt.Sprintf("matrix %c at %#x is not %d-byte aligned as the algorithm assumes", "ABCD"[i], uintptr(p), al))
			}
		}
	}
	if err != nil {
		l.mu.Unlock()
		return err
	}
	l.matmuls++
	dsc, lA, lB, lC := *desc, *la, *lb, *lc
	l.mu.Unlock()
	al, be := float64(*alpha), float64(*beta) // host scalars are read during the call

	d := l.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.enter(fn, true); err != nil {
		return err
	}
	s, err := d.streamOf(fn, sh)
	if err != nil {
		return err
	}
	if workspaceSize > 0 {
		if err := d.checkRange(fn, workspace, workspaceSize); err != nil {
			return ltError(fn, 7, "workspace")
		}
	}
	for _, x := range []struct {
		p   driver.DevicePtr
		lay *ltLayout
	}{{a, &lA}, {b, &lB}, {c, &lC}, {dst, &lC}} {
		if err := d.checkRange(fn, x.p, uint64(x.lay.extent()*x.lay.typ.Size())); err != nil {
			return ltError(fn, 7, "a matrix is outside its allocation")
		}
	}
	s.push(func() *driver.Error {
		d.mu.Lock()
		A, e1 := d.span(a, uint64(lA.extent()*lA.typ.Size()))
		B, e2 := d.span(b, uint64(lB.extent()*lB.typ.Size()))
		C, e3 := d.span(c, uint64(lC.extent()*lC.typ.Size()))
		D, e4 := d.span(dst, uint64(lC.extent()*lC.typ.Size()))
		d.mu.Unlock()
		for _, e := range []error{e1, e2, e3, e4} {
			if e != nil {
				return fault(fn, e)
			}
		}
		out := make([]float32, m*n)
		for bt := range int(lC.batch) {
			for j := range n {
				for i := range m {
					var acc float64
					for p := range k {
						ai, aj := i, p
						if dsc.transA == driver.OpT {
							ai, aj = p, i
						}
						bi, bj := p, j
						if dsc.transB == driver.OpT {
							bi, bj = j, p
						}
						acc += element(lA.typ, A, &lA, bt, ai, aj) * element(lB.typ, B, &lB, bt, bi, bj)
					}
					v := al * acc
					if be != 0 { // beta 0: C is not read (a NaN there does not leak)
						v += be * element(lC.typ, C, &lC, bt, i, j)
					}
					out[j*m+i] = float32(v)
				}
			}
			// C may be D: every element of C is read before D is written.
			for j := range n {
				for i := range m {
					store(lC.typ, D, int64(bt)*lC.stride+int64(j)*lC.ld+int64(i), out[j*m+i])
				}
			}
		}
		return nil
	})
	return nil
}
