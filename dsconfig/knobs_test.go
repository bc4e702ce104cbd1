package dsconfig

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestKnobsPlan(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		check func(p Plan) any
		want  any
	}{
		{"flops profiler defaults", `"flops_profiler": {"enabled": true}`,
			func(p Plan) any { return p.FlopsProfiler },
			FlopsProfiler{Enabled: true, ProfileStep: 1, ModuleDepth: -1, TopModules: 1, Detailed: true}},
		{"flops profiler keys", `"flops_profiler": {"enabled": true, "profile_step": 3, "module_depth": 2, "top_modules": 4, "detailed": false, "output_file": "p.txt", "recompute_fwd_factor": 0.5}`,
			func(p Plan) any { return p.FlopsProfiler },
			FlopsProfiler{Enabled: true, ProfileStep: 3, ModuleDepth: 2, TopModules: 4, OutputFile: "p.txt", RecomputeFwdFactor: 0.5}},
		{"flops profiler turns on wall_clock_breakdown", `"flops_profiler": {"enabled": true}`,
			func(p Plan) any { return p.WallClockBreakdown }, true},
		{"comms logger", `"comms_logger": {"enabled": true, "verbose": true, "prof_all": false, "prof_ops": ["all_reduce", "all_gather"]}`,
			func(p Plan) any { return p.CommsLogger },
			CommsLogger{Enabled: true, Verbose: true, ProfOps: []string{"all_reduce", "all_gather"}}},
		{"tensorboard and csv directories", `"tensorboard": {"enabled": true, "output_path": "tb", "job_name": "j1"}, "csv_monitor": {"enabled": true, "output_path": "csv", "job_name": "j2"}`,
			func(p Plan) any { return p.Monitors },
			Monitors{TensorBoard: true, TensorBoardDir: "tb", JobName: "j1", CSV: true, CSVDir: "csv", CSVJobName: "j2"}},
		{"pld", `"progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.001}`,
			func(p Plan) any { return p.ProgressiveLayerDrop }, ProgressiveLayerDrop{Enabled: true, Theta: 0.5, Gamma: 0.001}},
		{"pld off ignores missing keys", `"progressive_layer_drop": {"enabled": false}`,
			func(p Plan) any { return p.ProgressiveLayerDrop }, ProgressiveLayerDrop{Theta: 1, Gamma: 0.001}},
		{"legacy curriculum", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64,
			"schedule_type": "fixed_root", "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8, "root_degree": 2}}`,
			func(p Plan) any { return p.Curriculum },
			Curriculum{Enabled: true, Source: "curriculum_learning", MinDifficulty: 8, MaxDifficulty: 64, ScheduleType: "fixed_root",
				TotalCurriculumStep: 10, DifficultyStep: 8, RootDegree: 2}},
		{"data efficiency seqlen curriculum", `"data_efficiency": {"enabled": true, "data_sampling": {"enabled": true, "curriculum_learning": {"enabled": true,
			"curriculum_metrics": {"seqlen_truncate": {"clustering_type": "single_cluster", "difficulty_type": "value", "min_difficulty": 4, "max_difficulty": 32,
			"schedule_type": "fixed_discrete", "schedule_config": {"difficulty": [4, 16, 32], "max_step": [2, 5]}}}}}}`,
			func(p Plan) any { return p.Curriculum },
			Curriculum{Enabled: true, Source: "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.seqlen_truncate",
				MinDifficulty: 4, MaxDifficulty: 32, ScheduleType: "fixed_discrete", Difficulty: []int64{4, 16, 32}, MaxStep: []int64{2, 5}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, diags := compileString(t, "{"+batchOK+`"optimizer": {"type": "AdamW"}, `+c.src+"}", Options{WorldSize: 1})
			if diags.HasErrors() || len(p.Unsupported()) > 0 {
				t.Fatalf("diagnostics:\n%s", diagText(diags))
			}
			if d := cmp.Diff(c.want, c.check(p)); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
}

func TestKnobsRefused(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want wantDiag
	}{
		{"pld without theta", `"progressive_layer_drop": {"enabled": true, "gamma": 0.001}`, wantDiag{Error, "progressive_layer_drop.theta", []string{"KeyError"}}},
		{"pld theta above 1", `"progressive_layer_drop": {"enabled": true, "theta": 1.5, "gamma": 0.001}`, wantDiag{Error, "progressive_layer_drop.theta", []string{"(0, 1]"}}},
		{"pld negative gamma", `"progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": -1}`, wantDiag{Error, "progressive_layer_drop.gamma", []string{"≥ 0"}}},
		{"profiler negative step", `"flops_profiler": {"enabled": true, "profile_step": -1}`, wantDiag{Error, "flops_profiler.profile_step", []string{"≥ 0"}}},
		{"profiler depth", `"flops_profiler": {"enabled": true, "module_depth": -2}`, wantDiag{Error, "flops_profiler.module_depth", []string{"≥ -1"}}},
		{"comms logger typo", `"comms_logger": {"enabled": true, "verbos": true}`, wantDiag{Error, "comms_logger.verbos", []string{"verbose"}}},
		{"comms logger prof_ops not a list", `"comms_logger": {"enabled": true, "prof_ops": "all_reduce"}`, wantDiag{Error, "comms_logger.prof_ops", []string{"list"}}},
		{"wandb", `"wandb": {"enabled": true}`, wantDiag{Unsupported, "wandb.enabled", []string{"service"}}},
		{"comet", `"comet": {"enabled": true}`, wantDiag{Unsupported, "comet.enabled", []string{"service"}}},
		{"curriculum without type", `"curriculum_learning": {"enabled": true, "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_linear",
			"schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}`, wantDiag{Error, "curriculum_learning.curriculum_type", []string{"KeyError"}}},
		{"curriculum without max", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "schedule_type": "fixed_linear",
			"schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}`, wantDiag{Error, "curriculum_learning.max_difficulty", []string{"asserts"}}},
		{"fixed_root without degree", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_root",
			"schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}`, wantDiag{Error, "curriculum_learning.schedule_config.root_degree", []string{"root_degree"}}},
		{"fixed_discrete lengths", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_discrete",
			"schedule_config": {"difficulty": [8, 64], "max_step": [1, 2]}}`, wantDiag{Error, "curriculum_learning.schedule_config", []string{"len(difficulty)"}}},
		{"unknown schedule", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_cubic"}`,
			wantDiag{Error, "curriculum_learning.schedule_type", []string{"Unsupported curriculum schedule type"}}},
		{"custom schedule", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "custom"}`,
			wantDiag{Unsupported, "curriculum_learning.schedule_type", []string{"Python function"}}},
		{"min above max", `"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 80, "max_difficulty": 64, "schedule_type": "fixed_linear",
			"schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}`, wantDiag{Error, "curriculum_learning.min_difficulty", []string{"must not exceed"}}},
		{"vocab curriculum", `"curriculum_learning": {"enabled": true, "curriculum_type": "vocab", "min_difficulty": 8, "max_difficulty": 64, "schedule_type": "fixed_linear",
			"schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}`, wantDiag{Unsupported, "curriculum_learning.curriculum_type", []string{"seqlen"}}},
		{"data efficiency without metrics", `"data_efficiency": {"enabled": true, "data_sampling": {"enabled": true, "curriculum_learning": {"enabled": true}}}`,
			wantDiag{Error, "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics", []string{"must be specified"}}},
		{"data efficiency index-file metric", `"data_efficiency": {"enabled": true, "data_sampling": {"enabled": true, "curriculum_learning": {"enabled": true,
			"curriculum_metrics": {"vocabularyrarity": {"clustering_type": "schedule_based", "index_to_sample_path": "x", "min_difficulty": 1, "max_difficulty": 100, "schedule_type": "fixed_linear"}}}}}`,
			wantDiag{Unsupported, "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.vocabularyrarity", []string{"index files"}}},
		{"random-LTD", `"data_efficiency": {"enabled": true, "data_routing": {"enabled": true, "random_ltd": {"enabled": true}}}`,
			wantDiag{Unsupported, "data_efficiency.data_routing.random_ltd", []string{"RandomLayerTokenDrop"}}},
		{"autotuning is ignored with a warning", `"autotuning": {"enabled": true}`, wantDiag{Warning, "autotuning", []string{"ignored"}}},
		{"sparse attention says why", `"sparse_attention": {"mode": "fixed"}`, wantDiag{Unsupported, "sparse_attention", []string{"block-sparse", "dense attention"}}},
		{"MoQ says why", `"quantize_training": {"enabled": true}`, wantDiag{Unsupported, "quantize_training", []string{"quantizes the weights"}}},
		{"eigenvalue says why", `"eigenvalue": {"enabled": true}`, wantDiag{Unsupported, "eigenvalue", []string{"double"}}},
		{"GDS says why", `"aio": {"use_gds": true}`, wantDiag{Unsupported, "aio.use_gds", []string{"cuFile"}}},
		{"deepcompile runs without the compiler", `"compile": {"deepcompile": true}`, wantDiag{Warning, "compile.deepcompile", []string{"same ZeRO schedule"}}},
		{"zenflow says why", `"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.05}}`,
			wantDiag{Unsupported, "zero_optimization.zenflow", []string{"update_interval", "numerics"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, diags := compileString(t, "{"+batchOK+`"optimizer": {"type": "AdamW"}, `+c.src+"}", Options{WorldSize: 1})
			if !hasDiag(diags, c.want) {
				t.Errorf("want %v %s %q; got:\n%s", c.want.sev, c.want.path, c.want.frags, diagText(diags))
			}
		})
	}
}

// golden is testdata/curriculum/golden.json: DeepSpeed's own
// CurriculumScheduler and ProgressiveLayerDrop evaluated by gen_golden.py.
type golden struct {
	DeepSpeed  string `json:"deepspeed"`
	Curriculum map[string]struct {
		Config json.RawMessage `json:"config"`
		SeqLen [][2]int64      `json:"seqlen"`
	} `json:"curriculum"`
	PLD map[string]struct {
		Theta   float64      `json:"theta"`
		Gamma   float64      `json:"gamma"`
		ThetaAt [][2]float64 `json:"theta_at"`
	} `json:"pld"`
}

func readGolden(t *testing.T) golden {
	t.Helper()
	data, err := os.ReadFile("testdata/curriculum/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestCurriculumMatchesDeepSpeed replays, call by call, the sequence of
// update_difficulty(global_steps + 1) calls that DeepSpeed's scheduler
// answered in golden.json, through the plan compiled from the same block.
func TestCurriculumMatchesDeepSpeed(t *testing.T) {
	g := readGolden(t)
	if len(g.Curriculum) < 5 {
		t.Fatalf("golden has %d schedules", len(g.Curriculum))
	}
	for name, c := range g.Curriculum {
		t.Run(name, func(t *testing.T) {
			src := fmt.Sprintf(`{%s "optimizer": {"type": "AdamW"}, "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", %s}`,
				batchOK, string(c.Config[1:len(c.Config)-1])) + "}"
			p, diags := compileString(t, src, Options{WorldSize: 1})
			if diags.HasErrors() || !p.Curriculum.Enabled {
				t.Fatalf("diagnostics:\n%s", diagText(diags))
			}
			cur := p.Curriculum.MinDifficulty
			var got, want [][2]int64
			for _, row := range c.SeqLen {
				cur = p.Curriculum.SeqLen(cur, row[0])
				got = append(got, [2]int64{row[0], cur})
				want = append(want, row)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("[finished steps, seqlen] (-DeepSpeed +dszero):\n%s", d)
			}
		})
	}
}

// TestPLDThetaMatchesDeepSpeed: theta(g) after update_state(g) in
// DeepSpeed is what ThetaFor gives the step after g+1 finished steps.
func TestPLDThetaMatchesDeepSpeed(t *testing.T) {
	g := readGolden(t)
	for name, c := range g.PLD {
		p := ProgressiveLayerDrop{Enabled: true, Theta: c.Theta, Gamma: c.Gamma}
		var got, want []float64
		for _, row := range c.ThetaAt {
			want = append(want, row[1])
			got = append(got, p.ThetaFor(int64(row[0])+1))
		}
		if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-15)); d != "" {
			t.Errorf("%s: theta (-DeepSpeed +dszero):\n%s", name, d)
		}
		if p.ThetaFor(0) != 1 {
			t.Errorf("%s: the first step sees theta %g, DeepSpeed's initial 1.0", name, p.ThetaFor(0))
		}
	}
}

// engineTrace is testdata/curriculum/engine.json: what DeepSpeed
// v0.14.5's engine passed to the model's forward, forward by forward
// (gen_engine.py).
type engineTrace struct {
	DeepSpeed string `json:"deepspeed"`
	Runs      map[string]struct {
		DSConfig json.RawMessage `json:"ds_config"`
		Steps    int             `json:"steps"`
		Forwards []struct {
			PLDTheta       *float64 `json:"pld_theta"`
			CurriculumSeqL *int64   `json:"curriculum_seqlen"`
		} `json:"forwards"`
	} `json:"runs"`
}

// TestKnobsFollowDeepSpeedsEngine: compiled from the same ds_config, the
// plan's theta and sequence length for each forward (micro-step m of
// optimizer step m/GAS) are what DeepSpeed's engine handed its model.
func TestKnobsFollowDeepSpeedsEngine(t *testing.T) {
	data, err := os.ReadFile("testdata/curriculum/engine.json")
	if err != nil {
		t.Fatal(err)
	}
	var tr engineTrace
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Runs) != 3 {
		t.Fatalf("%d runs", len(tr.Runs))
	}
	for name, run := range tr.Runs {
		t.Run(name, func(t *testing.T) {
			p, diags := Compile(name, run.DSConfig, Options{WorldSize: 1})
			if diags.HasErrors() || len(p.Unsupported()) > 0 {
				t.Fatalf("diagnostics:\n%s", diagText(diags))
			}
			gas := int(p.Batch.GradientAccumulationSteps)
			if len(run.Forwards) != run.Steps*gas {
				t.Fatalf("%d forwards for %d steps of %d", len(run.Forwards), run.Steps, gas)
			}
			cur := p.Curriculum.MinDifficulty
			for i, f := range run.Forwards {
				finished := int64(i / gas)
				if f.PLDTheta != nil {
					if got := p.ProgressiveLayerDrop.ThetaFor(finished); math.Abs(got-*f.PLDTheta) > 1e-15 {
						t.Errorf("forward %d: theta %v, DeepSpeed %v", i, got, *f.PLDTheta)
					}
				}
				if f.CurriculumSeqL != nil {
					if cur = p.Curriculum.SeqLen(cur, finished); cur != *f.CurriculumSeqL {
						t.Errorf("forward %d: seqlen %d, DeepSpeed %d", i, cur, *f.CurriculumSeqL)
					}
				}
			}
		})
	}
}
