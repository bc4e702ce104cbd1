package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/model"
	"github.com/dszero/dszero/model/gpt"
	"github.com/dszero/dszero/stage3"
	"github.com/dszero/dszero/zero/partition"
)

// modelConfig is --model: a preset name, or a directory with config.json.
func modelConfig(arg string) (gpt.Config, error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		c, err := gpt.ReadConfig(filepath.Join(arg, "config.json"))
		if err != nil {
			return c, fmt.Errorf("--model %s: %w", arg, err)
		}
		return c, nil
	}
	c, err := gpt.Preset(arg)
	if err != nil {
		return c, fmt.Errorf("--model: %w (or give a directory with config.json)", err)
	}
	return c, nil
}

// unitsReport is what stage 3 does with a model under a plan: the wrap
// policy, the gathered units and the persistent parameters.
type unitsReport struct {
	Model             string      `json:"model"`
	Params            int         `json:"params"`
	WrapPolicy        string      `json:"wrap_policy"`
	Units             []unitEntry `json:"units"`
	PersistentParams  int         `json:"persistent_params"`
	PersistentNumel   int         `json:"persistent_elements"`
	PartitionPerRank  int         `json:"partition_elements_per_rank"`
	PaddingPerRankMax int         `json:"padding_elements_max_rank"`
	LargestUnit       int         `json:"largest_unit_elements"`
}

type unitEntry struct {
	Name       string `json:"name"`
	Elements   int    `json:"elements"`
	Persistent int    `json:"persistent_elements"`
	Borrows    []int  `json:"also_reads,omitempty"`
}

func describeUnits(p dsconfig.Plan, name string, l *model.Layout, wrap stage3.WrapPolicy) unitsReport {
	z := p.Zero
	gs := stage3.Groups(l, wrap)
	persist := stage3.Persistent(l, z.ParamPersistenceThreshold, z.ModelPersistenceThreshold)
	r := unitsReport{Model: name, Params: l.Numel, WrapPolicy: wrap.String()}
	for _, g := range gs {
		e := unitEntry{Name: g.Name, Elements: g.Numel, Borrows: g.Borrows}
		for i := g.First; i <= g.Last; i++ {
			if persist[i] {
				e.Persistent += l.Specs[i].Numel
			}
		}
		r.Units = append(r.Units, e)
		r.LargestUnit = max(r.LargestUnit, g.Numel)
	}
	for i, ok := range persist {
		if ok {
			r.PersistentParams++
			r.PersistentNumel += l.Specs[i].Numel
		}
	}
	ps := make([]partition.Param, len(l.Specs))
	for i, s := range l.Specs {
		ps[i] = partition.Param{Name: s.Name, Numel: s.Numel}
	}
	lay := partition.Stage3(ps, p.WorldSize, int(z.SubGroupSize))
	r.PartitionPerRank = lay.RankNumel
	for rank := range p.WorldSize {
		r.PaddingPerRankMax = max(r.PaddingPerRankMax, lay.Padding(rank))
	}
	return r
}

func (r unitsReport) text(w io.Writer) {
	fmt.Fprintf(w, "\nStage 3 units of %s (%d parameters, %s in fp32)\n", r.Model, r.Params, mem.FormatBytes(4*int64(r.Params)))
	fmt.Fprintf(w, "  wrap policy: %s\n", r.WrapPolicy)
	fmt.Fprintf(w, "  %3s %-22s %12s %12s\n", "#", "unit", "elements", "persistent")
	for i, u := range r.Units {
		fmt.Fprintf(w, "  %3d %-22s %12d %12d", i, u.Name, u.Elements, u.Persistent)
		if len(u.Borrows) > 0 {
			fmt.Fprintf(w, "  also reads unit %v", u.Borrows)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  persistent (always gathered): %d parameters, %d elements (%s in fp32)\n",
		r.PersistentParams, r.PersistentNumel, mem.FormatBytes(4*int64(r.PersistentNumel)))
	fmt.Fprintf(w, "  partitions per rank: %d elements (padding ≤ %d); largest unit gathered at once: %d elements (%s in fp32)\n",
		r.PartitionPerRank, r.PaddingPerRankMax, r.LargestUnit, mem.FormatBytes(4*int64(r.LargestUnit)))
}
