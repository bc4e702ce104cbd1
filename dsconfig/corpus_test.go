package dsconfig

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// verdict is one row of testdata/ds_configs/DEEPSPEED_VERDICTS.tsv: what
// DeepSpeed 0.19.5's own config code did with the file at world size 8.
type verdict struct {
	file, verdict, phase, firstError, jsonPath, notes string
}

func readVerdicts(t *testing.T) []verdict {
	t.Helper()
	f, err := os.Open("testdata/ds_configs/DEEPSPEED_VERDICTS.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []verdict
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			continue
		}
		c := strings.Split(sc.Text(), "\t")
		if len(c) < 6 {
			t.Fatalf("bad verdict row %q", sc.Text())
		}
		out = append(out, verdict{c[0], c[1], c[2], c[3], c[4], c[5]})
	}
	return out
}

// uncertainDecisions are dszero's verdicts for the files DeepSpeed's
// outcome depends on the caller for (VERDICTS_README.md, U1 and U2).
var uncertainDecisions = map[string]string{
	// U1: stage 2 without an optimizer block is accepted by DeepSpeed only
	// when the caller passes a DeepSpeedCPUAdam; with no client optimizer
	// DeepSpeed raises "zero stage 2 requires an optimizer", and HF's
	// Trainer (torch AdamW + offload) hits ZeRORuntimeException. A config
	// user has no way to pass DeepSpeedCPUAdam, so dszero rejects it and
	// says to add an optimizer block.
	"CarperAI__trlx__examples__ds_config_trlx_t5.json":                                           "REJECT",
	"deepspeedai__DeepSpeed__tests__model__Megatron_GPT2__ds_config_func_bs8_zero2_offload.json": "REJECT",
	// U2: Apex AMP needs apex.amp, which current NVIDIA Apex no longer
	// ships, and dszero has no AMP: rejected with the fix (fp16/bf16 block).
	"OpenGVLab__InternVL__segmentation__zero_configs__adam_zero1_amp.json": "REJECT",
}

var (
	reStage  = regexp.MustCompile(`(?:^|; )stage=(\d)`)
	rePrec   = regexp.MustCompile(`precision=(fp16|bf16|fp32)`)
	reOffOpt = regexp.MustCompile(`offload_optimizer=(\w+)`)
	reOffPar = regexp.MustCompile(`offload_param=(\w+)`)
	reBatch  = regexp.MustCompile(`batch=\(train_batch_size=(\d+), micro=(\d+), GAS=(\d+)\)`)
)

// TestCorpusAgreesWithDeepSpeed checks `config check --world-size 8` on
// every real config against DeepSpeed's recorded verdict and, for accepted
// files, the resolved stage, precision, offload devices and batch triplet.
func TestCorpusAgreesWithDeepSpeed(t *testing.T) {
	vs := readVerdicts(t)
	if len(vs) != 74 {
		t.Fatalf("want 74 verdicts, got %d", len(vs))
	}
	for _, v := range vs {
		t.Run(v.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata/ds_configs", v.file))
			if err != nil {
				t.Fatal(err)
			}
			plan, diags := Compile(v.file, data, Options{WorldSize: 8})
			want := v.verdict
			if want == "UNCERTAIN" {
				want = uncertainDecisions[v.file]
				if want == "" {
					t.Fatalf("no decision for UNCERTAIN file")
				}
			}
			got := "ACCEPT"
			if diags.HasErrors() {
				got = "REJECT"
			}
			if got != want {
				t.Fatalf("dszero %s, DeepSpeed %s (%s: %s)\n%s", got, want, v.phase, v.firstError, diagText(diags))
			}
			if got == "REJECT" {
				// The DeepSpeed error's JSON path must be among ours.
				syntax := len(diags.Filter(Error)) == 1 && diags.Filter(Error)[0].Path == ""
				if v.jsonPath != "" && v.jsonPath != "-" && !syntax && !mentionsPath(diags, v.jsonPath) {
					t.Errorf("DeepSpeed blames %s; dszero's errors:\n%s", v.jsonPath, diagText(diags.Filter(Error)))
				}
				return
			}
			m := reStage.FindStringSubmatch(v.notes)
			if m == nil {
				t.Fatalf("notes without stage: %s", v.notes)
			}
			if s, _ := strconv.Atoi(m[1]); s != plan.Zero.Stage {
				t.Errorf("stage %d, DeepSpeed %d", plan.Zero.Stage, s)
			}
			if m := rePrec.FindStringSubmatch(v.notes); m == nil || m[1] != plan.Precision.DType.String() {
				t.Errorf("precision %s, DeepSpeed notes %q", plan.Precision.DType, v.notes)
			}
			if m := reOffOpt.FindStringSubmatch(v.notes); m != nil && m[1] != string(plan.Zero.OffloadOptimizer.Device) {
				t.Errorf("offload_optimizer %s, DeepSpeed %s", plan.Zero.OffloadOptimizer.Device, m[1])
			}
			if m := reOffPar.FindStringSubmatch(v.notes); m != nil && m[1] != string(plan.Zero.OffloadParam.Device) {
				t.Errorf("offload_param %s, DeepSpeed %s", plan.Zero.OffloadParam.Device, m[1])
			}
			m = reBatch.FindStringSubmatch(v.notes)
			if m == nil {
				t.Fatalf("notes without batch: %s", v.notes)
			}
			tb, _ := strconv.ParseInt(m[1], 10, 64)
			mb, _ := strconv.ParseInt(m[2], 10, 64)
			ga, _ := strconv.ParseInt(m[3], 10, 64)
			if want := (Batch{tb, mb, ga}); plan.Batch != want {
				t.Errorf("batch %+v, DeepSpeed %+v", plan.Batch, want)
			}
		})
	}
}

// mentionsPath reports whether an error names one of the comma-separated
// paths (or a path inside one).
func mentionsPath(diags Diagnostics, paths string) bool {
	for _, p := range strings.Split(paths, ",") {
		p = strings.TrimSpace(strings.Split(p, " ")[0])
		for _, d := range diags.Filter(Error) {
			if d.Path == p || strings.HasPrefix(d.Path, p+".") || strings.HasPrefix(p, d.Path+".") {
				return true
			}
		}
	}
	return false
}

func diagText(ds Diagnostics) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString("  " + d.String() + "\n")
	}
	return b.String()
}

// TestCorpusNeverPanicsAtAnyWorldSize runs every file at several world
// sizes and in HF mode; every outcome is a plan or diagnostics.
func TestCorpusNeverPanicsAtAnyWorldSize(t *testing.T) {
	files, _ := filepath.Glob("testdata/ds_configs/*.[jc][so][no]*")
	if len(files) < 74 {
		t.Fatalf("corpus has %d files", len(files))
	}
	hf := DefaultHFArgs()
	hf.HiddenSize = 768
	hf.MaxSteps = 100
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []int{1, 2, 3, 8, 64} {
			Compile(f, data, Options{WorldSize: w})
			Compile(f, data, Options{WorldSize: w, HF: &hf})
		}
	}
}
