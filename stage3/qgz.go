package stage3

import (
	"fmt"

	"github.com/dszero/dszero/comm"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/zero/quant"
)

// QGZ is a rank's two groups for ZeRO++ qgZ (zero_quantized_gradients),
// DeepSpeed's _get_local_all_to_all_group: with D ranks per node (the
// accelerator's device_count) and N = world/D nodes, rank r is device
// r%D of node r/D.
type QGZ struct {
	// Local is the rank's node: the D ranks of r/D, in rank order
	// (DeepSpeed's local_{r/D}); nil for one rank per node (D = 1).
	Local comm.Comm
	// Global is the N ranks of device r%D, one per node, in rank order
	// (global_{r%D}).
	Global comm.Comm
}

// gradQuant is ZeRO++ qgZ: each parameter's gradient is reduced by
// all_to_all_quant_reduce (coalesced_collectives.py) instead of the
// reduce-scatter — int4 blocks swizzled by destination, an all_to_all
// within the node, a dequantize-add-requantize, an all_to_all across the
// nodes, a dequantize and a sum over the nodes divided by N (package
// quant's doc has the arithmetic). DeepSpeed takes this path only with
// more than one node; the engine passes no QGZ otherwise. A 1-D
// gradient, or one whose numel is not a multiple of 2·world, is
// reduce-scattered as without qgZ (DeepSpeed warns for the second kind;
// so does dszero, once, at New).
//
// The result is the sum over the world divided by N, not by the world:
// D times the plain path's average, as DeepSpeed 0.14.5 computes it (it
// neither divides the gradients by the world first nor afterwards on
// this path). With one device per node — DeepSpeed's CPU accelerator
// with LOCAL_SIZE=1, dszero's default — that is the average.
//
// Each rank reduces synchronously when the unit's gradients are
// complete (no overlap with backward). The collectives run on the QGZ
// groups and are counted in their traffic: with one rank per node that
// is the world's communicator itself.
type gradQuant struct {
	s              *Strategy
	local, global  comm.Comm
	nodes, devices int
	groups         []int // per parameter: its quantization groups; 0: reduce-scattered

	// scratch, grown to the largest parameter
	bytes, recv []byte
	scales, rs  []float32
	win, wout   []uint16
	acc, vals   []float32
	scratch     []uint16 // comm.AllToAll's, on a comm without a native all_to_all
}

func newGradQuant(s *Strategy, q QGZ) (*gradQuant, error) {
	devices, localRank := 1, 0
	if q.Local != nil {
		devices, localRank = q.Local.Size(), q.Local.Rank()
	}
	if q.Global == nil || devices*q.Global.Size() != s.world {
		return nil, fmt.Errorf("stage 3: zero_quantized_gradients: groups of %d×%v ranks for a world of %d", devices, size(q.Global), s.world)
	}
	gq := &gradQuant{s: s, local: q.Local, global: q.Global, nodes: q.Global.Size(), devices: devices, groups: make([]int, len(s.l.Specs))}
	if localRank != s.rank%devices || q.Global.Rank() != s.rank/devices {
		return nil, fmt.Errorf("stage 3: zero_quantized_gradients: rank %d is %d of its node and %d across the nodes; want %d and %d", s.rank, localRank, q.Global.Rank(), s.rank%devices, s.rank/devices)
	}
	var fallback []string
	for i, sp := range s.l.Specs {
		g, ok, why := quant.GradientGroups(sp.Shape, gq.nodes, gq.devices)
		if ok {
			gq.groups[i] = g
		} else if why != "1-D" {
			fallback = append(fallback, fmt.Sprintf("%s (%s)", sp.Name, why))
		}
	}
	if len(fallback) > 0 && s.c.Warn != nil && s.rank == 0 {
		s.c.Warn(fmt.Sprintf("zero_quantized_gradients: %d gradients are reduce-scattered without quantization, as DeepSpeed's qgZ falls back: %v", len(fallback), fallback))
	}
	return gq, nil
}

func size(c comm.Comm) any {
	if c == nil {
		return "no"
	}
	return c.Size()
}

// on reports whether parameter i's gradient takes qgZ.
func (q *gradQuant) on(i int) bool { return q.groups[i] > 0 }

// reduce is all_to_all_quant_reduce of parameter i's gradient x (values
// of the model's dtype, numel n) into out, the rank's n/world elements of the result.
func (q *gradQuant) reduce(i int, x, out []float32) error {
	s := q.s
	n, g := len(x), q.groups[i]
	nodes, devices := q.nodes, q.devices
	w := nodes * devices
	if len(out) != n/w {
		panic(fmt.Sprintf("stage 3: qgZ of %d elements into %d", n, len(out)))
	}
	// 1. Quantize to int4 in g groups, each rank's partition moved to
	// where the all_to_all within the node sends it.
	bytes, scales := grow(&q.bytes, n/2), growF(&q.scales, g)
	quant.SwizzleQuantize(bytes, scales, x, quant.GradientBits, nodes, devices)
	// 2. all_to_all within the node: device d's chunk to device d.
	lb, ls := n/2/devices, g/devices
	lw := quant.WordsFor(lb, ls)
	if err := s.o.Acct.Reserve(mem.Comm, mem.Device, 8*int64(devices*lw)); err != nil {
		return fmt.Errorf("stage 3: qgZ of %s: %w", s.l.Specs[i].Name, err)
	}
	defer s.o.Acct.Release(mem.Comm, mem.Device, 8*int64(devices*lw))
	win, wout := grow16(&q.win, devices*lw), grow16(&q.wout, devices*lw)
	for d := range devices {
		quant.PutWords(win[d*lw:(d+1)*lw], bytes[d*lb:(d+1)*lb], scales[d*ls:(d+1)*ls])
	}
	if err := q.allToAll(q.local, wout, win); err != nil {
		return fmt.Errorf("stage 3: qgZ of %s, all_to_all within the node: %w", s.l.Specs[i].Name, err)
	}
	recv, rs := grow(&q.recv, devices*lb), growF(&q.rs, devices*ls)
	for d := range devices {
		quant.GetWords(recv[d*lb:(d+1)*lb], rs[d*ls:(d+1)*ls], wout[d*lw:(d+1)*lw])
	}
	// 3. Dequantize the node's chunks, add them in the model's dtype,
	// requantize in g/devices groups.
	red, redS := bytes[:lb], scales[:ls]
	quant.ReduceQuantized(red, redS, recv, rs, quant.GradientBits, devices, growF(&q.acc, n/devices), s.nearest)
	// 4. all_to_all across the nodes: node k's share to node k.
	gb, gs := lb/nodes, ls/nodes
	gw := quant.WordsFor(gb, gs)
	win, wout = grow16(&q.win, nodes*gw), grow16(&q.wout, nodes*gw)
	for k := range nodes {
		quant.PutWords(win[k*gw:(k+1)*gw], red[k*gb:(k+1)*gb], redS[k*gs:(k+1)*gs])
	}
	if err := q.allToAll(q.global, wout, win); err != nil {
		return fmt.Errorf("stage 3: qgZ of %s, all_to_all across the nodes: %w", s.l.Specs[i].Name, err)
	}
	for k := range nodes {
		quant.GetWords(recv[k*gb:(k+1)*gb], rs[k*gs:(k+1)*gs], wout[k*gw:(k+1)*gw])
	}
	// 5. Dequantize; sum the nodes' values, divide by N (all in the
	// model's dtype: fp16 in DeepSpeed's kernels).
	vals := growF(&q.vals, n/devices)
	quant.Dequantize(vals, recv[:lb], rs[:ls], quant.GradientBits, s.nearest)
	quant.SumNodes(out, vals, nodes, s.nearest)
	return nil
}

// allToAll runs comm.AllToAll on c's words (a copy on a group of one).
func (q *gradQuant) allToAll(c comm.Comm, out, in []uint16) error {
	if c == nil || c.Size() == 1 {
		copy(out, in)
		return nil
	}
	sc := grow16(&q.scratch, comm.AllToAllScratch(c, len(in)))
	return comm.AllToAll(q.s.o.Ctx, c, comm.BF16(out), comm.BF16(in), comm.BF16(sc))
}

func grow(b *[]byte, n int) []byte {
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}

func growF(b *[]float32, n int) []float32 {
	if cap(*b) < n {
		*b = make([]float32, n)
	}
	return (*b)[:n]
}

func grow16(b *[]uint16, n int) []uint16 {
	if cap(*b) < n {
		*b = make([]uint16, n)
	}
	return (*b)[:n]
}
