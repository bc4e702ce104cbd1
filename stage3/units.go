package stage3

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/model"
)

// WrapPolicy groups a model's units into the units stage 3 gathers and
// releases together, as FSDP's auto_wrap_policy decides which modules get
// an FSDP instance of their own.
type WrapPolicy struct {
	// MinNumParams > 0 is FSDP's size_based_auto_wrap_policy: consecutive
	// model units are merged into one gathered unit until it holds at
	// least MinNumParams elements; what is left at the end joins the last
	// one. 0 is the transformer policy (transformer_auto_wrap_policy,
	// DeepSpeed's per-module hooks): every model unit — embeddings, each
	// block, final norm and head — is gathered on its own.
	MinNumParams int
}

// String names the policy as `dszero config explain` shows it.
func (p WrapPolicy) String() string {
	if p.MinNumParams > 0 {
		return fmt.Sprintf("size based (min_num_params %d)", p.MinNumParams)
	}
	return "transformer layer based (one gathered unit per model unit)"
}

// Group is one gathered unit: consecutive model units whose parameters are
// all-gathered and released together.
type Group struct {
	Name       string
	Units      []int // the model units, consecutive
	First      int   // first parameter (index into Layout.Specs)
	Last       int   // last parameter, inclusive
	Offset     int   // first element in the flat buffer
	Numel      int   // elements, [Offset, Offset+Numel)
	Borrows    []int // other groups its units read (a tied head reads the embeddings)
	Persistent int   // elements of its persistent parameters (always gathered)
}

// Groups applies p to l's units. It panics on a layout without units.
func Groups(l *model.Layout, p WrapPolicy) []Group {
	if len(l.Units) == 0 {
		panic("stage3: a layout without units")
	}
	var spans [][]int // model units per group
	var cur []int
	acc := 0
	for u, un := range l.Units {
		cur = append(cur, u)
		acc += un.Numel
		if p.MinNumParams <= 0 || acc >= p.MinNumParams {
			spans = append(spans, cur)
			cur, acc = nil, 0
		}
	}
	if len(cur) > 0 {
		if len(spans) == 0 {
			spans = append(spans, cur)
		} else {
			spans[len(spans)-1] = append(spans[len(spans)-1], cur...)
		}
	}
	of := make([]int, len(l.Units))
	gs := make([]Group, len(spans))
	for g, us := range spans {
		first, last := l.Units[us[0]], l.Units[us[len(us)-1]]
		name := first.Name
		if len(us) > 1 {
			name = first.Name + "…" + last.Name
		}
		gs[g] = Group{Name: name, Units: us, First: first.First, Last: last.Last,
			Offset: first.Offset, Numel: last.Offset + last.Numel - first.Offset}
		for _, u := range us {
			of[u] = g
		}
	}
	for g := range gs {
		for _, u := range gs[g].Units {
			for _, b := range l.Units[u].Borrows {
				if bg := of[b]; bg != g && !contains(gs[g].Borrows, bg) {
					gs[g].Borrows = append(gs[g].Borrows, bg)
				}
			}
		}
	}
	return gs
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Persistent marks the parameters that stay gathered for the whole run,
// as DeepSpeed's mark_persistent_parameters does: in named_parameters
// order, a parameter with numel ≤ paramThreshold is persistent as long as
// the running total of persistent elements stays ≤ modelThreshold (a
// parameter that would exceed it is skipped, and smaller ones after it may
// still fit).
func Persistent(l *model.Layout, paramThreshold, modelThreshold int64) []bool {
	out := make([]bool, len(l.Specs))
	var total int64
	for i, s := range l.Specs {
		n := int64(s.Numel)
		if n+total > modelThreshold {
			continue
		}
		if n <= paramThreshold {
			out[i] = true
			total += n
		}
	}
	return out
}

// Describe lists the groups and their persistent elements, one line each,
// for `dszero config explain` and error messages.
func Describe(gs []Group) string {
	var b strings.Builder
	for g, gr := range gs {
		fmt.Fprintf(&b, "%3d %-24s %12d elements", g, gr.Name, gr.Numel)
		if gr.Persistent > 0 {
			fmt.Fprintf(&b, " (%d persistent)", gr.Persistent)
		}
		if len(gr.Borrows) > 0 {
			fmt.Fprintf(&b, ", also reads unit %v", gr.Borrows)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
