package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/dszero/dszero/checkpoint"
	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/zero"
)

// Before a checkpoint is saved, every rank scans its fp32 master weights
// and optimizer state for NaN and ±Inf, and no rank saves if any finds
// one: a checkpoint is what a run resumes from, and `latest` must keep
// naming one that can be. A diverged step (an lr too large, an overflow
// in fp32) leaves such values behind; so would swap files or memory
// corrupted under the run (the swapper's checksums catch the first: the
// scan reads the files through them). The loss check at the next forward
// comes too late for a checkpoint saved right after the step.
//
// The scan is one pass over the state the checkpoint will hold, in
// place: stages 0–2 through the engine's master partition and optimizer,
// stage 3 through its ScanState (sub-group by sub-group, swap files read
// through the swapper's buffers), so it allocates nothing and costs at
// most one read of what the save then writes.

// stateScanner is a strategy that walks its own fp32 state (stage 3,
// whose sub-groups may live in swap files); see stage3.ScanState.
type stateScanner interface {
	ScanState(visit func(group int, name, file string, values []float32) error) error
}

// nonFinite is one state tensor holding NaN or ±Inf.
type nonFinite struct {
	what  string // "sub-group 0's fp32 master", "optimizer state exp_avg"
	file  string // its swap file; "" in memory
	count int    // values that are NaN or ±Inf
	numel int
	first int // index of the first
}

func (n nonFinite) String() string {
	s := fmt.Sprintf("%s: %d of %d values are NaN or ±Inf (the first at element %d)", n.what, n.count, n.numel, n.first)
	if n.file != "" {
		s += ", read from swap file " + n.file
	}
	return s
}

// countNonFinite counts the NaN and ±Inf in x (an exponent of all ones)
// and finds the first; first is -1 when there is none. The scan reads
// every value a save then writes, so it goes at memory speed: anyFinite
// tests eight values at a time, and only a block that holds one is
// counted value by value.
func countNonFinite(x []float32) (count, first int) {
	first = -1
	const block = 1024
	for lo := 0; lo < len(x); lo += block {
		v := x[lo:min(len(x), lo+block)]
		if !anyNonFinite(v) {
			continue
		}
		for i, f := range v {
			if math.Float32bits(f)&0x7f800000 == 0x7f800000 {
				if count == 0 {
					first = lo + i
				}
				count++
			}
		}
	}
	return count, first
}

// anyNonFinite says whether x holds a NaN or ±Inf. Two values at a time
// as one uint64: adding 1 to each lane's exponent (x & 0x7f800000, plus
// 0x00800000) carries into the lane's sign bit exactly when the exponent
// is all ones, and never into the next lane.
func anyNonFinite(x []float32) bool {
	const mask, one, sign = 0x7f8000007f800000, 0x0080000000800000, 0x8000000080000000
	one1 := func(f float32) bool { return math.Float32bits(f)&0x7f800000 == 0x7f800000 }
	if len(x) > 0 && uintptr(unsafe.Pointer(&x[0]))%8 != 0 { // uint64 loads need 8-byte alignment
		if one1(x[0]) {
			return true
		}
		x = x[1:]
	}
	var acc uint64
	if n := len(x) &^ 7; n > 0 {
		u := unsafe.Slice((*uint64)(unsafe.Pointer(&x[0])), n/2)
		for j := 0; j+4 <= len(u); j += 4 {
			acc |= (u[j]&mask + one) | (u[j+1]&mask + one) | (u[j+2]&mask + one) | (u[j+3]&mask + one)
		}
		x = x[n:]
	}
	for _, f := range x {
		if one1(f) {
			return true
		}
	}
	return acc&sign != 0
}

// scanState returns the rank's state tensors that hold NaN or ±Inf, or
// an error when the state could not be read (a swap file that fails its
// checksum).
func scanState(eng *zero.Engine) ([]nonFinite, error) {
	var bad []nonFinite
	check := func(what, file string, v []float32) {
		if n, first := countNonFinite(v); n > 0 {
			bad = append(bad, nonFinite{what: what, file: file, count: n, numel: len(v), first: first})
		}
	}
	if sc, ok := eng.Strategy().(stateScanner); ok {
		err := sc.ScanState(func(g int, name, file string, v []float32) error {
			what := fmt.Sprintf("sub-group %d's optimizer state %s", g, name)
			if name == "master" {
				what = fmt.Sprintf("sub-group %d's fp32 master weights", g)
			}
			check(what, file, v)
			return nil
		})
		return bad, err
	}
	master, err := eng.MasterParams()
	if err != nil {
		return nil, err
	}
	check("the fp32 master weights", "", master)
	if opt := eng.Optimizer(); opt != nil {
		for _, name := range opt.StateNames() {
			if v := opt.State(name); v != nil {
				check("optimizer state "+name, "", v)
			}
		}
	}
	return bad, nil
}

// checkBeforeSave scans the rank's state before the checkpoint of step
// is saved in dir, and tells every rank whether any rank's failed: a
// collective, so that all ranks save or none does. The rank whose state
// is bad returns why; the others return an error wrapping
// comm.ErrRankFailed (Run reports the root cause).
func checkBeforeSave(ctx context.Context, c comm.Comm, eng *zero.Engine, step int, dir string) error {
	tag := checkpoint.Tag(eng.GlobalSteps())
	bad, err := scanState(eng)
	if err == nil && len(bad) > 0 {
		msgs := make([]string, len(bad))
		for i, b := range bad {
			msgs[i] = b.String()
		}
		err = fmt.Errorf("rank %d's fp32 master weights or optimizer state hold NaN or Inf, which no run can resume from: %s; "+
			"training diverged (lower the learning rate, or use bf16/fp32 with gradient_clipping), or memory corrupted the state",
			c.Rank(), strings.Join(msgs, "; "))
	} else if err != nil {
		err = fmt.Errorf("rank %d could not read its state to check it: %w", c.Rank(), err)
	}
	flags := make([]float32, c.Size())
	if err != nil {
		flags[c.Rank()] = 1
	}
	if c.Size() > 1 {
		if cerr := c.AllReduce(ctx, comm.F32(flags), comm.Sum).Wait(); cerr != nil {
			return fmt.Errorf("step %d: agreeing whether to save checkpoint %s: %w", step, tag, errors.Join(err, cerr))
		}
	}
	kept := keptLatest(dir)
	if err != nil {
		return fmt.Errorf("step %d: refusing to save checkpoint %s in %s: %w; %s", step, tag, dir, err, kept)
	}
	var ranks []int
	for r, f := range flags {
		if f != 0 {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) > 0 {
		return fmt.Errorf("step %d: not saving checkpoint %s in %s: the state of rank(s) %v cannot be saved (see their errors); %s: %w", step, tag, dir, ranks, kept, comm.ErrRankFailed)
	}
	return nil
}

// keptLatest says which checkpoint dir/latest still names.
func keptLatest(dir string) string {
	tag, err := checkpoint.LatestTag(dir)
	if err != nil {
		return "no checkpoint was saved in it before"
	}
	return fmt.Sprintf("latest still names %s, the last checkpoint saved: resume from it", tag)
}
