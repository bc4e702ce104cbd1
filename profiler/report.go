package profiler

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dszero/dszero/model"
)

// Engine is what DeepSpeed's engine adds to the report: the header block
// (world size ... batch size per GPU) and, since enabling the profiler
// turns on wall_clock_breakdown, the backward and step lines.
type Engine struct {
	WorldSize     int // world size
	DataParallel  int // data parallel size
	ModelParallel int // model parallel size (1 without tensor parallelism)
	MicroBatch    int // train_micro_batch_size_per_gpu
	// Fwd, Bwd and Step are the engine's global fwd, bwd and step timers
	// in seconds when the report is printed: the sum over the micro-steps
	// of the current gradient-accumulation window so far (DeepSpeed
	// resets them at each boundary).
	Fwd, Bwd, Step float64
	// RecomputeFwdFactor is flops_profiler.recompute_fwd_factor: the
	// backward is estimated as (2 + factor) × the forward's flops.
	RecomputeFwdFactor float64
}

// Report is one profiled forward pass, ready to print.
type Report struct {
	// Step is printed as "Profile Summary at step N".
	Step int
	// Modules is the model's module list (model.FlopCounter.FlopModules).
	Modules []model.FlopModule
	// Layout resolves the parameter names of Modules.
	Layout *model.Layout
	// Latency is each module's own measured forward time in seconds, 0
	// for a module that was not timed: DeepSpeed then shows the sum of
	// its children's (a ModuleList's is its blocks'), 0 for a leaf.
	// Nil means nothing was timed.
	Latency []float64
	// Engine is nil for a standalone profile (get_model_profile): no
	// header block, the forward latency is the root module's, and no
	// backward or step lines.
	Engine *Engine
	// ModuleDepth, TopModules and Detailed are the flops_profiler keys
	// module_depth, top_modules and detailed (see Options).
	ModuleDepth int
	TopModules  int
	Detailed    bool
}

// node is one module with the totals DeepSpeed computes over its subtree.
type node struct {
	m        *model.FlopModule
	children []int
	params   int64   // distinct parameter elements in the subtree (module.parameters())
	macs     int64   // get_module_macs
	flops    int64   // get_module_flops
	latency  float64 // get_module_duration
}

// tree is a Report's modules with their subtree totals; node 0 is the root.
type tree struct {
	nodes []node
}

// newTree checks the module list and computes every subtree's totals.
func newTree(r *Report) (*tree, error) {
	mods := r.Modules
	if len(mods) == 0 {
		return nil, errors.New("profiler: no modules")
	}
	if r.Latency != nil && len(r.Latency) != len(mods) {
		return nil, fmt.Errorf("profiler: %d latencies for %d modules", len(r.Latency), len(mods))
	}
	numel := map[string]int64{}
	for _, s := range r.Layout.Specs {
		numel[s.Name] = int64(s.Numel)
	}
	t := &tree{nodes: make([]node, len(mods))}
	var errs []error
	stack := []int{}
	for i := range mods {
		m := &mods[i]
		t.nodes[i].m = m
		switch {
		case i == 0 && m.Depth != 0:
			errs = append(errs, fmt.Errorf("profiler: module 0 %q has depth %d, want the root at depth 0", m.Name, m.Depth))
		case i > 0 && (m.Depth < 1 || m.Depth > mods[i-1].Depth+1):
			errs = append(errs, fmt.Errorf("profiler: module %d %q has depth %d after depth %d", i, m.Name, m.Depth, mods[i-1].Depth))
			continue
		}
		for _, p := range m.Params {
			if _, ok := numel[p]; !ok {
				errs = append(errs, fmt.Errorf("profiler: module %q names parameter %q, which the layout does not have", m.Name, p))
			}
		}
		stack = stack[:min(len(stack), m.Depth)]
		if len(stack) > 0 {
			parent := stack[len(stack)-1]
			t.nodes[parent].children = append(t.nodes[parent].children, i)
		}
		stack = append(stack, i)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var walk func(i int) map[string]bool
	walk = func(i int) map[string]bool {
		n := &t.nodes[i]
		seen := map[string]bool{}
		for _, p := range n.m.Params {
			seen[p] = true
		}
		n.macs, n.flops = n.m.MACs, n.m.FLOPs
		if r.Latency != nil {
			n.latency = r.Latency[i]
		}
		var childLatency float64
		for _, c := range n.children {
			for p := range walk(c) {
				seen[p] = true
			}
			n.macs += t.nodes[c].macs
			n.flops += t.nodes[c].flops
			childLatency += t.nodes[c].latency
		}
		if n.latency == 0 {
			n.latency = childLatency
		}
		for p := range seen {
			n.params += numel[p]
		}
		return seen
	}
	walk(0)
	return t, nil
}

// Write prints the report in DeepSpeed's layout, as
// FlopsProfiler.print_model_profile prints it (DeepSpeed 0.19; 0.14.5
// prints the same), with print(model) as torch ≥ 2.0 prints a module tree.
func Write(w io.Writer, r Report) error {
	t, err := newTree(&r)
	if err != nil {
		return err
	}
	var b strings.Builder
	t.writeSummary(&b, &r)
	b.WriteString("\n----------------------------- Aggregated Profile per GPU -----------------------------\n")
	t.writeAggregated(&b, r.ModuleDepth, r.TopModules)
	if r.Detailed {
		b.WriteString("\n------------------------------ Detailed Profile per GPU ------------------------------\n")
		b.WriteString("Each module profile is listed after its name in the following order: \n" +
			"params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd latency, fwd FLOPS\n")
		b.WriteString(detailedNote)
		b.WriteString(t.repr(0))
		b.WriteString("\n")
	}
	b.WriteString("------------------------------------------------------------------------------\n")
	_, err = io.WriteString(w, b.String())
	return err
}

const notations = "Notations:\n" +
	"data parallel size (dp_size), model parallel size(mp_size),\n" +
	"number of parameters (params), number of multiply-accumulate operations(MACs),\n" +
	"number of floating-point operations (flops), floating-point operations per second (FLOPS),\n" +
	"fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n" +
	"step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n"

const detailedNote = "\nNote: 1. A module can have torch.nn.module or torch.nn.functional to compute logits (e.g. CrossEntropyLoss). " +
	"They are not counted as submodules, thus not to be printed out. However they make up the difference between a parent's MACs (or latency) and the sum of its submodules'.\n" +
	"2. Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that could be larger than the maximum system throughput.\n" +
	"3. The fwd latency listed in the top module's profile is directly captured at the module forward function in PyTorch, " +
	"thus it's less than the fwd latency shown above which is captured in DeepSpeed.\n\n"

// line is DeepSpeed's '{:<70}  {:<8}'.format(label, value).
func line(b *strings.Builder, label, value string) {
	fmt.Fprintf(b, "%-70s  %-8s\n", label, value)
}

// div is a / b, or 0 where DeepSpeed would divide by a zero latency.
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (t *tree) writeSummary(b *strings.Builder, r *Report) {
	root := &t.nodes[0]
	b.WriteString("\n-------------------------- DeepSpeed Flops Profiler --------------------------\n")
	fmt.Fprintf(b, "Profile Summary at step %d:\n", r.Step)
	b.WriteString(notations)
	e := r.Engine
	mp := 1
	var modelParams int64 // DeepSpeed leaves it 0 without an engine
	if e != nil {
		line(b, "world size: ", fmt.Sprint(e.WorldSize))
		line(b, "data parallel size: ", fmt.Sprint(e.DataParallel))
		line(b, "model parallel size: ", fmt.Sprint(e.ModelParallel))
		line(b, "batch size per GPU: ", fmt.Sprint(e.MicroBatch))
		mp = e.ModelParallel
		modelParams = root.params * int64(mp)
	}
	flops := float64(root.flops)
	line(b, "params per GPU: ", ParamsToString(root.params))
	line(b, "params of model = params per GPU * mp_size: ", ParamsToString(modelParams))
	line(b, "fwd MACs per GPU: ", MACsToString(root.macs))
	line(b, "fwd flops per GPU: ", NumberToString(flops))
	line(b, "fwd flops of model = fwd flops per GPU * mp_size: ", NumberToString(float64(root.flops*int64(mp))))
	fwd := root.latency
	if e != nil {
		fwd = e.Fwd
	}
	line(b, "fwd latency: ", DurationToString(fwd))
	line(b, "fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", FLOPSToString(div(flops, fwd)))
	if e == nil {
		return
	}
	factor := 2 + e.RecomputeFwdFactor
	g := func(x float64) string { return pyG(x) }
	line(b, "bwd latency: ", DurationToString(e.Bwd))
	line(b, "bwd FLOPS per GPU = "+g(factor)+" * fwd flops per GPU / bwd latency: ", FLOPSToString(div(factor*flops, e.Bwd)))
	line(b, "fwd+bwd FLOPS per GPU = "+g(factor+1)+" * fwd flops per GPU / (fwd+bwd latency): ",
		FLOPSToString(div((factor+1)*flops, fwd+e.Bwd)))
	line(b, "step latency: ", DurationToString(e.Step))
	iter := fwd + e.Bwd + e.Step
	line(b, "iter latency: ", DurationToString(iter))
	line(b, "FLOPS per GPU = "+g(factor+1)+" * fwd flops per GPU / iter latency: ", FLOPSToString(div((factor+1)*flops, iter)))
	samples := float64(e.MicroBatch * e.WorldSize)
	line(b, "samples/second: ", model.PyFloat(pyRound(div(samples, iter), precision), 64))
}

// classTotals is one class's sums at one depth of the aggregated profile.
type classTotals struct {
	class        string
	macs, params int64
	latency      float64
}

// writeAggregated prints print_model_aggregated_profile: at each depth
// d < module_depth (every depth but the deepest for -1, as DeepSpeed's
// range(len(info) - 1) does), the top_modules classes by params, by MACs
// and by latency, each class summed over its modules at that depth.
func (t *tree) writeAggregated(b *strings.Builder, moduleDepth, top int) {
	var levels [][]classTotals
	var walk func(i, d int)
	walk = func(i, d int) {
		if d == len(levels) {
			levels = append(levels, nil)
		}
		n := &t.nodes[i]
		k := slices.IndexFunc(levels[d], func(c classTotals) bool { return c.class == n.m.Class })
		if k < 0 {
			levels[d] = append(levels[d], classTotals{class: n.m.Class})
			k = len(levels[d]) - 1
		}
		c := &levels[d][k]
		c.macs += n.macs
		c.params += n.params
		c.latency += n.latency
		for _, ch := range n.children {
			walk(ch, d+1)
		}
	}
	walk(0, 0)
	depth := moduleDepth
	if moduleDepth == -1 {
		depth = len(levels) - 1
	}
	// DeepSpeed fails with a KeyError past the deepest level; print the
	// levels there are.
	depth = min(depth, len(levels))
	fmt.Fprintf(b, "Top %d modules in terms of params, MACs or fwd latency at different model depths:\n", top)
	for d := range max(depth, 0) {
		n := min(top, len(levels[d]))
		by := func(less func(a, b classTotals) bool, value func(c classTotals) string) string {
			s := slices.Clone(levels[d])
			slices.SortStableFunc(s, func(a, b classTotals) int {
				switch {
				case less(b, a):
					return -1
				case less(a, b):
					return 1
				}
				return 0
			})
			items := make([]string, 0, n)
			for _, c := range s[:n] {
				items = append(items, "'"+c.class+"': '"+value(c)+"'")
			}
			return "{" + strings.Join(items, ", ") + "}"
		}
		fmt.Fprintf(b, "depth %d:\n", d)
		fmt.Fprintf(b, "    params      - %s\n", by(func(a, b classTotals) bool { return a.params < b.params },
			func(c classTotals) string { return ParamsToString(c.params) }))
		fmt.Fprintf(b, "    MACs        - %s\n", by(func(a, b classTotals) bool { return a.macs < b.macs },
			func(c classTotals) string { return MACsToString(c.macs) }))
		fmt.Fprintf(b, "    fwd latency - %s\n", by(func(a, b classTotals) bool { return a.latency < b.latency },
			func(c classTotals) string { return DurationToString(c.latency) }))
	}
}

// profileRepr is DeepSpeed's flops_repr, which replaces each module's
// extra_repr while the report prints: params, MACs and latency with
// their shares of the root's, the module's forward FLOPS, then the
// module's own extra_repr.
func (t *tree) profileRepr(i int) string {
	n, root := &t.nodes[i], &t.nodes[0]
	pct := func(a, b int64) string {
		if b == 0 {
			return "0"
		}
		return pyG(pyRound(percent(a, b), precision))
	}
	lat := "0"
	if root.latency != 0 {
		lat = pyG(pyRound(100*n.latency/root.latency, precision))
	}
	fl := 0.0
	if n.latency != 0 {
		fl = pyRound(float64(n.flops)/n.latency, precision)
	}
	items := []string{
		ParamsToString(n.params) + " = " + pct(n.params, root.params) + "% Params",
		MACsToString(n.macs) + " = " + pct(n.macs, root.macs) + "% MACs",
		DurationToString(n.latency) + " = " + lat + "% latency",
		FLOPSToString(fl),
	}
	if n.m.Extra != "" {
		items = append(items, n.m.Extra)
	}
	return strings.Join(items, ", ")
}

// repr is print(module) with the profile as each module's extra_repr,
// following torch.nn.Module.__repr__ (and ModuleList's, which folds runs
// of identical children into "(0-11): 12 x Block(...)" and prints no
// extra_repr of its own).
func (t *tree) repr(i int) string {
	n := &t.nodes[i]
	if n.m.Class == "ModuleList" {
		return t.listRepr(i)
	}
	extra := strings.Split(t.profileRepr(i), "\n")
	var children []string
	for _, c := range n.children {
		children = append(children, "("+t.nodes[c].m.Name+"): "+addIndent(t.repr(c), 2))
	}
	s := n.m.Class + "("
	if len(extra) == 1 && len(children) == 0 {
		s += extra[0]
	} else {
		s += "\n  " + strings.Join(append(extra, children...), "\n  ") + "\n"
	}
	return s + ")"
}

func (t *tree) listRepr(i int) string {
	n := &t.nodes[i]
	if len(n.children) == 0 {
		return "ModuleList()"
	}
	var lines []string
	for start := 0; start < len(n.children); {
		r := t.repr(n.children[start])
		end := start
		for end+1 < len(n.children) && t.repr(n.children[end+1]) == r {
			end++
		}
		s := fmt.Sprintf("(%d): %s", start, r)
		if end > start {
			s = fmt.Sprintf("(%d-%d): %d x %s", start, end, end-start+1, r)
		}
		lines = append(lines, addIndent(s, 2))
		start = end + 1
	}
	return "ModuleList(\n  " + strings.Join(lines, "\n  ") + "\n)"
}

// addIndent is torch's _addindent: every line but the first indented.
func addIndent(s string, spaces int) string {
	lines := strings.Split(s, "\n")
	if len(lines) == 1 {
		return s
	}
	pad := strings.Repeat(" ", spaces)
	for k := 1; k < len(lines); k++ {
		lines[k] = pad + lines[k]
	}
	return strings.Join(lines, "\n")
}
