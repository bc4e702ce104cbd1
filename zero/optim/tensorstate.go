package optim

import "fmt"

// TensorStateful is an optimizer whose torch state-dict entry for each
// tensor holds more than "step" and the whole-buffer state of StateNames:
// DeepSpeed's 1-bit optimizers keep, per parameter, the sizes of the
// compressed exchange (tensor_size, corrected_tensor_size,
// server_chunk_size), the rank's compression errors (worker_error,
// server_error) and, for 0/1 Adam, its interval counters and
// momentum_accumulator. A checkpoint of one writes TensorState's entries as the
// tensors' entries, in their order; loading hands back what was read.
type TensorStateful interface {
	// TensorState is each segment's state-dict entry (a copy), in
	// DeepSpeed's key order, "step" first; a nil entry is a tensor with no
	// state yet.
	TensorState() [][]Entry
	// LoadTensorState restores from the entries read, one per segment (the
	// whole-buffer tensors and "step" are restored by LoadState and
	// SetStepCount first), what DeepSpeed's load_state_dict keeps of them.
	LoadTensorState(entries [][]Entry) error
}

// Entry is one key of a tensor's state-dict entry. Value is an int64 (a
// Python int), a float64 (a Python float), a []float32 (a 1-D float32
// tensor of its own, such as an error buffer), a Shaped or a StateRef.
type Entry struct {
	Key   string
	Value any
}

// Shaped is a float32 tensor of the parameter's shape (0/1 Adam's
// momentum_accumulator, zeros_like(p)).
type Shaped []float32

// StateRef stands for the segment's slice of the whole-buffer state tensor
// of that name (exp_avg, ...), with the parameter's shape.
type StateRef string

// entryInt is the Python int key of e; ok false when e has none.
func entryInt(e []Entry, key string) (v int64, ok bool, err error) {
	for _, x := range e {
		if x.Key != key {
			continue
		}
		switch n := x.Value.(type) {
		case int64:
			return n, true, nil
		case float64:
			if n == float64(int64(n)) {
				return int64(n), true, nil
			}
		}
		return 0, false, fmt.Errorf("state %q is %v, not an int", key, x.Value)
	}
	return 0, false, nil
}

// errorEntries are the compression errors of a padded buffer of n elements
// on size ranks (worker_error, server_error), from ef or zeros.
func errorEntries(w, s []float32, n, size int) []Entry {
	if w == nil {
		w, s = make([]float32, n), make([]float32, n/size)
	}
	return []Entry{{"worker_error", append([]float32(nil), w...)}, {"server_error", append([]float32(nil), s...)}}
}

// sizeEntries are the sizes DeepSpeed's 1-bit optimizers keep per tensor.
func sizeEntries(n, size int) []Entry {
	padded := OneBitPadded(n, size)
	return []Entry{{"tensor_size", int64(n)}, {"corrected_tensor_size", int64(padded)}, {"server_chunk_size", int64(padded / size)}}
}
