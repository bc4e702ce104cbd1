package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dszero/dszero/blas"
	"github.com/dszero/dszero/data"
	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/dsconfig"
	"github.com/dszero/dszero/fsdpconfig"
	"github.com/dszero/dszero/mem"
	"github.com/dszero/dszero/train"
)

// trainJob is one dszero train run, filled in step by step: launch, plan,
// ranks, model, data; train and report read it.
type trainJob struct {
	f              *trainFlags
	stdout, stderr io.Writer
	diagw          io.Writer // the config's diagnostics (discarded on ranks other than 0)

	// launch
	l      *launch
	nproc  int                    // ranks in the job: the plan's world size
	fp     fsdpconfig.Plan        // an FSDP setup's plan, when one is given
	fdiags fsdpconfig.Diagnostics // and its diagnostics
	// plan
	name string // what messages call the config
	plan dsconfig.Plan
	// ranks
	engine blas.Engine
	ranks  []int // the ranks this process runs
	devs   []train.Device
	accts  []*mem.Accountant
	// model
	m trainModel // gptJob or llamaJob (train_model.go)
	// data
	corpus    *data.Corpus
	sft       *data.SFTData // --data records, instead of a corpus
	T, B, gas int           // tokens per sample, micro-batch, accumulation steps
	steps     int           // the optimizer steps to train to
	loader    *data.Loader
	closers   []func()
}

// close releases what the steps opened, last first.
func (j *trainJob) close() {
	for i := len(j.closers) - 1; i >= 0; i-- {
		j.closers[i]()
	}
}

// compilePlan reads the ds_config (or the FSDP setup's equivalent) for
// the job's world size and prints its diagnostics.
func (j *trainJob) compilePlan() error {
	f := j.f
	var diags dsconfig.Diagnostics
	var name string
	if src := f.fsdp(); src.given() {
		if !printFSDPDiags(j.diagw, j.fdiags, false) {
			return fmt.Errorf("%s: the FSDP setup has errors or asks for what dszero does not run (see above)", src.name())
		}
		name = src.name()
		j.plan, diags = dsPlan(src, j.fp, j.nproc, f.hf.forFSDP())
	} else {
		var err error
		var note string
		f.hf.fillHiddenSize(f.modelArg) // hfmodel.go
		if j.plan, diags, note, err = compileDSConfig(f.cfgPath, j.nproc, f.hf); err != nil {
			return err
		}
		name = j.plan.File
		if note != "" {
			fmt.Fprintf(j.diagw, "dszero train: note: %s\n", note)
		}
	}
	j.name = name
	for _, d := range diags {
		if d.Severity == dsconfig.Error || d.Severity == dsconfig.Warning || d.Severity == dsconfig.Unsupported {
			fmt.Fprintln(j.diagw, d.String())
		}
	}
	if diags.HasErrors() {
		return fmt.Errorf("%s: the config has errors (see above)", name)
	}
	return nil
}

// newRanks builds each rank's device: its own accountant (and budget);
// the BLAS engine is shared, it is safe for concurrent use.
func (j *trainJob) newRanks() error {
	f := j.f
	budget := mem.Unlimited
	if f.devMem != "" {
		var err error
		if budget, err = parseBudget("--device-memory", f.devMem); err != nil {
			return err
		}
	}
	backend, err := blas.ParseBackend(f.blasName)
	if err != nil {
		return fmt.Errorf("--blas: %w", err)
	}
	if j.engine, err = blas.New(blas.Options{Backend: backend, Threads: f.threads}); err != nil {
		var lerr *blas.LibraryError
		if f.threads > 0 && !errors.As(err, &lerr) {
			return fmt.Errorf("--threads %d: %w: leave --threads out", f.threads, err) // the library has no thread setting
		}
		return err
	}
	j.ranks = j.l.ranks()
	j.devs, j.accts = make([]train.Device, len(j.ranks)), make([]*mem.Accountant, len(j.ranks))
	for i, r := range j.ranks {
		j.accts[i] = mem.NewAccountant(r)
		j.accts[i].SetCapacity(mem.Device, budget)
		dev := device.NewCPU(j.accts[i], j.engine)
		j.devs[i] = train.Device{Acct: dev.Accountant(), Gemm: dev.BLAS()}
	}
	return nil
}

// loadData is --data, --seq and the step count: the corpus and the loader
// that hands each rank its micro-batches.
func (j *trainJob) loadData() error {
	f := j.f
	vocab, context := j.m.Shape()
	j.T = f.seq
	if j.T == 0 {
		j.T = min(context, 128)
	}
	if j.T > context {
		return fmt.Errorf("--seq %d is longer than the model's context of %d tokens", j.T, context)
	}
	hf := f.hf.args()
	switch {
	case f.steps > 0:
		j.steps = f.steps
	case hf != nil && hf.MaxSteps > 0:
		j.steps = int(hf.MaxSteps)
	case j.plan.Scheduler.TotalNumSteps > 0:
		j.steps = int(j.plan.Scheduler.TotalNumSteps)
	default:
		j.steps = 100
	}
	j.B, j.gas = int(j.plan.Batch.TrainMicroBatchSizePerGPU), int(j.plan.Batch.GradientAccumulationSteps)
	if f.dataPath != "" && f.dataPath != "random" && data.IsRecordData(f.dataPath) {
		return j.loadRecords()
	}
	j.corpus = data.TinyShakespeare()
	switch f.dataPath {
	case "":
	case "random":
		j.corpus = data.Random(vocab, 1<<20, f.seed)
	default:
		var err error
		if j.corpus, err = data.Load(f.dataPath); err != nil {
			return err
		}
	}
	if j.corpus.Vocab > vocab {
		return fmt.Errorf("--data %s has token ids up to %d but the model's vocabulary is %d; use a model with a larger vocabulary", j.corpus.Name, j.corpus.Vocab-1, vocab)
	}
	var err error
	j.loader, err = data.NewLoader(j.corpus, data.Layout{B: j.B, T: j.T, GAS: j.gas, World: int(j.plan.DataParallelSize())}) // Ulysses: a shard per sequence-parallel group
	return err
}

// checkOutputs makes sure, before anything trains, that the directories
// the run writes at its end (--save, --save-model) can be written: a
// read-only or mistyped path fails now, not after the last step.
func (j *trainJob) checkOutputs() error {
	f := j.f
	if f.saveDir != "" {
		if err := writableDir(f.saveDir); err != nil {
			return fmt.Errorf("%s %s: %w", f.saveFlag(), f.saveDir, err)
		}
	}
	if f.saveModel != "" && j.l.lead() {
		if err := writableDir(f.saveModel); err != nil {
			return fmt.Errorf("--save-model %s: %w", f.saveModel, err)
		}
	}
	if f.loadDir != "" {
		if st, err := os.Stat(f.loadDir); err != nil || !st.IsDir() {
			return fmt.Errorf("--load %s: no such checkpoint directory (give the directory --save wrote, the one with the latest file)", f.loadDir)
		}
	}
	return nil
}

// writableDir checks that dir is a directory this process can create
// files in, or can be created: it writes and removes a probe file in dir,
// or in its nearest existing parent. Nothing is left behind.
func writableDir(dir string) error {
	at := filepath.Clean(dir)
	for {
		st, err := os.Stat(at)
		if err == nil {
			if !st.IsDir() {
				if at == filepath.Clean(dir) {
					return fmt.Errorf("it exists and is not a directory")
				}
				return fmt.Errorf("%s is a file, so no directory can be made under it", at)
			}
			break
		}
		parent := filepath.Dir(at) // missing, or under a file (ENOTDIR)
		if parent == at {
			return err
		}
		at = parent
	}
	probe, err := os.CreateTemp(at, ".dszero-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s (%w); give a writable directory", at, errors.Unwrap(err))
	}
	probe.Close()
	return os.Remove(probe.Name())
}
