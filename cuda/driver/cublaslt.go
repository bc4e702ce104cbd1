package driver

import (
	"fmt"
	"unsafe"
)

// blasLt is BlasLt over libcublasLt.so.
type blasLt struct{ b *binding }

var _ BlasLt = (*blasLt)(nil)

func (l *blasLt) check(s sym, r uintptr) error {
	res := Result(int32(r)) // cublasStatus_t is a C enum (int)
	if res == 0 {
		return nil
	}
	return &Error{Lib: LibCublasLt, Func: funcName(s), Code: res,
		Name: retString(l.b.call(cublasLtGetStatusName, uintptr(res))),
		Msg:  retString(l.b.call(cublasLtGetStatusString, uintptr(res)))}
}

func (l *blasLt) Version() int { return int(l.b.call(cublasLtGetVersion)) }

func (l *blasLt) Create() (LtHandle, error) {
	var h LtHandle
	err := l.check(cublasLtCreate, l.b.call(cublasLtCreate, uintptr(unsafe.Pointer(&h))))
	return h, err
}

func (l *blasLt) Destroy(h LtHandle) error {
	return l.check(cublasLtDestroy, l.b.call(cublasLtDestroy, uintptr(h)))
}

func (l *blasLt) MatmulDescCreate(compute ComputeType, scale DataType) (LtDesc, error) {
	var d LtDesc
	err := l.check(cublasLtMatmulDescCreate, l.b.call(cublasLtMatmulDescCreate, uintptr(unsafe.Pointer(&d)), uintptr(compute), uintptr(scale)))
	return d, err
}

func (l *blasLt) MatmulDescDestroy(d LtDesc) error {
	return l.check(cublasLtMatmulDescDestroy, l.b.call(cublasLtMatmulDescDestroy, uintptr(d)))
}

func (l *blasLt) MatmulDescSetAttribute(d LtDesc, a LtDescAttr, v []byte) error {
	if len(v) == 0 {
		return fmt.Errorf("cublasLt: attribute %d without a value", a)
	}
	return l.check(cublasLtMatmulDescSetAttribute, l.b.call(cublasLtMatmulDescSetAttribute, uintptr(d), uintptr(a), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v))))
}

// MatrixLayoutCreate passes ld, an int64_t, as its two's-complement bits.
func (l *blasLt) MatrixLayoutCreate(t DataType, rows, cols uint64, ld int64) (LtLayout, error) {
	var lay LtLayout
	err := l.check(cublasLtMatrixLayoutCreate, l.b.call(cublasLtMatrixLayoutCreate, uintptr(unsafe.Pointer(&lay)), uintptr(t), uintptr(rows), uintptr(cols), uintptr(ld)))
	return lay, err
}

func (l *blasLt) MatrixLayoutDestroy(lay LtLayout) error {
	return l.check(cublasLtMatrixLayoutDestroy, l.b.call(cublasLtMatrixLayoutDestroy, uintptr(lay)))
}

func (l *blasLt) MatrixLayoutSetAttribute(lay LtLayout, a LtLayoutAttr, v []byte) error {
	if len(v) == 0 {
		return fmt.Errorf("cublasLt: attribute %d without a value", a)
	}
	return l.check(cublasLtMatrixLayoutSetAttribute, l.b.call(cublasLtMatrixLayoutSetAttribute, uintptr(lay), uintptr(a), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v))))
}

func (l *blasLt) MatmulPreferenceCreate() (LtPref, error) {
	var p LtPref
	err := l.check(cublasLtMatmulPreferenceCreate, l.b.call(cublasLtMatmulPreferenceCreate, uintptr(unsafe.Pointer(&p))))
	return p, err
}

func (l *blasLt) MatmulPreferenceDestroy(p LtPref) error {
	return l.check(cublasLtMatmulPreferenceDestroy, l.b.call(cublasLtMatmulPreferenceDestroy, uintptr(p)))
}

func (l *blasLt) MatmulPreferenceSetAttribute(p LtPref, a LtPrefAttr, v []byte) error {
	if len(v) == 0 {
		return fmt.Errorf("cublasLt: attribute %d without a value", a)
	}
	return l.check(cublasLtMatmulPreferenceSetAttribute, l.b.call(cublasLtMatmulPreferenceSetAttribute, uintptr(p), uintptr(a), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v))))
}

func (l *blasLt) MatmulAlgoGetHeuristic(h LtHandle, d LtDesc, a, b, c, dd LtLayout, p LtPref, n int) ([]LtHeuristic, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cublasLt: asked for %d algorithms", n)
	}
	res := make([]LtHeuristic, n)
	var got int32
	err := l.check(cublasLtMatmulAlgoGetHeuristic, l.b.call(cublasLtMatmulAlgoGetHeuristic,
		uintptr(h), uintptr(d), uintptr(a), uintptr(b), uintptr(c), uintptr(dd), uintptr(p),
		uintptr(n), uintptr(unsafe.Pointer(&res[0])), uintptr(unsafe.Pointer(&got))))
	if err != nil {
		return nil, err
	}
	return res[:max(0, min(int(got), n))], nil
}

func (l *blasLt) Matmul(h LtHandle, d LtDesc, alpha *float32, a DevicePtr, ad LtLayout, b DevicePtr, bd LtLayout,
	beta *float32, c DevicePtr, cd LtLayout, dst DevicePtr, dd LtLayout,
	algo *LtAlgo, workspace DevicePtr, workspaceSize uint64, s Stream) error {
	return l.check(cublasLtMatmul, l.b.call(cublasLtMatmul, uintptr(h), uintptr(d),
		uintptr(unsafe.Pointer(alpha)), uintptr(a), uintptr(ad), uintptr(b), uintptr(bd),
		uintptr(unsafe.Pointer(beta)), uintptr(c), uintptr(cd), uintptr(dst), uintptr(dd),
		uintptr(unsafe.Pointer(algo)), uintptr(workspace), uintptr(workspaceSize), uintptr(s)))
}
