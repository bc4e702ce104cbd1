package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/dszero/dszero/dsconfig"
)

// explainKnobs prints what the training loop does beside ZeRO: the FLOPS
// profiler, the monitors, the comms logger, progressive layer drop and the
// sequence-length curriculum; nothing when none is on.
func explainKnobs(w io.Writer, p dsconfig.Plan) {
	var lines []string
	if fp := p.FlopsProfiler; fp.Enabled {
		out := "stdout"
		if fp.OutputFile != "" {
			out = fp.OutputFile
		}
		lines = append(lines, fmt.Sprintf("FLOPS profiler: the forwards of optimizer step %d (after %d finished), module_depth %d, top_modules %d, detailed %v, to %s",
			fp.ProfileStep+1, fp.ProfileStep, fp.ModuleDepth, fp.TopModules, fp.Detailed, out))
	}
	m := p.Monitors
	if m.TensorBoard {
		lines = append(lines, fmt.Sprintf("tensorboard: event file in %s", joinDir(m.TensorBoardDir, m.JobName)))
	}
	if m.CSV {
		lines = append(lines, fmt.Sprintf("csv_monitor: one .csv per curve in %s", joinDir(m.CSVDir, m.CSVJobName)))
	}
	if cl := p.CommsLogger; cl.Enabled {
		ops := "every collective"
		if !cl.ProfAll {
			ops = strings.Join(cl.ProfOps, ", ")
		}
		lines = append(lines, fmt.Sprintf("comms logger: %s, summary table after training (verbose %v)", ops, cl.Verbose))
	}
	if pld := p.ProgressiveLayerDrop; pld.Enabled {
		lines = append(lines, fmt.Sprintf("progressive layer drop: theta(t) = (1 − %g)·exp(−%g·t) + %g; block i of L kept with probability 1 − i·(1 − theta)/L",
			pld.Theta, pld.Gamma, pld.Theta))
	}
	if cu := p.Curriculum; cu.Enabled {
		sched := fmt.Sprintf("%s over %d steps in multiples of %d", cu.ScheduleType, cu.TotalCurriculumStep, cu.DifficultyStep)
		switch cu.ScheduleType {
		case "fixed_root":
			sched += fmt.Sprintf(", root degree %g", cu.RootDegree)
		case "fixed_discrete":
			sched = fmt.Sprintf("fixed_discrete: lengths %v up to steps %v", cu.Difficulty, cu.MaxStep)
		}
		lines = append(lines, fmt.Sprintf("sequence-length curriculum (%s): %d to %d tokens, %s", cu.Source, cu.MinDifficulty, cu.MaxDifficulty, sched))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTraining loop\n")
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// joinDir is os.path.join(output_path, job_name) as DeepSpeed writes it.
func joinDir(path, job string) string {
	if path == "" {
		return job
	}
	return strings.TrimSuffix(path, "/") + "/" + job
}
