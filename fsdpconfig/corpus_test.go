package fsdpconfig

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// got is what the corpus table checks of a Plan.
type got struct {
	Dialect  Dialect
	Version  int
	Strategy Strategy
	Stage    int
	Keep     bool
	Wrap     Wrap
	WrapMin  int
	Classes  string
	Offload  bool
	State    StateDict
	MP       string
	Procs    int
	Machines int
	Group    int // shard group size
	Replicas int
	Prefetch Prefetch
	Forward  bool
	Ckpt     bool // activation checkpointing
	CPURAM   bool
}

func project(p Plan) got {
	return got{p.Dialect, p.Version, p.Strategy, p.Stage, p.KeepAfterForward, p.Wrap, p.WrapMinNumParams,
		strings.Join(p.WrapClasses, ","), p.Offload, p.StateDict, p.MixedPrecision, p.NumProcesses, p.NumMachines,
		p.ShardGroupSize, p.ReplicaGroups, p.BackwardPrefetch, p.ForwardPrefetch, p.ActivationCkpt, p.CPURAMEfficient}
}

// acc1 is the plan of an accelerate FSDP1 FULL_SHARD config with the
// transformer policy over the model's own block class, on one machine:
// the common case the table rows start from.
func acc1(np int) got {
	return got{Dialect: Accelerate, Version: 1, Strategy: FullShard, Stage: 3, Wrap: TransformerWrap, Classes: "GPT2Block",
		State: FullStateDict, MP: "bf16", Procs: np, Machines: 1, Group: np, Replicas: 1, Prefetch: BackwardPre, CPURAM: true}
}

// corpusCase is one real file: accepted with a plan, or rejected with the
// error Accelerate or the Trainer raises. diags lists every Error, Warning
// and Unsupported as "severity line:col substring" (Info is not checked).
// The expectations come from reading accelerate HEAD 16cb6eb8 and
// transformers 00349ae8 (see doc.go), not from this package's output.
type corpusCase struct {
	file  string
	want  got
	diags []string
	why   string
}

func corpusCases() []corpusCase {
	with := func(g got, f func(*got)) got { f(&g); return g }
	noWrap := func(g *got) { g.Wrap, g.WrapMin, g.Classes = NoWrap, NoWrapMinNumParams, "" }
	return []corpusCase{
		{file: "BenasdTW__LLMTrain__fsdp.yaml", want: with(acc1(2), func(g *got) { g.Forward, g.Ckpt = true, true }),
			why: "CRLF line ends; no class named, so the model's _no_split_modules (GPT2Block)"},
		{file: "BenasdTW__LLMTrain__fsdp_grad_op.yaml", want: with(acc1(2), func(g *got) {
			g.Strategy, g.Keep, g.State = ShardGradOp, true, ShardedStateDict
		}), why: "SHARD_GRAD_OP is stage 3 with the parameters kept from forward to backward, not DeepSpeed's stage 2"},
		{file: "BenasdTW__LLMTrain__fsdp_no_shard.yaml", want: with(acc1(2), func(g *got) {
			g.Strategy, g.Stage, g.State, g.Group, g.Replicas = NoShard, 0, ShardedStateDict, 1, 2
		}), why: "NO_SHARD is DDP: stage 0, each rank its own replica"},
		{file: "CarperAI__trlx__accelerate_configs__fsdp_config_1.yaml", want: with(acc1(16), func(g *got) {
			noWrap(g)
			g.Offload, g.MP, g.Machines, g.Prefetch = true, "no", 2, NoPrefetch
		}), diags: []string{
			"warning 5:3 NO_WRAP: the whole model is one unit",
			"warning 6:3 old spelling fsdp_backward_prefetch_policy",
			"warning 7:3 old spelling without the fsdp_ prefix",
			"warning 8:3 old spelling without the fsdp_ prefix",
		}, why: "unprefixed keys: accelerate launch prefixes keys lacking fsdp (launch.py _validate_launch_command); sharding_strategy 1 is torch's FULL_SHARD"},
		{file: "CarperAI__trlx__accelerate_configs__new_transformer_config.yaml", want: with(acc1(2), func(g *got) { g.MP = "no" }),
			diags: []string{
				"warning 6:3 old spelling fsdp_backward_prefetch_policy",
				"warning 7:3 old spelling without the fsdp_ prefix",
				"warning 8:3 old spelling without the fsdp_ prefix",
				"warning 9:3 old spelling without the fsdp_ prefix",
			}, why: "transformer_layer_cls_to_wrap unprefixed names GPT2Block itself"},
		{file: "CarperAI__trlx__configs__fsdp_config_local.yaml", want: with(acc1(8), func(g *got) {
			g.Wrap, g.WrapMin, g.Classes, g.MP = SizeWrap, 100000000, "", "no"
		}), diags: []string{
			"warning 6:3 old spelling fsdp_backward_prefetch_policy",
			"warning 7:3 old spelling without the fsdp_ prefix",
			"warning 8:3 old spelling without the fsdp_ prefix",
			"warning 9:3 old spelling without the fsdp_ prefix",
		}},
		{file: "ContextualAI__HALOs__accelerate_config__fsdp_2x8gpu.yaml", want: with(acc1(16), func(g *got) {
			g.State, g.MP, g.Machines = ShardedStateDict, "no", 2
		}), diags: []string{"warning 7:3 old spelling fsdp_backward_prefetch_policy"},
			why: "no mixed_precision: process_config leaves None and launch uses 'no'; 16 processes over 2 machines is one 16-rank FULL_SHARD group"},
		{file: "OptimalScale__LMFlow__configs__accelerate_fsdp_config.yaml",
			diags: []string{`error 6:26 Invalid auto wrap policy: SIZE`},
			why:   `"SIZE" is not in FSDP_AUTO_WRAP_POLICY: the plugin raises ValueError (dataclasses.py __post_init__)`},
		{file: "byunggilljoe__llama70b_training_test__configs__fsdp_config_llama3.yaml", want: with(acc1(8), func(g *got) {
			g.Offload, g.State, g.Prefetch = true, ShardedStateDict, NoPrefetch
		}), diags: []string{}, why: "trailing spaces and a non-ASCII comment are only formatting"},
		{file: "cambrian-mllm__cambrian__fsdp_config.json", want: got{Dialect: Trainer, Version: 1, Strategy: FullShard, Stage: 3,
			Wrap: TransformerWrap, Classes: "LlamaDecoderLayer", State: FullStateDict, MP: "bf16", Procs: 1, Machines: 1, Group: 1, Replicas: 1, Ckpt: true},
			diags: []string{"warning 1:1 no --fsdp options", "warning 5:5 xla: torch_xla's FSDP"},
			why:   "a Trainer JSON without --fsdp: assumed full_shard auto_wrap; xla_fsdp_grad_ckpt is activation checkpointing, compute_dtype bfloat16 is bf16"},
		{file: "foundation-model-stack__fms-hf-tuning__fixtures__accelerate_fsdp_defaults.yaml", want: with(acc1(1), func(g *got) { g.MP = "no" }),
			why: "both prefetch spellings with the same value: the new key wins, nothing to report"},
		{file: "foundation-model-stack__fms-hf-tuning__tuning__config__fsdp_config.json", want: got{Dialect: Trainer, Version: 1, Strategy: FullShard,
			Stage: 3, Wrap: TransformerWrap, Classes: "LlamaDecoderLayer", State: ShardedStateDict, MP: "no", Procs: 1, Machines: 1, Group: 1, Replicas: 1,
			Prefetch: NoPrefetch, Forward: true},
			diags: []string{"warning 1:1 no --fsdp options", "warning 3:3 ignored by the Trainer: old spelling", "warning 6:3 ignored by the Trainer: the Trainer offloads only"},
			why:   `string booleans go through str().lower() and str_to_bool ("True" → true); the Trainer strips fsdp_ and never reads backward_prefetch_policy, so NO_PREFETCH`},
		{file: "hiyouga__LLaMA-Factory__examples__accelerate__fsdp2_config_qwen35.yaml", want: with(acc1(8), func(g *got) {
			g.Version, g.Wrap, g.WrapMin, g.Classes, g.Prefetch = 2, SizeWrap, 100000000, "", NoPrefetch
		})},
		{file: "hiyouga__LLaMA-Factory__examples__accelerate__fsdp_config.yaml", want: with(acc1(2), func(g *got) {
			g.Offload, g.State, g.MP = true, ShardedStateDict, "fp16"
		}), diags: []string{}},
		{file: "hiyouga__LLaMA-Factory__examples__accelerate__fsdp_v2_config.yaml", want: with(acc1(1), func(g *got) {
			noWrap(g)
			g.Version, g.Strategy, g.Keep, g.State, g.Prefetch = 2, ShardGradOp, true, ShardedStateDict, NoPrefetch
		}), diags: []string{
			"warning 4:1 NO_WRAP",
			"warning 8:3 ignored: FSDP2 does not read fsdp_sharding_strategy",
			"warning 0:0 no num_processes",
		}, why: "FSDP2 reads only reshard_after_forward (false: SHARD_GRAD_OP's profile), not the FSDP1 strategy; no wrap policy means the plugin's NO_WRAP; no num_processes makes accelerate launch demand --num_processes"},
		{file: "hiyouga__LLaMA-Factory__examples__ktransformers__accelerate__fsdp2_kt_int8.yaml",
			diags: []string{`error 17:1 unknown top-level key "kt_config"`},
			why:   "ClusterConfig.from_yaml_file raises ValueError on unknown keys (config_args.py)"},
		{file: "huggingface__accelerate__examples__config_yaml_templates__fsdp.yaml", want: with(acc1(2), func(g *got) { g.State = ShardedStateDict })},
		{file: "huggingface__accelerate__examples__torch_native_parallelism__configs__tp_hsdp.yaml", want: with(acc1(8), func(g *got) {
			g.Version, g.Strategy, g.State, g.CPURAM, g.Group, g.Replicas, g.Prefetch = 2, HybridShard, ShardedStateDict, false, 2, 4, NoPrefetch
		}), diags: []string{"unsupported 23:3 tensor/context parallelism (tp 2"},
			why: "parallelism_config dp_replicate 2 × dp_shard 2 is HSDP; accelerate counts dp_replicate × dp_shard × tp ranks, dszero's groups cover the data-parallel ranks: 8 processes in groups of 2"},
		{file: "huggingface__accelerate__tests__test_configs__latest_fsdp.yaml", want: with(acc1(1), func(g *got) {
			g.Classes, g.State, g.MP = "BertLayer", ShardedStateDict, "no"
		}), why: "fsdp_ignored_modules: null is None, which launch does not export"},
		{file: "huggingface__accelerate__tests__tp__fsdp2_tp_preparation_config.yaml", want: with(acc1(4), func(g *got) {
			noWrap(g)
			g.MP, g.Prefetch = "no", NoPrefetch
		}), diags: []string{"warning 4:1 NO_WRAP"},
			why: "no fsdp_config: launch defaults (FSDP_VERSION=1 despite the file's FSDP2 comment, FULL_SHARD, cpu_ram_efficient_loading true) and the plugin's NO_WRAP"},
		{file: "huggingface__peft__examples__sft__configs__fsdp_config.yaml", want: with(acc1(8), func(g *got) { g.State = ShardedStateDict }),
			diags: []string{"warning 7:3 old spelling fsdp_backward_prefetch_policy"}},
		{file: "huggingface__peft__examples__sft__configs__fsdp_config_qlora.yaml", want: with(acc1(2), func(g *got) {
			g.Offload, g.State, g.MP = true, ShardedStateDict, "no"
		}), diags: []string{}},
		{file: "huggingface__trl__examples__accelerate_configs__fsdp1.yaml", want: with(acc1(8), func(g *got) { g.Forward = true }),
			why: "FSDP1's strategy written in fsdp_reshard_after_forward (as `accelerate config` writes it); launch runs its FULL_SHARD default, the same here"},
		{file: "huggingface__trl__examples__accelerate_configs__fsdp2.yaml", want: with(acc1(8), func(g *got) { g.Version, g.Prefetch = 2, NoPrefetch })},
		{file: "huggingface__trl__examples__accelerate_configs__fsdp_qlora.yaml", want: with(acc1(8), func(g *got) {
			g.Offload, g.State = true, ShardedStateDict
		}), diags: []string{}},
		{file: "huggingface__trl__examples__scripts__nemo_gym__fsdp2.yaml", want: with(acc1(32), func(g *got) {
			g.Version, g.Prefetch, g.Machines = 2, NoPrefetch, 4
		})},
		{file: "huggingface__trl__tests__distributed__data__accelerate_configs__fsdp2.yaml", want: with(acc1(2), func(g *got) {
			noWrap(g)
			g.Version, g.State, g.MP, g.Prefetch = 2, ShardedStateDict, "no", NoPrefetch
		}), diags: []string{"warning 2:1 NO_WRAP"}, why: "every FSDP2 default: reshard true, SHARDED_STATE_DICT, NO_WRAP"},
		{file: "jxmorris12__cde__fsdp_config_16.yaml", want: with(acc1(128), func(g *got) {
			g.Strategy, g.Keep, g.Machines, g.Group, g.Replicas, g.Forward = HybridShardZero2, true, 16, 8, 16, true
		}), diags: []string{},
			why: "YAML drops the value's trailing space; the shard group is one machine's 8 processes"},
		{file: "modelscope__ms-swift__examples__ascend__train__qwen3_lora_fsdp__fsdp.json", want: with(acc1(8), func(g *got) { g.Forward = true }),
			diags: []string{`warning 15:5 did you mean "fsdp_transformer_layer_cls_to_wrap"`, "warning 19:5 ignored: accelerate launch has no fsdp_limit_all_gathers"},
			why:   "an accelerate config in JSON; the misspelt class key is never read, so the model's _no_split_modules apply"},
		{file: "modelscope__ms-swift__examples__train__multi-gpu__fsdp2_lora__fsdp2.json", want: with(acc1(2), func(g *got) {
			g.Version, g.Prefetch, g.Ckpt = 2, NoPrefetch, true
		})},
		{file: "modelscope__ms-swift__swift__llm__fsdp_config__fsdp_zero3_offload.json", want: got{Dialect: Trainer, Version: 2, Strategy: ShardGradOp,
			Stage: 3, Keep: true, Wrap: TransformerWrap, Classes: "GPT2Block", Offload: true, State: ShardedStateDict, MP: "no", Procs: 1, Machines: 1,
			Group: 1, Replicas: 1, CPURAM: true},
			diags: []string{"warning 9:9 no reshard_after_forward", "warning 14:9 ignored: the Trainer passes backward_prefetch only under FSDP1",
				"warning 15:9 ignored: the Trainer passes forward_prefetch only under FSDP1"},
			why: "the Trainer's FSDP2 reshard_after_forward default is \"false\" (_process_fsdp_args), so despite full_shard the parameters are kept from forward to backward"},
		{file: "neuralmagic__sparseml__integrations__huggingface-transformers__finetuning__example_fsdp_config.yaml", want: with(acc1(2), func(g *got) {
			g.Strategy, g.Keep, g.Classes, g.State, g.MP, g.CPURAM = ShardGradOp, true, "LlamaDecoderLayer", ShardedStateDict, "fp16", false
		}), diags: []string{"warning 7:3 old spelling fsdp_backward_prefetch_policy"}, why: "sharding_strategy 2 is SHARD_GRAD_OP"},
		{file: "pacman100__LLM-Workshop__code_assistant__training__configs__fsdp_config.yaml", want: with(acc1(8), func(g *got) {
			g.Strategy, g.Forward = HybridShard, true
		}), diags: []string{"warning 7:3 old spelling fsdp_backward_prefetch_policy"},
			why: "sharding_strategy 4 is HYBRID_SHARD; on one machine the one shard group holds all 8 ranks, so it runs as FULL_SHARD"},
		{file: "pacman100__hf_fsdp__accelerate_config.yaml", want: with(acc1(128), func(g *got) {
			g.Classes, g.Machines = "LlamaDecoderLayer", 8
		}), diags: []string{"warning 6:3 old spelling fsdp_backward_prefetch_policy"}},
		{file: "s1ckrain__GRPO__multinode_examples__fsdp2_wan.yaml", want: with(acc1(32), func(g *got) {
			g.Version, g.Classes, g.State, g.Machines, g.Prefetch, g.Ckpt, g.CPURAM = 2, "WanTransformerBlock", ShardedStateDict, 4, NoPrefetch, true, false
		}), diags: []string{
			"warning 5:3 ignored: FSDP2 does not read fsdp_sharding_strategy (HYBRID_SHARD)",
			"warning 6:3 ignored: accelerate has no fsdp_device_mesh_shape",
			"warning 7:3 ignored: accelerate has no fsdp_device_mesh_dim_names",
			"warning 11:3 FSDP2 has no forward prefetch switch",
		}, why: "under FSDP2 accelerate reads neither the strategy nor the mesh keys: plain FULL_SHARD over all 32 ranks"},
		{file: "tom-peter12__T5-Parallelism__fsdp_config.json", want: got{Dialect: Trainer, Version: 1, Strategy: FullShard, Stage: 3,
			Wrap: TransformerWrap, Classes: "T5Block", State: FullStateDict, MP: "no", Procs: 1, Machines: 1, Group: 1, Replicas: 1, Prefetch: BackwardPre, Ckpt: true},
			diags: []string{"warning 1:1 no --fsdp options"}, why: "the class list and the lowercase backward_pre are the Trainer's accepted forms"},
		{file: "huggingface__optimum-habana__examples__language-modeling__fsdp_config.json", want: got{Dialect: Trainer, Version: 1, Strategy: FullShard,
			Stage: 3, Wrap: TransformerWrap, Classes: "GaudiLlamaDecoderLayer", State: FullStateDict, MP: "no", Procs: 1, Machines: 1, Group: 1, Replicas: 1,
			Prefetch: BackwardPre, CPURAM: true},
			diags: []string{"warning 1:1 no --fsdp options", "warning 5:5 ignored by the Trainer: the Trainer offloads only", "warning 6:5 ignored by the Trainer: the Trainer takes the strategy from --fsdp"},
			why:   "mixed prefixes: the Trainer strips fsdp_; fsdp_sharding_strategy 1 is not a Trainer key (the strategy is --fsdp's)"},
	}
}

func TestCorpus(t *testing.T) {
	cases := corpusCases()
	listed := readSources(t)
	seen := map[string]bool{}
	accepted, rejected := 0, 0
	for _, c := range cases {
		seen[c.file] = true
		t.Run(c.file, func(t *testing.T) {
			p, diags := Load(filepath.Join("testdata", "corpus", c.file), Options{})
			checkDiags(t, diags, c.diags)
			if diags.HasErrors() {
				rejected++
				if c.want != (got{}) {
					t.Errorf("rejected, want accepted: %v", diags.Filter(Error))
				}
				return
			}
			accepted++
			if diff := cmp.Diff(c.want, project(p)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
	for f := range listed {
		if !seen[f] {
			t.Errorf("%s is in SOURCES.tsv but not in the table", f)
		}
	}
	for f := range seen {
		if !listed[f] {
			t.Errorf("%s is in the table but not in SOURCES.tsv", f)
		}
	}
	t.Logf("corpus: %d accepted, %d rejected", accepted, rejected)
}

// checkDiags compares every Error, Warning and Unsupported with want
// ("severity line:col substring"), one for one.
func checkDiags(t *testing.T, diags Diagnostics, want []string) {
	t.Helper()
	var gotList []Diagnostic
	for _, d := range diags {
		if d.Severity != Info {
			gotList = append(gotList, d)
		}
	}
	used := make([]bool, len(gotList))
	for _, w := range want {
		sev, rest, _ := strings.Cut(w, " ")
		at, sub, _ := strings.Cut(rest, " ")
		found := false
		for i, d := range gotList {
			if !used[i] && d.Severity.String() == sev && fmt.Sprintf("%d:%d", d.Line, d.Col) == at && strings.Contains(d.Msg+"; "+d.Fix, sub) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("missing diagnostic %q", w)
		}
	}
	for i, d := range gotList {
		if !used[i] {
			t.Errorf("unexpected diagnostic: %s", d)
		}
	}
}

func readSources(t *testing.T) map[string]bool {
	f, err := os.Open(filepath.Join("testdata", "corpus", "SOURCES.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), "\t")
		if name != "" && name != "file" {
			out[name] = true
		}
	}
	return out
}

// TestCorpusFileList checks that testdata holds the 37 shared files.
func TestCorpusFileList(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	var names []string
	for _, f := range files {
		if ext := filepath.Ext(f); ext == ".yaml" || ext == ".json" {
			names = append(names, filepath.Base(f))
		}
	}
	sort.Strings(names)
	if len(names) != 37 {
		t.Errorf("%d corpus files, want 37", len(names))
	}
}
