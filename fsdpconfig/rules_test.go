package fsdpconfig

import (
	"strings"
	"testing"
)

// acc is an accelerate config with the given fsdp_config lines.
func acc(fsdpLines ...string) string {
	return "distributed_type: FSDP\nnum_processes: 4\nfsdp_config:\n  " + strings.Join(fsdpLines, "\n  ") + "\n"
}

type ruleCase struct {
	name  string
	file  string // decides YAML or JSON; default x.yaml
	data  string
	opts  Options
	diags []string // every Error, Warning, Unsupported: "severity line:col substring"
	check func(t *testing.T, p Plan)
}

func ruleCases() []ruleCase {
	strategy := func(s Strategy, keep bool) func(*testing.T, Plan) {
		return func(t *testing.T, p Plan) {
			if p.Strategy != s || p.KeepAfterForward != keep {
				t.Errorf("strategy %s keep %v, want %s keep %v", p.Strategy, p.KeepAfterForward, s, keep)
			}
		}
	}
	tbw := "fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP"
	return []ruleCase{
		// YAML 1.1 as yaml.safe_load types it.
		{name: "unquoted no is false", data: "distributed_type: FSDP\nnum_processes: 2\nmixed_precision: no\nfsdp_config:\n  " + tbw + "\n",
			diags: []string{"error 3:18 unquoted no is YAML's boolean false"}},
		{name: "yes is true", data: acc(tbw, "fsdp_offload_params: yes"), diags: []string{},
			check: func(t *testing.T, p Plan) {
				if !p.Offload {
					t.Error("offload false")
				}
			}},
		{name: "1e8 is a string", data: acc("fsdp_auto_wrap_policy: SIZE_BASED_WRAP", "fsdp_min_num_params: 1e8"),
			diags: []string{"error 5:24 YAML reads 1e8 as a string"}},
		{name: "1_000_000 is an int", data: acc("fsdp_auto_wrap_policy: size_based_wrap", "fsdp_min_num_params: 1_000_000"),
			check: func(t *testing.T, p Plan) {
				if p.Wrap != SizeWrap || p.WrapMinNumParams != 1000000 {
					t.Errorf("wrap %s %d", p.Wrap, p.WrapMinNumParams)
				}
			}},
		{name: "size wrap without min_num_params takes launch's 1e8", data: acc("fsdp_auto_wrap_policy: SIZE_BASED_WRAP"),
			check: func(t *testing.T, p Plan) {
				if p.WrapMinNumParams != 100000000 {
					t.Errorf("min %d", p.WrapMinNumParams)
				}
			}},
		{name: "size wrap with 0 drops the policy", data: acc("fsdp_auto_wrap_policy: SIZE_BASED_WRAP", "fsdp_min_num_params: 0"),
			diags: []string{"warning 5:3 silently drops the policy", "warning 4:3 NO_WRAP"}},

		// Strategies by name and number.
		{name: "lowercase name", data: acc(tbw, "fsdp_sharding_strategy: shard_grad_op"), check: strategy(ShardGradOp, true)},
		{name: "3 is NO_SHARD", data: acc(tbw, "fsdp_sharding_strategy: 3"), check: func(t *testing.T, p Plan) {
			if p.Strategy != NoShard || p.Stage != 0 {
				t.Errorf("%s stage %d", p.Strategy, p.Stage)
			}
		}},
		{name: "5 is HYBRID_SHARD_ZERO2 over machines", data: "distributed_type: FSDP\nnum_processes: 8\nnum_machines: 2\nfsdp_config:\n  " + tbw + "\n  fsdp_sharding_strategy: 5\n",
			diags: []string{},
			check: func(t *testing.T, p Plan) {
				if !p.Hybrid() || p.ShardGroupSize != 4 || !p.KeepAfterForward {
					t.Errorf("hybrid %v group %d keep %v", p.Hybrid(), p.ShardGroupSize, p.KeepAfterForward)
				}
			}},
		{name: "shard group option", data: acc(tbw, "fsdp_sharding_strategy: HYBRID_SHARD"), opts: Options{ShardGroupSize: 2},
			diags: []string{}},
		{name: "shard group must divide", data: acc(tbw, "fsdp_sharding_strategy: HYBRID_SHARD"), opts: Options{ShardGroupSize: 3},
			diags: []string{"error 5:3 a shard group of 3 does not divide 4 processes"}},
		{name: "6 is not a strategy", data: acc("fsdp_sharding_strategy: 6"), diags: []string{"error 4:27 6 is not a valid ShardingStrategy"}},
		{name: "misspelt strategy", data: acc("fsdp_sharding_strategy: FULL_SHRAD"), diags: []string{`error 4:27 did you mean "FULL_SHARD"?`}},

		// FSDP1 and FSDP2 readings of reshard_after_forward.
		{name: "v1 strategy in the reshard key", data: acc(tbw, "fsdp_version: 1", "fsdp_reshard_after_forward: SHARD_GRAD_OP"),
			diags: []string{"warning 6:3 accelerate launch ignores fsdp_reshard_after_forward under FSDP1"}, check: strategy(ShardGradOp, true)},
		{name: "v1 boolean reshard is ignored", data: acc(tbw, "fsdp_reshard_after_forward: false"),
			diags: []string{"warning 5:31 a boolean is FSDP2's form"}, check: strategy(FullShard, false)},
		{name: "v2 false keeps", data: acc(tbw, "fsdp_version: 2", "fsdp_reshard_after_forward: false"), check: strategy(ShardGradOp, true)},
		{name: "v2 strategy name is an error", data: acc(tbw, "fsdp_version: 2", "fsdp_reshard_after_forward: FULL_SHARD"),
			diags: []string{"error 6:31 FSDP2 takes a boolean: FULL_SHARD is true"}},
		{name: "v2 local state dict", data: acc(tbw, "fsdp_version: 2", "fsdp_state_dict_type: LOCAL_STATE_DICT"),
			diags: []string{"error 6:25 FSDP2 does not support LOCAL_STATE_DICT"}},
		{name: "version 3", data: acc("fsdp_version: 3"), diags: []string{"error 4:17 fsdp_version is 3 (int)"}},
		{name: "v2 backward prefetch ignored", data: acc(tbw, "fsdp_version: 2", "fsdp_backward_prefetch: BACKWARD_PRE"),
			diags: []string{"warning 6:3 FSDP2 has no backward prefetch policy"}},

		// Keys.
		{name: "misspelt fsdp key", data: acc(tbw, "fsdp_sharding_stratgy: FULL_SHARD"),
			diags: []string{`warning 5:3 did you mean "fsdp_sharding_strategy"?`}},
		{name: "misspelt top-level key", data: "distributed_type: FSDP\nnum_process: 4\nfsdp_config:\n  " + tbw + "\n",
			diags: []string{`error 2:1 did you mean "num_processes"?`}},
		{name: "duplicate key", data: acc(tbw, "fsdp_offload_params: false", "fsdp_offload_params: true"),
			diags: []string{`error 6:3 duplicate key "fsdp_offload_params" (first at line 5)`}},
		{name: "old and new spelling", data: acc(tbw, "offload_params: true", "fsdp_offload_params: false"),
			diags: []string{"warning 5:3 old spelling", "warning 6:3 the later one wins"}},
		{name: "old prefetch key differs", data: acc(tbw, "fsdp_backward_prefetch: BACKWARD_POST", "fsdp_backward_prefetch_policy: BACKWARD_PRE"),
			diags: []string{"warning 6:3 differs from fsdp_backward_prefetch"},
			check: func(t *testing.T, p Plan) {
				if p.BackwardPrefetch != BackwardPost {
					t.Errorf("prefetch %s", p.BackwardPrefetch)
				}
			}},
		{name: "bad boolean", data: acc(tbw, "fsdp_offload_params: maybe"), diags: []string{"error 5:24 invalid truth value"}},

		// Loading.
		{name: "cpu ram without sync", data: acc(tbw, "fsdp_cpu_ram_efficient_loading: true", "fsdp_sync_module_states: false"),
			diags: []string{"error 6:28 accelerate launch refuses fsdp_cpu_ram_efficient_loading (true)"}},
		{name: "launch default cpu ram without sync", data: acc(tbw, "fsdp_sync_module_states: false"),
			diags: []string{"error 5:28 (the launch default true)"}},

		// Wrap classes.
		{name: "class list in YAML", data: acc(tbw, "fsdp_transformer_layer_cls_to_wrap: [LlamaDecoderLayer]"),
			diags: []string{"error 5:39 a YAML list"}},
		{name: "space after comma", data: acc(tbw, "fsdp_transformer_layer_cls_to_wrap: 'LlamaDecoderLayer, LlamaMLP'"),
			diags: []string{`error 5:39 class name " LlamaMLP" has spaces`}},
		{name: "not a block", data: acc(tbw, "fsdp_transformer_layer_cls_to_wrap: LlamaAttention"),
			diags: []string{`warning 5:39 "LlamaAttention" does not look like a transformer block class`}},
		{name: "invalid wrap policy", data: acc("fsdp_auto_wrap_policy: SIZE"), diags: []string{`error 4:26 did you mean "SIZE_BASED_WRAP"?`}},

		// The file as a whole.
		{name: "deepspeed config", data: "distributed_type: DEEPSPEED\n", diags: []string{"error 1:19 accelerate DeepSpeed config"}},
		{name: "no distributed_type", data: "fsdp_config:\n  " + tbw + "\n", diags: []string{"error 1:1 no distributed_type"}},
		{name: "empty", data: "", diags: []string{"error 1:1 the file is empty"}},
		{name: "two documents", data: acc(tbw) + "---\nnum_processes: 2\n", diags: []string{"error 5:1 a second YAML document"}},
		{name: "tab", data: "distributed_type: FSDP\nfsdp_config:\n\tfsdp_version: 2\n", diags: []string{"error 3:1 YAML does not allow tabs"}},
		{name: "not a mapping", data: "- FSDP\n", diags: []string{"error 1:1 the top level is a list"}},
		{name: "processes over machines", data: "distributed_type: FSDP\nnum_processes: 10\nnum_machines: 3\nfsdp_config:\n  " + tbw + "\n",
			diags: []string{"error 2:1 accelerate launch would start 3 per machine, 9 in all"}},
		{name: "nproc overrides", data: acc(tbw), opts: Options{NumProcesses: 2}, check: func(t *testing.T, p Plan) {
			if p.NumProcesses != 2 || p.ShardGroupSize != 2 {
				t.Errorf("processes %d group %d", p.NumProcesses, p.ShardGroupSize)
			}
		}},
		{name: "parallelism needs FSDP2", data: acc(tbw) + "parallelism_config:\n  parallelism_config_dp_shard_size: 4\n",
			diags: []string{"error 5:1 parallelism_config needs FSDP2"}},
		{name: "fp8 and ignored modules", data: "distributed_type: FSDP\nnum_processes: 2\nmixed_precision: fp8\nfsdp_config:\n  " + tbw + "\n  fsdp_ignored_modules: 'vision.*'\n",
			diags: []string{"unsupported 3:1 fp8", "unsupported 6:3 ignored_modules"}},
		{name: "no shard with offload", data: acc(tbw, "fsdp_sharding_strategy: NO_SHARD", "fsdp_offload_params: true"),
			diags: []string{"unsupported 6:3 no shards to offload"}},
		{name: "accelerate JSON", file: "a.json", data: `{"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_version": 2}}`,
			check: strategy(FullShard, false)},
		{name: "json.load refuses a trailing comma", file: "a.json", data: "{\"distributed_type\": \"FSDP\",\n}\n",
			diags: []string{"error 2:1 json.load rejects this file"}},
		{name: "json.load refuses comments", file: "a.json", data: "{\"distributed_type\": \"FSDP\" // fsdp\n}\n",
			diags: []string{"error 1:29 json.load rejects this file"}},
		{name: "Trainer flag with an accelerate file", data: acc(tbw), opts: Options{TrainerFSDP: "full_shard"},
			diags: []string{"error 1:1 --fsdp \"full_shard\" is HF Trainer's option"}},
	}
}

func trainerCases() []ruleCase {
	tr := func(opts string, body string) ruleCase {
		return ruleCase{file: "c.json", data: body, opts: Options{TrainerFSDP: opts, NumProcesses: 4}}
	}
	cases := []struct {
		rc    ruleCase
		name  string
		diags []string
		check func(*testing.T, Plan)
	}{
		{tr("offload", `{}`), "offload alone", []string{"error 0:0 `--fsdp offload` can't work on its own"}, nil},
		{tr("full_shard shard_grad_op", `{}`), "two strategies", []string{"error 0:0 `--fsdp full_shard` is not compatible with `--fsdp shard_grad_op`"}, nil},
		{tr("full_shrd auto_wrap", `{}`), "misspelt option", []string{`error 0:0 did you mean "full_shard"?`}, nil},
		{tr("full_shard auto_wrap", `{"min_num_params": 1000, "transformer_layer_cls_to_wrap": "GPT2Block"}`), "min_num_params and classes",
			[]string{"error 1:2 `min_num_params` and `transformer_layer_cls_to_wrap` are mutually exclusive"}, nil},
		{tr("full_shard auto_wrap", `{"min_num_params": 1e8}`), "float min_num_params", []string{"error 1:20 `min_num_params` must be an integer"}, nil},
		{tr("full_shard auto_wrap", `{"min_num_params": 1000}`), "auto_wrap with min_num_params", nil, func(t *testing.T, p Plan) {
			if p.Wrap != SizeWrap || p.WrapMinNumParams != 1000 {
				t.Errorf("wrap %s %d", p.Wrap, p.WrapMinNumParams)
			}
		}},
		{tr("full_shard", `{}`), "no auto_wrap", []string{"warning 1:1 NO_WRAP"}, nil},
		{tr("full_shard", `{"transformer_layer_cls_to_wrap": "GPT2Block"}`), "classes without auto_wrap",
			[]string{"warning 1:1 NO_WRAP", "warning 1:2 without auto_wrap in --fsdp"}, nil},
		{tr("shard_grad_op auto_wrap", `{"sync_module_states": "False", "cpu_ram_efficient_loading": "True"}`), "sync and cpu ram",
			[]string{"error 1:24 `sync_module_states` must be `\"True\"` if `cpu_ram_efficient_loading` is `\"True\"`"}, nil},
		{tr("full_shard auto_wrap", `{"activation_checkpointing": "False"}`), "string False is true",
			[]string{`warning 1:30 a non-empty string is true in Python`}, func(t *testing.T, p Plan) {
				if !p.ActivationCkpt {
					t.Error("activation checkpointing off")
				}
			}},
		{tr("full_shard auto_wrap", `{"fsdp_version": 2, "version": 1, "reshard_after_forward": true}`), "prefixed key wins",
			[]string{"warning 1:21 the same key once the Trainer strips fsdp_"}, func(t *testing.T, p Plan) {
				if p.Version != 2 || p.Strategy != FullShard {
					t.Errorf("version %d %s", p.Version, p.Strategy)
				}
			}},
		{tr("hybrid_shard auto_wrap", `{"backward_prefetch": "BACKWARD_POST"}`), "hybrid on one machine", nil, func(t *testing.T, p Plan) {
			if p.Strategy != HybridShard || p.Hybrid() || p.BackwardPrefetch != BackwardPost {
				t.Errorf("%s hybrid %v prefetch %s", p.Strategy, p.Hybrid(), p.BackwardPrefetch)
			}
		}},
		{tr("no_shard", `{"xla_fsdp_grad_ckpt": true}`), "xla key without xla", nil, func(t *testing.T, p Plan) {
			if p.Stage != 0 || p.ActivationCkpt {
				t.Errorf("stage %d ckpt %v", p.Stage, p.ActivationCkpt)
			}
		}},
		{tr("full_shard auto_wrap", `{"transformer_layer_cls_to_wrap": ["GPT2Block"], "backward_prefetch": 1}`), "non-string prefetch",
			[]string{"error 1:71 the Trainer calls .upper() on it"}, nil},
		{tr("", `{"fsdp": "shard_grad_op auto_wrap offload", "fsdp_config": {"version": 2, "reshard_after_forward": true}}`), "combined file",
			[]string{}, func(t *testing.T, p Plan) {
				if p.Strategy != FullShard || !p.Offload {
					t.Errorf("%s offload %v", p.Strategy, p.Offload)
				}
			}},
		{tr("full_shard auto_wrap", `{"activation_checkpointing": true}`), "gradient and activation checkpointing",
			[]string{"error 1:2 can't be set to True simultaneously"}, nil},
		{tr("full_shard auto_wrap", `{"sharding_strategy": "FULL_SHARD", "limit_all_gather": true}`), "accelerate keys in a Trainer file",
			[]string{"warning 1:2 the Trainer takes the strategy from --fsdp", `warning 1:37 did you mean "limit_all_gathers"?`}, nil},
	}
	var out []ruleCase
	for _, c := range cases {
		rc := c.rc
		rc.name, rc.diags, rc.check = "trainer: "+c.name, c.diags, c.check
		if c.name == "gradient and activation checkpointing" {
			rc.opts.GradientCheckpointing = true
		}
		out = append(out, rc)
	}
	return out
}

func TestRules(t *testing.T) {
	for _, c := range append(ruleCases(), trainerCases()...) {
		t.Run(c.name, func(t *testing.T) {
			file := c.file
			if file == "" {
				file = "x.yaml"
			}
			p, diags := Compile(file, []byte(c.data), c.opts)
			checkDiags(t, diags, c.diags)
			if c.check != nil && !diags.HasErrors() {
				c.check(t, p)
			}
		})
	}
}

// TestSettingsSayTheDefault checks that absent keys name the default layer
// they came from.
func TestSettingsSayTheDefault(t *testing.T) {
	p, _ := Compile("x.yaml", []byte("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"), Options{})
	want := map[string]Source{"reshard_after_forward": FromLaunchDefault, "auto_wrap_policy": FromPluginDefault,
		"state_dict_type": FromPluginDefault, "cpu_ram_efficient_loading": FromLaunchDefault, "fsdp_version": FromFile,
		"mixed_precision": FromLaunchDefault, "zero.stage": FromDerived}
	for _, s := range p.Settings() {
		if w, ok := want[s.Name]; ok {
			if s.Source != w {
				t.Errorf("%s: source %s, want %s", s.Name, s.Source, w)
			}
			if s.Source != FromFile && s.Note == "" {
				t.Errorf("%s: no note on the default", s.Name)
			}
			delete(want, s.Name)
		}
	}
	for n := range want {
		t.Errorf("no setting %s", n)
	}
}

func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{1e8: "100000000.0", 1e16: "1e+16", 1.5e-5: "1.5e-05", 0.0001: "0.0001", 2: "2.0", -0.5: "-0.5"} {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%g) = %s, want %s", f, got, want)
		}
	}
}

func TestTrainingArgsFile(t *testing.T) {
	data := `{"fsdp": "full_shard auto_wrap", "bf16": true, "learning_rate": 2e-5, "gradient_checkpointing": true,
 "fsdp_config": {"activation_checkpointing": true}}`
	_, diags := Compile("args.json", []byte(data), Options{NumProcesses: 2})
	checkDiags(t, diags, []string{"error 2:18 can't be set to True simultaneously"})
	p, diags := Compile("args.json", []byte(strings.Replace(data, `"gradient_checkpointing": true`, `"gradient_checkpointing": false`, 1)), Options{NumProcesses: 2})
	checkDiags(t, diags, nil)
	if p.MixedPrecision != "bf16" || !p.ActivationCkpt {
		t.Errorf("precision %s, activation checkpointing %v", p.MixedPrecision, p.ActivationCkpt)
	}
}

// TestExplain checks that the explanation states the SHARD_GRAD_OP / stage
// 2 difference, the provenance of defaults and the equivalent ds_config.
func TestExplain(t *testing.T) {
	p, diags := Load("testdata/corpus/BenasdTW__LLMTrain__fsdp_grad_op.yaml", Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var b strings.Builder
	ExplainText(&b, p)
	for _, want := range []string{
		"SHARD_GRAD_OP → ZeRO stage 3 with the parameters kept from forward to backward",
		"DeepSpeed stage 2 is not the same",
		"engine: ZeRO stage 3, KeepAfterForward true, WrapMinNumParams 0",
		"fsdp_version                   1                        accelerate launch default",
		`"stage": 3`,
		"this ds_config alone would run FULL_SHARD",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, b.String())
		}
	}
}
