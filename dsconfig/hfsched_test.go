package dsconfig

import "testing"

// TestHFModeTrainerSchedule: in HF mode a config without a scheduler block
// runs the Trainer's linear schedule (--warmup_steps, --max_steps), with an
// optimizer block or without; a scheduler block is DeepSpeed's; without
// --max_steps the schedule's end is unknown and dszero says so.
func TestHFModeTrainerSchedule(t *testing.T) {
	hf := DefaultHFArgs()
	hf.WarmupSteps, hf.MaxSteps = 5, 50
	for _, src := range []string{
		`{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}`,
		`{"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}`,
	} {
		p, diags := compileString(t, src, Options{WorldSize: 2, HF: &hf})
		if diags.HasErrors() {
			t.Fatal(diagText(diags))
		}
		if s := p.Scheduler; s.Type != SchedulerHFLinear || s.WarmupNumSteps != 5 || s.TotalNumSteps != 50 {
			t.Errorf("%s: scheduler %+v", src, s)
		}
	}
	p, _ := compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW"}, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}}`, Options{WorldSize: 2, HF: &hf})
	if p.Scheduler.Type != "WarmupLR" {
		t.Errorf("a scheduler block: %+v", p.Scheduler)
	}
	// DeepSpeed mode has no Trainer: no schedule.
	p, _ = compileString(t, `{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW"}}`, Options{WorldSize: 2})
	if p.Scheduler.Type != "" {
		t.Errorf("DeepSpeed mode: %+v", p.Scheduler)
	}
	hf.MaxSteps = -1
	p, diags := compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW"}}`, Options{WorldSize: 2, HF: &hf})
	if p.Scheduler.Type != "" || !hasDiag(diags, wantDiag{Warning, "scheduler", []string{"--max_steps", "keeps the lr constant"}}) {
		t.Errorf("no --max_steps: %+v\n%s", p.Scheduler, diagText(diags))
	}
}

// TestHFModeWeightDecayGroups: the Trainer's AdamW does not decay biases and
// LayerNorm weights; dszero's single group cannot, so --weight_decay with no
// optimizer block is refused by name, and 0 (the default) runs.
func TestHFModeWeightDecayGroups(t *testing.T) {
	hf := DefaultHFArgs()
	hf.WeightDecay = 0.1
	src := `{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}`
	_, diags := compileString(t, src, Options{WorldSize: 2, HF: &hf})
	if !hasDiag(diags, wantDiag{Unsupported, "optimizer.params.weight_decay", []string{"--weight_decay 0.1", "biases and LayerNorm", "--weight_decay 0"}}) {
		t.Errorf("%s", diagText(diags))
	}
	hf.WeightDecay = 0
	p, diags := compileString(t, src, Options{WorldSize: 2, HF: &hf})
	if diags.Count(Unsupported) != 0 || p.Optimizer.Impl != "DeepSpeedCPUAdam" {
		t.Errorf("%+v\n%s", p.Optimizer, diagText(diags))
	}
	// With an optimizer block DeepSpeed builds the optimizer over one
	// group (DummyOptim's parameters): every parameter decays, as dszero's.
	hf.WeightDecay = 0.1
	_, diags = compileString(t, `{"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": {"weight_decay": "auto"}}}`, Options{WorldSize: 2, HF: &hf})
	if diags.Count(Unsupported) != 0 || diags.HasErrors() {
		t.Errorf("%s", diagText(diags))
	}
}
