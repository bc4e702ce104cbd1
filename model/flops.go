package model

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file describes a model the way DeepSpeed's FLOPS profiler
// (deepspeed/profiling/flops_profiler/profiler.py) sees its PyTorch twin:
// a tree of nn.Modules, each with the parameters registered on it and
// the multiply-accumulates (MACs) and floating-point operations (FLOPs)
// that the profiler's patched functions count inside the module's own
// forward. The profiler (package profiler) sums them up the tree and
// prints DeepSpeed's report.
//
// DeepSpeed counts by wrapping a fixed list of functions while the
// profiled forward runs; anything else a model calls costs nothing in
// its report. The counts, for an input x:
//
//	F.linear(x, W)               MACs = numel(x)·out_features, FLOPs = 2·MACs (the bias is not counted)
//	torch.matmul, @, mm, bmm     MACs = numel(a)·b.shape[-1],   FLOPs = 2·MACs
//	F.scaled_dot_product_attention(q, k, v)
//	                             MACs = numel(q)·Tk + numel(q)/D·Tk·Dv, FLOPs = 2·MACs (torch ≥ 2.0)
//	F.layer_norm                 FLOPs = 5·numel(x) with weight, 4·numel(x) without
//	F.softmax, F.gelu, F.silu, F.relu
//	                             FLOPs = numel(x)
//	F.embedding, dropout         0
//
// Not wrapped, so not counted: the operators *, +, -, / (Tensor.__mul__
// and friends; only torch.mul/Tensor.mul and torch.add/Tensor.add are
// wrapped), pow, mean, rsqrt, tanh, exp, masked_fill, cat, F.cross_entropy
// and F.mse_loss. So an RMSNorm (x·rsqrt(mean(x²)+eps)·w), RoPE's
// rotation, a residual sum, an attention score scale and the loss cost 0.

// NoUnit is FlopModule.Unit for a module that is not one of the model's
// units.
const NoUnit = -1

// FlopShape is the micro-batch a count is for.
type FlopShape struct {
	Batch int // B: samples (rows)
	Seq   int // T: tokens per row; 1 for a model of dense vectors
	// RowPositions says the micro-batch carries its own position ids, one
	// row per sample (Batch.Positions != nil, as a packing collator gives
	// Hugging Face models position_ids of shape (B, T)). Without them HF
	// models build position ids of shape (1, T), and a rotary embedding
	// computes its angles for one row.
	RowPositions bool
	// SeqParallel is sequence_parallel_size under DeepSpeed-Ulysses (0 or
	// 1: none). Seq is then the rank's T/sp tokens, which every layer but
	// attention's core runs on; the core (scores, softmax, the weighted
	// sum, SDPA) runs on heads/sp heads over the whole sp·Seq tokens after
	// the all-to-all, and DeepSpeed's profiler on a rank counts it so.
	SeqParallel int
}

// Attention returns the heads and the sequence length attention's core
// runs on for a model of heads heads: (heads, Seq) without sequence
// parallelism, (heads/sp, sp·Seq) with it. The Ulysses all-to-alls
// themselves are not counted (DeepSpeed wraps no collective).
func (s FlopShape) Attention(heads int) (int, int) {
	if s.SeqParallel <= 1 {
		return heads, s.Seq
	}
	return heads / s.SeqParallel, s.Seq * s.SeqParallel
}

// FlopModule is one nn.Module of a model's PyTorch twin. A model lists
// its modules in pre-order: the root first at Depth 0, then each module's
// children right after it, at Depth+1, in the order the PyTorch class
// registers them (its _modules order, which print(model) follows).
type FlopModule struct {
	Depth int
	// Name is the module's key in its parent's _modules ("wte", "blocks",
	// "0", "attn"); "" for the root.
	Name string
	// Class is the PyTorch class name ("Linear", "ModuleList", "TinyGPT").
	Class string
	// Extra is what the class's extra_repr() returns, e.g.
	// "in_features=64, out_features=192, bias=True"; "" for none.
	Extra string
	// Params names the tensors of the Layout registered on this module
	// itself (not on its children). A tied LM head names the embedding's
	// weight, as nn.Module.parameters() lists a shared tensor under both
	// modules; a parent counts it once.
	Params []string
	// MACs and FLOPs are what DeepSpeed's patched functions count in this
	// module's own forward for the FlopShape, excluding its children's.
	MACs, FLOPs int64
	// Unit is the index of the Layout unit whose forward is this module's
	// forward, so that the time between the unit's BeforeForward and
	// AfterForward is this module's latency; NoUnit otherwise.
	Unit int
}

// FlopCounter is a model configuration that can list, for one
// micro-batch shape, the modules of its PyTorch twin with what
// DeepSpeed's FLOPS profiler counts in each (gpt.Config, llama.Config and
// mlp.Config implement it).
type FlopCounter interface {
	// Layout is the flat-buffer layout FlopModule.Params refer to.
	Layout() Layout
	// FlopModules lists the modules in pre-order for the shape s.
	FlopModules(s FlopShape) []FlopModule
}

// FlopTree builds a FlopModule list in pre-order: Add appends a module
// at the current depth, Enter appends one and descends into it, Leave
// goes back up. The zero value is ready to use.
type FlopTree struct {
	mods  []FlopModule
	depth int
}

// Add appends m as a leaf at the current depth.
func (t *FlopTree) Add(m FlopModule) {
	m.Depth = t.depth
	t.mods = append(t.mods, m)
}

// Enter appends m at the current depth; the modules added next are its
// children, until Leave.
func (t *FlopTree) Enter(m FlopModule) {
	t.Add(m)
	t.depth++
}

// Leave ends the children of the last module entered.
func (t *FlopTree) Leave() {
	if t.depth == 0 {
		panic("model: FlopTree.Leave without Enter")
	}
	t.depth--
}

// Modules returns the list built so far.
func (t *FlopTree) Modules() []FlopModule { return t.mods }

// Container is a module that only calls its children: no parameters of
// its own and nothing counted (a ModuleList, a decoder layer's residual
// sums).
func Container(name, class string) FlopModule {
	return FlopModule{Name: name, Class: class, Unit: NoUnit}
}

// Linear is torch.nn.Linear(in, out, bias) applied to rows input rows:
// F.linear counts rows·in·out MACs and twice that in FLOPs. prefix is the
// module's full name; its parameters are prefix.weight (and prefix.bias).
func Linear(name, prefix string, rows, in, out int, bias bool) FlopModule {
	p := []string{prefix + ".weight"}
	if bias {
		p = append(p, prefix+".bias")
	}
	macs := int64(rows) * int64(in) * int64(out)
	return FlopModule{Name: name, Class: "Linear", Unit: NoUnit, Params: p, MACs: macs, FLOPs: 2 * macs,
		Extra: fmt.Sprintf("in_features=%d, out_features=%d, bias=%s", in, out, pyBool(bias))}
}

// LayerNorm is torch.nn.LayerNorm(dim, eps) with weight and bias applied
// to rows rows: F.layer_norm counts 5·rows·dim FLOPs. eps is printed as
// Python prints the float (bits 32 for a float32 config value).
func LayerNorm(name, prefix string, rows, dim int, eps float64, bits int) FlopModule {
	return FlopModule{Name: name, Class: "LayerNorm", Unit: NoUnit,
		Params: []string{prefix + ".weight", prefix + ".bias"}, FLOPs: 5 * int64(rows) * int64(dim),
		Extra: fmt.Sprintf("(%d,), eps=%s, elementwise_affine=True", dim, PyFloat(eps, bits))}
}

// Embedding is torch.nn.Embedding(num, dim, padding_idx): F.embedding
// counts nothing. paddingIdx < 0 means none.
func Embedding(name, param string, num, dim, paddingIdx int) FlopModule {
	extra := fmt.Sprintf("%d, %d", num, dim)
	if paddingIdx >= 0 {
		extra += fmt.Sprintf(", padding_idx=%d", paddingIdx)
	}
	return FlopModule{Name: name, Class: "Embedding", Unit: NoUnit, Params: []string{param}, Extra: extra}
}

// MatmulMACs is what DeepSpeed counts for torch.matmul(a, b) (and a @ b,
// mm, bmm): every element of a times b's last dimension.
func MatmulMACs(aNumel int64, bLast int) int64 { return aNumel * int64(bLast) }

// SDPAMACs is what DeepSpeed counts for F.scaled_dot_product_attention
// with q of shape (B, H, Tq, D), k of (…, Tk, D) and v of (…, Tk, Dv):
// numel(q)·Tk for the scores plus B·H·Tq·Tk·Dv for the weighted sum.
func SDPAMACs(b, h, tq, d, tk, dv int) int64 {
	q := int64(b) * int64(h) * int64(tq)
	return q*int64(d)*int64(tk) + q*int64(tk)*int64(dv)
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// PyFloat formats x as Python's repr(float) does (str and f-strings
// too): the shortest digits that read back to x, fixed-point with at
// least one decimal when the exponent is in [-4, 16), else d.ddde±XX.
// bits is 64, or 32 for a float32 value that Python was given as its
// shortest decimal (a config's 1e-5 prints "1e-05", not the float64
// expansion of float32(1e-5)).
func PyFloat(x float64, bits int) string {
	switch {
	case math.IsNaN(x):
		return "nan"
	case math.IsInf(x, 1):
		return "inf"
	case math.IsInf(x, -1):
		return "-inf"
	}
	// Shortest digits and exponent, e.g. "-1.2345e+06".
	s := strconv.FormatFloat(x, 'e', -1, bits)
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		out := digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es, exp = "-", -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, out, es, exp)
	}
	// Fixed point: the decimal point goes after digit exp+1.
	point := exp + 1
	var intPart, frac string
	switch {
	case point <= 0:
		intPart, frac = "0", strings.Repeat("0", -point)+digits
	case point >= len(digits):
		intPart, frac = digits+strings.Repeat("0", point-len(digits)), "0"
	default:
		intPart, frac = digits[:point], digits[point:]
	}
	return sign + intPart + "." + frac
}
