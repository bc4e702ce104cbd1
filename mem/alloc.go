package mem

// F32 allocates n float32 values of category c in tier t, accounted.
func (a *Accountant) F32(c Category, t Tier, n int) ([]float32, error) {
	if err := a.Reserve(c, t, int64(n)*4); err != nil {
		return nil, err
	}
	return make([]float32, n), nil
}

// FreeF32 releases a buffer returned by F32. The slice must not be used after.
func (a *Accountant) FreeF32(c Category, t Tier, s []float32) {
	a.Release(c, t, int64(cap(s))*4)
}

// U16 allocates n 16-bit values (fp16 or bf16 bit patterns) of category c in tier t.
func (a *Accountant) U16(c Category, t Tier, n int) ([]uint16, error) {
	if err := a.Reserve(c, t, int64(n)*2); err != nil {
		return nil, err
	}
	return make([]uint16, n), nil
}

// FreeU16 releases a buffer returned by U16.
func (a *Accountant) FreeU16(c Category, t Tier, s []uint16) {
	a.Release(c, t, int64(cap(s))*2)
}
