package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/fsdpconfig"
)

// isFSDPFile: an Accelerate config (YAML, or JSON with distributed_type)
// or a Trainer fsdp_config JSON (fsdp/fsdp_config, or only FSDP keys)
// rather than a ds_config.
func isFSDPFile(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return true
	case ".json":
	default:
		return false
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil || len(top) == 0 {
		return false // not plain JSON: a ds_config (DeepSpeed reads Hjson)
	}
	for _, k := range []string{"distributed_type", "fsdp", "fsdp_config"} {
		if _, ok := top[k]; ok {
			return true
		}
	}
	for k := range top {
		if !strings.HasPrefix(k, "fsdp_") && !strings.HasPrefix(k, "_") && !trainerFSDPKeys[k] {
			return false
		}
	}
	return true
}

// trainerFSDPKeys are the Trainer's fsdp_config keys without the fsdp_
// prefix it strips.
var trainerFSDPKeys = map[string]bool{"activation_checkpointing": true, "backward_prefetch": true, "forward_prefetch": true,
	"limit_all_gathers": true, "sync_module_states": true, "transformer_layer_cls_to_wrap": true, "use_orig_params": true,
	"min_num_params": true, "xla": true, "xla_fsdp_grad_ckpt": true, "xla_fsdp_settings": true, "cpu_ram_efficient_loading": true,
	"offload_params": true, "state_dict_type": true, "reshard_after_forward": true, "auto_wrap_policy": true, "version": true, "cpu_offload": true}

// fsdpSource is an FSDP setup given on the command line: an Accelerate
// YAML (--fsdp-config, or a .yaml FILE), or the Trainer's --fsdp options
// with an optional --fsdp_config JSON.
type fsdpSource struct {
	file       string // the config file; "" with --fsdp alone
	options    string // the Trainer's --fsdp option string
	shardGroup int    // --shard-group-size: ranks per shard group of a hybrid strategy (0: one machine's)
}

func (s fsdpSource) given() bool { return s.file != "" || s.options != "" }

// load reads the FSDP setup for world ranks on this machine (0: the
// file's num_processes and num_machines) with the Trainer flags of hf.
func (s fsdpSource) load(world int, hf *dsconfig.HFArgs, gradCkpt bool) (fsdpconfig.Plan, fsdpconfig.Diagnostics) {
	o := fsdpconfig.Options{TrainerFSDP: s.options, NumProcesses: world, GradientCheckpointing: gradCkpt, ShardGroupSize: s.shardGroup}
	if world > 0 {
		o.NumMachines = 1 // --nproc: that many ranks here
	}
	switch {
	case hf != nil && hf.BF16:
		o.MixedPrecision = "bf16"
	case hf != nil && hf.FP16:
		o.MixedPrecision = "fp16"
	}
	if s.file == "" {
		o.Dialect = fsdpconfig.Trainer
		return fsdpconfig.Compile("--fsdp", []byte("{}"), o)
	}
	return fsdpconfig.Load(s.file, o)
}

// name is how messages call the setup.
func (s fsdpSource) name() string {
	if s.file != "" {
		return s.file
	}
	return fmt.Sprintf("--fsdp %q", s.options)
}

// dsPlan compiles the ds_config that means the same as the FSDP plan: its
// batch sizes, clipping and optimizer are "auto", filled as HF's Trainer
// fills them, from the HF flags or the Trainer's defaults.
func dsPlan(src fsdpSource, fp fsdpconfig.Plan, world int, hf *dsconfig.HFArgs) (dsconfig.Plan, dsconfig.Diagnostics) {
	a := dsconfig.DefaultHFArgs()
	if hf != nil {
		a = *hf
	}
	// The FSDP setup's mixed precision is the run's (Accelerate's
	// mixed_precision, or the Trainer's --bf16/--fp16 it was read with).
	a.BF16, a.FP16 = fp.MixedPrecision == "bf16", fp.MixedPrecision == "fp16"
	hf = &a
	return dsconfig.Compile(src.name()+" (as a ds_config)", fsdpconfig.ToDSConfig(fp), dsconfig.Options{WorldSize: world, HF: hf})
}

// printFSDPDiags writes the diagnostics worth a user's attention and
// reports whether the setup can run: no error, nothing unsupported.
func printFSDPDiags(w io.Writer, diags fsdpconfig.Diagnostics, quiet bool) (ok bool) {
	for _, d := range diags {
		if d.Severity == dsconfig.Info || quiet && d.Severity != dsconfig.Error {
			continue
		}
		fmt.Fprintln(w, d.String())
	}
	return !diags.HasErrors() && diags.Count(dsconfig.Unsupported) == 0
}

// fsdpSummary is check's one line for an accepted FSDP setup.
func fsdpSummary(fp fsdpconfig.Plan) string {
	s := fmt.Sprintf("FSDP%d %s → ZeRO stage %d", fp.Version, fp.Strategy, fp.Stage)
	if fp.KeepAfterForward {
		s += " keeping parameters from forward to backward"
	}
	if fp.Hybrid() {
		s += fmt.Sprintf(" on %d shard groups of %d", fp.ReplicaGroups, fp.ShardGroupSize)
	}
	if fp.Offload {
		s += ", offload to the host"
	}
	return s + fmt.Sprintf(", %s, %d process(es)", fp.MixedPrecision, fp.NumProcesses)
}

// checkFSDP is config check for an FSDP setup; it reports whether the
// setup is rejected (by Accelerate or the Trainer, or by its ds_config).
func checkFSDP(src fsdpSource, world int, hf *dsconfig.HFArgs, quiet bool, stdout io.Writer) (rejected bool) {
	fp, diags := src.load(world, hf, false)
	printFSDPDiags(stdout, diags, quiet)
	if diags.HasErrors() {
		fmt.Fprintf(stdout, "%s: REJECT: %d error(s); Accelerate or the Trainer would not start with this setup\n", src.name(), diags.Count(dsconfig.Error))
		return true
	}
	_, dd := dsPlan(src, fp, fp.NumProcesses, hf)
	if dd.HasErrors() {
		for _, d := range dd.Filter(dsconfig.Error) {
			fmt.Fprintln(stdout, d.String())
		}
		fmt.Fprintf(stdout, "%s: REJECT: its ds_config does not compile (see above)\n", src.name())
		return true
	}
	fmt.Fprintf(stdout, "%s: ACCEPT: %s", src.name(), fsdpSummary(fp))
	if n := diags.Count(dsconfig.Warning); n > 0 {
		fmt.Fprintf(stdout, "; %d warning(s)", n)
	}
	if n := diags.Count(dsconfig.Unsupported); n > 0 {
		fmt.Fprintf(stdout, "; %d feature(s) dszero does not run yet", n)
	}
	fmt.Fprintln(stdout)
	return false
}

// explainFSDP is config explain for an FSDP setup: the FSDP plan, the
// ds_config that means the same, and that ds_config's own explanation.
func explainFSDP(src fsdpSource, world int, hf *dsconfig.HFArgs, asJSON bool, stdout, stderr io.Writer) int {
	fp, diags := src.load(world, hf, false)
	if diags.HasErrors() {
		printFSDPDiags(stderr, diags, true)
		fmt.Fprintf(stderr, "%s: rejected; fix the errors above to see the plan\n", src.name())
		return 1
	}
	plan, dd := dsPlan(src, fp, fp.NumProcesses, hf)
	if dd.HasErrors() {
		for _, d := range dd.Filter(dsconfig.Error) {
			fmt.Fprintln(stderr, d.String())
		}
		return 1
	}
	js := fsdpconfig.ToDSConfig(fp)
	if asJSON {
		e := explainJSON(plan)
		return writeJSON(stdout, stderr, struct {
			FSDP     fsdpconfig.Plan `json:"fsdp"`
			DSConfig json.RawMessage `json:"ds_config"`
			Plan     explained       `json:"plan"`
		}{fp, js, e})
	}
	fsdpconfig.ExplainText(stdout, fp)
	fmt.Fprintf(stdout, "\nThe same as a ds_config\n%s\n", indent(string(js), "  "))
	for _, n := range fsdpconfig.DSConfigNotes(fp) {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	fmt.Fprintln(stdout)
	explainText(stdout, plan)
	return 0
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+by)
}
