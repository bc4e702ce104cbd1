package kernels

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dszero/dszero/device"
)

// Type is a kernel parameter's C type, spelled as in the sources.
type Type string

// The parameter types the kernels use.
const (
	PtrF32      Type = "float*"
	PtrConstF32 Type = "const float*"
	Ptr16       Type = "unsigned short*"
	PtrConst16  Type = "const unsigned short*"
	PtrF64      Type = "double*"
	PtrConstF64 Type = "const double*"
	PtrConstI32 Type = "const int*"
	PtrU32      Type = "unsigned int*"
	PtrConstU64 Type = "const unsigned long long*"
	I32         Type = "int"
	I64         Type = "long long"
	F32         Type = "float"
)

// Pointer reports whether t is a device pointer.
func (t Type) Pointer() bool { return strings.HasSuffix(string(t), "*") }

// Size is the number of bytes the kernel's parameter occupies (what
// cuLaunchKernel copies from the value kernelParams points at).
func (t Type) Size() int {
	switch t {
	case I32, F32:
		return 4
	}
	return 8
}

// Param is one kernel parameter.
type Param struct {
	Name string
	Type Type
}

// Spec is one extern "C" kernel: its name and parameters, which the
// launchers pass in order.
type Spec struct {
	Name   string
	Params []Param
	// Family and DType say which template instance it is: gelu_fwd_f32 is
	// family "gelu_fwd_*" for F32, cast_bf16_f32 is "cast_*_f32" for BF16.
	// A kernel without dtype variants is its own family, with DType F32.
	Family string
	DType  device.DType
	// Approx says the kernel calls CUDA's expf, logf or tanhf, so a GPU
	// result may differ from the Go reference by an ulp or two; every
	// other kernel must match it bit for bit.
	Approx bool
}

func (s *Spec) String() string {
	var b strings.Builder
	b.WriteString(s.Name + "(")
	for i, p := range s.Params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(p.Type) + " " + p.Name)
	}
	return b.String() + ")"
}

// family is a kernel template instantiated per dtype: the extern "C"
// names are Base + "_" + dtype + Suffix, and T in Params becomes float or
// unsigned short.
type family struct {
	base, suffix string
	params       string
	dtypes       []device.DType
	approx       bool
}

var (
	all3  = []device.DType{device.F32, device.BF16, device.F16}
	low16 = []device.DType{device.BF16, device.F16}
	f32   = []device.DType{device.F32}
)

// dtypeSuffix is the name part of each dtype: f32, bf16, f16.
func dtypeSuffix(dt device.DType) string {
	switch dt {
	case device.F32:
		return "f32"
	case device.BF16:
		return "bf16"
	case device.F16:
		return "f16"
	}
	panic(fmt.Sprintf("kernels: no kernels for %v", dt))
}

// families is the launcher table: every kernel of the sources, with its
// parameters. TestSourcesMatchTable parses the .cu files and checks them
// against it; the launchers in package cuda check their arguments
// against it.
var families = []family{
	{"fill", "", "T* dst, long long n, float v", all3, false},
	{"cast_f32", "", "T* dst, const float* src, long long n", low16, false},
	{"cast", "_f32", "float* dst, const T* src, long long n", low16, false},
	{"scale", "", "T* x, long long n, float s", all3, false},
	{"scale_dev", "", "T* x, long long n, const float* s", all3, false},
	{"div", "", "T* x, long long n, float d", all3, false},
	{"add", "", "T* out, const T* a, const T* b, long long n", all3, false},
	{"accumulate", "", "T* dst, const T* src, long long n", all3, false},
	{"accumulate", "_f32", "float* dst, const T* src, long long n", low16, false},
	{"reduce_sum", "", "double* partial, const T* x, long long n, int square", all3, false},
	{"all_finite", "", "unsigned int* flag, const T* x, long long n", all3, false},
	{"reduce_n", "", "T* dst, const unsigned long long* srcs, int nsrc, long long n, int op", all3, false},

	{"layernorm_fwd", "", "T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C, float eps", all3, false},
	{"layernorm_bwd", "", "T* dinp, const T* dout, const T* inp, const T* w, const float* mean, const float* rstd, int N, int C", all3, false},
	{"layernorm_bwd_partial", "", "double* partial, const T* dout, const T* inp, const float* mean, const float* rstd, int N, int C, int rpc", all3, false},
	{"bias_grad_partial", "", "double* partial, const T* dout, int N, int OC, int rpc", all3, false},
	{"colsum_finish", "", "T* dst, const double* partial, int nchunks, int width, int stride, int accumulate", all3, false},
	{"rmsnorm_fwd", "", "T* out, float* rrms, const T* inp, const T* w, int N, int C, float eps", all3, false},
	{"rmsnorm_bwd", "", "T* dinp, const T* dout, const T* inp, const T* w, const float* rrms, int N, int C", all3, false},
	{"rmsnorm_bwd_partial", "", "double* partial, const T* dout, const T* inp, const float* rrms, int N, int C, int rpc", all3, false},

	{"gelu_fwd", "", "T* out, const T* inp, long long n", all3, true},
	{"gelu_bwd", "", "T* dinp, const T* inp, const T* dout, long long n", all3, true},
	{"swiglu_fwd", "", "T* out, const T* gate, const T* up, long long n", all3, true},
	{"swiglu_bwd", "", "T* dgate, T* dup, const T* gate, const T* up, const T* dout, long long n", all3, true},
	{"rope", "", "T* out, const T* inp, const float* cosT, const float* sinT, int BT, int T, int H, int Dh, int interleaved, int inverse", all3, false},

	{"permute_0213", "", "T* out, const T* inp, int A, int Bd, int Cd, int Dd", all3, false},
	{"qkv_split", "", "T* q, T* k, T* v, const T* qkv, int B, int T, int NH, int NKV, int HD", all3, false},
	{"qkv_merge", "", "T* qkv, const T* q, const T* k, const T* v, int B, int T, int NH, int NKV, int HD", all3, false},
	{"repeat_kv", "", "T* out, const T* inp, int B, int NKV, int rep, int THD", all3, false},
	{"repeat_kv_bwd", "", "T* dinp, const T* dout, int B, int NKV, int rep, int THD", all3, false},
	{"softmax_causal_fwd", "", "T* att, const T* pre, int BH, int T, float scale", all3, true},
	{"softmax_causal_bwd", "", "T* dpre, const T* datt, const T* att, int BH, int T, float scale", all3, false},

	{"xent_fwd_bwd", "", "T* dlogits, float* losses, const T* logits, const int* targets, int N, int V, int Vp, float dloss, int ignore_index", all3, true},

	{"embedding_fwd", "", "T* out, const int* tokens, const T* wte, const T* wpe, int N, int T, int C, int V, unsigned int* bad", all3, false},
	{"embedding_bwd_tok", "", "T* dwte, const T* dout, const int* order, const int* starts, const int* uniq, int nuniq, int C", all3, false},
	{"embedding_bwd_pos", "", "T* dwpe, const T* dout, int B, int T, int C", all3, false},
}

// single are the kernels without dtype variants (named as written).
var single = []family{
	{"sum_f64", "", "double* out, const double* partial, int n", nil, false},
	{"adam_f32", "", "float* p, const float* g, float* m, float* v, unsigned short* p16, long long n, int mode, int p16kind, " +
		"float b1, float omb1, float b2, float omb2, float bc2, float eps, float ss, float decay, float wd", nil, false},
	{"sgd_f32", "", "float* p, const float* g, float* buf, unsigned short* p16, long long n, int p16kind, " +
		"int use_wd, int use_buf, int nesterov, int first, float wd, float mom, float omd, float nlr", nil, false},
}

// Table is every kernel, by name.
type Table struct {
	specs  []*Spec
	byName map[string]*Spec
}

// NewTable expands the launcher table.
func NewTable() *Table {
	t := &Table{byName: map[string]*Spec{}}
	add := func(s *Spec) {
		if t.byName[s.Name] != nil {
			panic("kernels: " + s.Name + " defined twice")
		}
		t.byName[s.Name] = s
		t.specs = append(t.specs, s)
	}
	for _, f := range families {
		for _, dt := range f.dtypes {
			elem := "float"
			if dt != device.F32 {
				elem = "unsigned short"
			}
			add(&Spec{Name: f.base + "_" + dtypeSuffix(dt) + f.suffix, Params: parseParams(f.params, elem),
				Family: f.base + "_*" + f.suffix, DType: dt, Approx: f.approx})
		}
	}
	for _, f := range single {
		add(&Spec{Name: f.base, Params: parseParams(f.params, ""), Family: f.base, DType: device.F32, Approx: f.approx})
	}
	slices.SortFunc(t.specs, func(a, b *Spec) int { return strings.Compare(a.Name, b.Name) })
	return t
}

// Specs lists every kernel, sorted by name.
func (t *Table) Specs() []*Spec { return t.specs }

// Lookup returns the kernel called name, or nil.
func (t *Table) Lookup(name string) *Spec { return t.byName[name] }

// Name returns the kernel of family for dt: Name("gelu_fwd", BF16) is
// gelu_fwd_bf16 (a family without * gets "_*" appended), Name("cast_*_f32",
// F16) is cast_f16_f32. It panics if there is none (a launcher bug).
func (t *Table) Name(family string, dt device.DType) string {
	if !strings.Contains(family, "*") && t.byName[family] == nil {
		family += "_*"
	}
	for _, s := range t.specs {
		if s.Family == family && s.DType == dt {
			return s.Name
		}
	}
	panic(fmt.Sprintf("kernels: no %s kernel for %v", family, dt))
}

// parseParams reads "T* out, long long n" with T replaced by elem.
func parseParams(list, elem string) []Param {
	var ps []Param
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if elem != "" {
			part = replaceWord(part, "T", elem)
		}
		ps = append(ps, splitParam(part))
	}
	return ps
}

// splitParam splits "const float* x" into its type and name.
func splitParam(s string) Param {
	s = strings.Join(strings.Fields(s), " ")
	i := strings.LastIndexAny(s, " *")
	typ := strings.TrimSpace(s[:i+1])
	typ = strings.ReplaceAll(typ, " *", "*")
	return Param{Name: s[i+1:], Type: Type(typ)}
}

// replaceWord replaces the whole word old in s (so T in "T* out" but not
// the T of a parameter named T, which always follows its type).
func replaceWord(s, old, repl string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return s
	}
	name := f[len(f)-1]
	for i := range f[:len(f)-1] {
		w := f[i]
		if strings.TrimRight(w, "*") == old {
			f[i] = repl + w[len(old):]
		}
	}
	f[len(f)-1] = name
	return strings.Join(f, " ")
}
