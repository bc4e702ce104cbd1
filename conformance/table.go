package conformance

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one line per report: case, status, the largest
// differences of the losses (relative and absolute) and of the final
// weights (absolute, and ‖Δ‖₂/‖w‖₂) against their tolerances, checkpoint
// and resume, time; then the reasons of the cases that did not pass, and
// a summary line.
func WriteTable(w io.Writer, reps []Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tstatus\tstage\tdtype\tloss max rel Δ\tloss max |Δ|\tloss tol\tweights max |Δ|\tweights ‖Δ‖/‖w‖\tweights tol\tcheckpoint\tresume\ttime")
	var facts []Report
	for _, r := range reps {
		if r.Kind != "" {
			facts = append(facts, r)
			continue
		}
		lossRel, lossAbs, lossTol, wAbs, wRel, wTol := "-", "-", "-", "-", "-", "-"
		if r.Loss.N > 0 {
			lossRel, lossAbs, lossTol = e(r.Loss.MaxRel), e(r.Loss.MaxAbs), fmt.Sprintf("%.0e rel", r.Loss.Tol)
		}
		if r.Weights.N > 0 {
			wAbs, wRel, wTol = e(r.Weights.MaxAbs), e(r.Weights.MaxRel), fmt.Sprintf("%.0e abs", r.Weights.Tol)
		}
		stage, dtype := "-", "-"
		if r.DType != "" {
			stage, dtype = fmt.Sprint(r.Stage), r.DType
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2fs\n", r.Case, r.Status, stage, dtype,
			lossRel, lossAbs, lossTol, wAbs, wRel, wTol, r.Checkpoint, r.Resume, r.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(facts) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "reference facts\tstatus\tkind\tentries\tvalues\tmax |Δ|\tmax rel Δ\ttol")
		for _, r := range facts {
			tol := fmt.Sprintf("%.0e", r.Facts.Tol)
			if r.Facts.Tol == 0 {
				tol = "exact"
			} else if r.Facts.Rel {
				tol += " rel"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", r.Case, r.Status, r.Kind, r.Steps, r.Facts.N, e(r.Facts.MaxAbs), e(r.Facts.MaxRel), tol)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, r := range reps {
		if n := r.Noise; n != nil {
			fmt.Fprintf(w, "%s: %d noise-driven elements reported apart (max |Δ| / band): %s\n", r.Case, n.N(), noiseTensors(n))
		}
	}
	counts := map[Status]int{}
	for _, r := range reps {
		counts[r.Status]++
		if r.Status != Pass {
			fmt.Fprintf(w, "%s: %s: %s\n", r.Case, r.Status, r.Reason)
		}
	}
	_, err := fmt.Fprintf(w, "%d cases: %d pass, %d fail, %d unsupported, %d error, %d without a reference result (not counted)\n",
		len(reps), counts[Pass], counts[Fail], counts[Unsupported], counts[Error], counts[NoResult])
	return err
}

// Passed says every case with a reference result passed.
func Passed(reps []Report) bool {
	for _, r := range reps {
		if r.Status != Pass && r.Status != NoResult {
			return false
		}
	}
	return true
}

// noiseTensors lists a NoiseReport's tensors, name ×count max |Δ|/band,
// in name order.
func noiseTensors(n *NoiseReport) string {
	names := slices.Sorted(maps.Keys(n.Tensors))
	for i, k := range names {
		m := n.Tensors[k]
		names[i] = fmt.Sprintf("%s ×%d %.2e/%.2e", k, m.N, m.MaxAbs, m.Tol)
	}
	return strings.Join(names, ", ")
}

func e(x float64) string { return fmt.Sprintf("%.2e", x) }
