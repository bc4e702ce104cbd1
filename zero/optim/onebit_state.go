package optim

import "fmt"

// The checkpointed state of DeepSpeed 0.14.5's 1-bit optimizers
// (runtime/fp16/onebit/{adam,zoadam,lamb}.py), per tensor, as torch's
// Optimizer.state_dict holds it, and what their load_state_dict keeps.
//
// OnebitAdam: step (int), exp_avg, exp_avg_sq, tensor_size,
// corrected_tensor_size, server_chunk_size (ints), then worker_error and
// server_error (1-D float32 of the padded size and of the rank's chunk)
// where the tensor has them: the initialization pass makes them for every
// tensor and pops the last tensor's, which gets them back at the first
// compressed step. load_state_dict sets the phase from the step (warm-up
// below freeze_step) and pops the errors.
//
// ZeroOneAdam: step, exp_avg, exp_avg_sq, var_interval, var_counter,
// local_step_interval, local_step_counter, lrs (int 0, or a float once a
// frozen step has added the lr), the three sizes, worker_error,
// server_error, momentum_accumulator (the parameter's shape); the last
// tensor's errors, popped by the initialization pass and made again at the
// next step, follow its accumulator. load_state_dict pops the errors and
// the accumulator and sets the next step's gradient exchange from the step
// and var_interval.
//
// The errors written are the rank's (DeepSpeed's engine saves rank 0's).

var (
	_ TensorStateful = (*OneBitAdam)(nil)
	_ TensorStateful = (*ZeroOneAdam)(nil)
)

// TensorState implements TensorStateful.
func (o *OneBitAdam) TensorState() [][]Entry {
	out := make([][]Entry, len(o.segs))
	if !o.initialized && o.steps == 0 {
		return out // DeepSpeed's state is empty before the first step
	}
	size := o.x.c.Size()
	for i, s := range o.segs {
		e := []Entry{{"step", o.steps}, {"exp_avg", StateRef("exp_avg")}, {"exp_avg_sq", StateRef("exp_avg_sq")}}
		e = append(e, sizeEntries(s.Len, size)...)
		if w, sv := o.x.errors(i); w != nil {
			e = append(e, errorEntries(w, sv, len(w), size)...)
		}
		out[i] = e
	}
	return out
}

// LoadTensorState implements TensorStateful: the errors are dropped
// (SetStepCount has), the sizes checked against the segments.
func (o *OneBitAdam) LoadTensorState(entries [][]Entry) error {
	return checkTensorSizes("OnebitAdam", o.segs, entries)
}

// TensorState implements TensorStateful.
func (o *ZeroOneAdam) TensorState() [][]Entry {
	out := make([][]Entry, len(o.segs))
	if !o.initialized && o.steps == 0 {
		return out
	}
	size := o.x.c.Size()
	var lrs any = int64(0)
	if o.lrsFloat {
		lrs = o.lrs
	}
	for i, s := range o.segs {
		e := []Entry{{"step", o.steps}, {"exp_avg", StateRef("exp_avg")}, {"exp_avg_sq", StateRef("exp_avg_sq")},
			{"var_interval", o.varInterval}, {"var_counter", o.varCounter},
			{"local_step_interval", o.localInterval}, {"local_step_counter", o.localCounter}, {"lrs", lrs}}
		e = append(e, sizeEntries(s.Len, size)...)
		acc := Entry{"momentum_accumulator", Shaped(append([]float32(nil), o.acc[s.Start:s.Start+s.Len]...))}
		w, sv := o.x.errors(i)
		switch {
		case w == nil:
			if o.accKept {
				e = append(e, acc)
			}
		case o.errAfter[i]:
			e = append(append(e, acc), errorEntries(w, sv, len(w), size)...)
		default:
			e = append(append(e, errorEntries(w, sv, len(w), size)...), acc)
		}
		out[i] = e
	}
	return out
}

// LoadTensorState implements TensorStateful: the errors and the
// accumulator are dropped (SetStepCount has); below var_freeze_step, the
// first tensor's var_interval says whether the next step's gradients are
// averaged, as load_state_dict sets enable_backward_allreduce.
func (o *ZeroOneAdam) LoadTensorState(entries [][]Entry) error {
	if err := checkTensorSizes("ZeroOneAdam", o.segs, entries); err != nil {
		return err
	}
	if len(entries) == 0 || o.steps >= o.cfg.VarFreezeStep {
		return nil
	}
	vi, ok, err := entryInt(entries[0], "var_interval")
	switch {
	case err != nil:
		return fmt.Errorf("ZeroOneAdam state of parameter 0: %w", err)
	case !ok:
		return nil
	case vi < 1:
		return fmt.Errorf("ZeroOneAdam state of parameter 0: var_interval %d (DeepSpeed's is a power of 2 from 1)", vi)
	}
	o.local = (o.steps+1)%vi != 0
	return nil
}

// checkTensorSizes checks each entry's tensor_size against its segment.
func checkTensorSizes(name string, segs []Segment, entries [][]Entry) error {
	if len(entries) != 0 && len(entries) != len(segs) {
		return fmt.Errorf("%s state of %d tensors, this run's has %d: load it into the model it was trained with", name, len(entries), len(segs))
	}
	for i, e := range entries {
		n, ok, err := entryInt(e, "tensor_size")
		if err != nil {
			return fmt.Errorf("%s state of parameter %d: %w", name, i, err)
		}
		if ok && n != int64(segs[i].Len) {
			return fmt.Errorf("%s state of parameter %d: tensor_size %d, the parameter has %d elements: a checkpoint of another model", name, i, n, segs[i].Len)
		}
	}
	return nil
}

// OnebitLamb (onebit/lamb.py): step, lamb_coeff_freeze, last_factor
// (floats), exp_avg, exp_avg_sq, exp_avg_sq_fresh, and scaling_coeff (a
// float) from the first compressed step; its errors live outside the
// state and are not saved. load_state_dict keeps the three floats from
// freeze_step on, and below it resets them (0.0, 1.0, scaling_coeff
// popped).

var _ TensorStateful = (*OneBitLamb)(nil)

// TensorState implements TensorStateful.
func (o *OneBitLamb) TensorState() [][]Entry {
	out := make([][]Entry, len(o.segs))
	if !o.initialized && o.steps == 0 {
		return out
	}
	for i := range o.segs {
		e := []Entry{{"step", o.steps}, {"lamb_coeff_freeze", o.coeffFreeze[i]}, {"last_factor", o.lastFactor[i]},
			{"exp_avg", StateRef("exp_avg")}, {"exp_avg_sq", StateRef("exp_avg_sq")}, {"exp_avg_sq_fresh", StateRef("exp_avg_sq_fresh")}}
		if o.scaling != nil {
			e = append(e, Entry{"scaling_coeff", o.scaling[i]})
		}
		out[i] = e
	}
	return out
}

// LoadTensorState implements TensorStateful.
func (o *OneBitLamb) LoadTensorState(entries [][]Entry) error {
	if len(entries) != 0 && len(entries) != len(o.segs) {
		return fmt.Errorf("OnebitLamb state of %d tensors, this run's has %d: load it into the model it was trained with", len(entries), len(o.segs))
	}
	for i := range o.coeffFreeze {
		o.coeffFreeze[i], o.lastFactor[i] = 0, 1
	}
	o.scaling = nil
	if o.steps < o.cfg.FreezeStep || len(entries) == 0 {
		return nil
	}
	var scaling []float64
	for i, e := range entries {
		for _, k := range []struct {
			key string
			dst *float64
		}{{"lamb_coeff_freeze", &o.coeffFreeze[i]}, {"last_factor", &o.lastFactor[i]}} {
			v, ok, err := entryFloat(e, k.key)
			if err != nil || !ok {
				return fmt.Errorf("OnebitLamb state of parameter %d: %q: %v (DeepSpeed's state holds it as a float)", i, k.key, err)
			}
			*k.dst = v
		}
		v, ok, err := entryFloat(e, "scaling_coeff")
		if err != nil {
			return fmt.Errorf("OnebitLamb state of parameter %d: %w", i, err)
		}
		if ok {
			scaling = append(scaling, v)
		}
	}
	switch len(scaling) {
	case 0: // saved before the first compressed step: computed at it
	case len(o.segs):
		o.scaling = scaling
	default:
		return fmt.Errorf("OnebitLamb state: %d of %d tensors have a scaling_coeff (DeepSpeed sets every tensor's at once)", len(scaling), len(o.segs))
	}
	return nil
}

// entryFloat is the Python number key of e.
func entryFloat(e []Entry, key string) (v float64, ok bool, err error) {
	for _, x := range e {
		if x.Key != key {
			continue
		}
		switch n := x.Value.(type) {
		case float64:
			return n, true, nil
		case int64:
			return float64(n), true, nil
		}
		return 0, false, fmt.Errorf("state %q is %v, not a number", key, x.Value)
	}
	return 0, false, nil
}
