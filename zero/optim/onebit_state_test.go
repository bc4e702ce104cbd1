package optim

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func keys(e []Entry) []string {
	var k []string
	for _, x := range e {
		k = append(k, x.Key)
	}
	return k
}

// TestOneBitAdamTensorState: which tensors hold errors when, as
// onebit/adam.py's step makes them (one rank: the errors exist, unused;
// sizes padded to a multiple of 8, lcm(1, 8)).
func TestOneBitAdamTensorState(t *testing.T) {
	cfg := DefaultOneBitAdamConfig()
	cfg.FreezeStep = 2
	segs := []Segment{{Param: 0, Start: 0, Len: 3}, {Param: 1, Start: 3, Len: 8}, {Param: 2, Start: 11, Len: 5}}
	o, err := NewOneBitAdam(cfg, 16, segs, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free()
	if got := o.TensorState(); got[0] != nil || got[2] != nil {
		t.Fatalf("before the first step: %v, want no state (DeepSpeed's is empty)", got)
	}
	p, g := make([]float32, 16), make([]float32, 16)
	for i := range g {
		g[i] = float32(i%3) - 1
	}
	base := []string{"step", "exp_avg", "exp_avg_sq", "tensor_size", "corrected_tensor_size", "server_chunk_size"}
	withErr := append(append([]string(nil), base...), "worker_error", "server_error")
	for s, want := range [][]([]string){
		{withErr, withErr, base},    // the initialization pass pops the last tensor's errors
		{withErr, withErr, base},    // warm-up (its step count reaches freeze_step)
		{withErr, withErr, withErr}, // the first compressed step makes them again
	} {
		if err := o.StepExchange(p, g); err != nil {
			t.Fatal(err)
		}
		st := o.TensorState()
		for i := range segs {
			if d := cmp.Diff(want[i], keys(st[i])); d != "" {
				t.Errorf("after step %d, tensor %d (-want +got):\n%s", s+1, i, d)
			}
		}
	}
	st := o.TensorState()
	for i, want := range [][3]int64{{3, 8, 8}, {8, 8, 8}, {5, 8, 8}} {
		got := [3]int64{st[i][3].Value.(int64), st[i][4].Value.(int64), st[i][5].Value.(int64)}
		if got != want || st[i][0].Value != int64(3) || len(st[i][6].Value.([]float32)) != 8 {
			t.Errorf("tensor %d: sizes %v, step %v, worker_error %d elements; want %v, 3, 8", i, got, st[i][0].Value, len(st[i][6].Value.([]float32)), want)
		}
	}
}

// TestZeroOneAdamTensorState: the last tensor's errors, popped by the
// initialization pass and made at the next step, follow its
// momentum_accumulator (zoadam.py's dict order); lrs is the int 0 until a
// frozen step adds the lr.
func TestZeroOneAdamTensorState(t *testing.T) {
	cfg := DefaultZeroOneAdamConfig()
	cfg.VarFreezeStep = 2
	cfg.LocalStepScaler = 1 // the sync interval doubles after each frozen step (2 after step 4, 4 after 5)
	segs := []Segment{{Param: 0, Start: 0, Len: 4}, {Param: 1, Start: 4, Len: 4}}
	o, err := NewZeroOneAdam(cfg, 8, segs, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free()
	p, g := make([]float32, 8), []float32{1, -1, 2, -2, 1, 1, -1, -1}
	head := []string{"step", "exp_avg", "exp_avg_sq", "var_interval", "var_counter", "local_step_interval", "local_step_counter", "lrs",
		"tensor_size", "corrected_tensor_size", "server_chunk_size"}
	first := append(append([]string(nil), head...), "worker_error", "server_error", "momentum_accumulator")
	last := append(append([]string(nil), head...), "momentum_accumulator", "worker_error", "server_error")
	var lrs []any
	for range 6 {
		if err := o.StepExchange(p, g); err != nil {
			t.Fatal(err)
		}
		st := o.TensorState()
		lrs = append(lrs, st[0][7].Value)
		if o.StepCount() < 2 {
			continue
		}
		if d := cmp.Diff([][]string{first, last}, [][]string{keys(st[0]), keys(st[1])}); d != "" {
			t.Errorf("step %d (-want +got):\n%s", o.StepCount(), d)
		}
	}
	// Steps 1–3 are not frozen (the freeze follows the step whose count
	// exceeds var_freeze_step); step 4 is, and syncs (interval 1): lrs
	// back to the int 0; steps 5 and 6 do not sync (intervals 2 and 4):
	// the float lr, summed.
	if d := cmp.Diff([]any{int64(0), int64(0), int64(0), int64(0), cfg.LR, cfg.LR + cfg.LR}, lrs); d != "" {
		t.Errorf("lrs (-want +got):\n%s", d)
	}
}

// TestOneBitLoadTensorState: what loading keeps, and the errors bad
// entries give.
func TestOneBitLoadTensorState(t *testing.T) {
	segs := []Segment{{Param: 0, Start: 0, Len: 4}, {Param: 1, Start: 4, Len: 4}}
	zcfg := DefaultZeroOneAdamConfig()
	zcfg.VarFreezeStep = 8
	for _, tc := range []struct {
		vi        int64
		wantLocal bool
	}{{1, false}, {2, false}, {4, true}} {
		o, err := NewZeroOneAdam(zcfg, 8, segs, nil, zeroSolo{}, testAlloc())
		if err != nil {
			t.Fatal(err)
		}
		o.SetStepCount(5)
		e := []Entry{{"step", int64(5)}, {"var_interval", tc.vi}, {"tensor_size", int64(4)}}
		if err := o.LoadTensorState([][]Entry{e, e}); err != nil {
			t.Fatal(err)
		}
		if o.LocalGradients() != tc.wantLocal {
			t.Errorf("step 5, var_interval %d: local gradients %v, want %v ((5+1) mod %d)", tc.vi, o.LocalGradients(), tc.wantLocal, tc.vi)
		}
		o.Free()
	}

	a, err := NewOneBitAdam(DefaultOneBitAdamConfig(), 8, segs, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	lcfg := DefaultOneBitLambConfig()
	lcfg.FreezeStep = 2
	l, err := NewOneBitLamb(lcfg, 8, segs, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Free()
	l.SetStepCount(3)
	z, err := NewZeroOneAdam(zcfg, 8, segs, nil, zeroSolo{}, testAlloc())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Free()
	z.SetStepCount(3)
	for _, tc := range []struct {
		name    string
		o       TensorStateful
		entries [][]Entry
		want    string
	}{
		{"tensor_size", a, [][]Entry{{{"tensor_size", int64(4)}}, {{"tensor_size", int64(5)}}}, "parameter 1: tensor_size 5"},
		{"count", a, [][]Entry{{}}, "state of 1 tensors"},
		{"not an int", a, [][]Entry{{{"tensor_size", 4.5}}, {}}, "not an int"},
		{"var_interval", z, [][]Entry{{{"var_interval", int64(0)}}, {}}, "var_interval 0"},
		{"lamb missing", l, [][]Entry{{{"lamb_coeff_freeze", 0.5}}, {{"lamb_coeff_freeze", 0.5}, {"last_factor", 1.0}}}, `parameter 0: "last_factor"`},
		{"lamb scaling", l, [][]Entry{{{"lamb_coeff_freeze", 0.5}, {"last_factor", 1.0}, {"scaling_coeff", 2.0}}, {{"lamb_coeff_freeze", 0.5}, {"last_factor", 1.0}}}, "1 of 2 tensors"},
	} {
		err := tc.o.LoadTensorState(tc.entries)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	good := [][]Entry{{{"lamb_coeff_freeze", 0.5}, {"last_factor", 1.1}, {"scaling_coeff", 2.0}}, {{"lamb_coeff_freeze", 0.25}, {"last_factor", 0.9}, {"scaling_coeff", 0.5}}}
	if err := l.LoadTensorState(good); err != nil {
		t.Fatal(err)
	}
	got := [][]float64{l.coeffFreeze, l.lastFactor, l.scaling}
	if d := cmp.Diff([][]float64{{0.5, 0.25}, {1.1, 0.9}, {2, 0.5}}, got); d != "" {
		t.Errorf("OnebitLamb from freeze_step on keeps its coefficients (-want +got):\n%s", d)
	}
	l.SetStepCount(1) // below freeze_step: reset, as load_state_dict does
	if err := l.LoadTensorState(good); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([][]float64{{0, 0}, {1, 1}, nil}, [][]float64{l.coeffFreeze, l.lastFactor, l.scaling}); d != "" {
		t.Errorf("OnebitLamb below freeze_step resets its coefficients (-want +got):\n%s", d)
	}
}
