package dsconfig

import "testing"

// TestSeqParallel: sequence_parallel_size runs (no Unsupported), divides
// the batch world, and sets the gradients' reduction dtype as DeepSpeed
// 0.14.5's engine does: seq_parallel_comm_data_type, default fp32, in
// place of communication_data_type; the documented
// seq_parallel_communication_data_type is not read, with a warning.
func TestSeqParallel(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		world       int
		wantComm    string
		wantDP      int64
		diags       []wantDiag
	}{
		{"no sp: communication_data_type", `"communication_data_type": "bf16"`, 4, "bf16", 4, nil},
		{"sp 2: fp32 by default", `"sequence_parallel_size": 2, "communication_data_type": "bf16"`, 4, "fp32", 2, nil},
		{"sp 2: seq_parallel_comm_data_type", `"sequence_parallel_size": 2, "seq_parallel_comm_data_type": "fp16"`, 4, "fp16", 2, nil},
		{"sp 4: the documented key is not read", `"sequence_parallel_size": 4, "seq_parallel_communication_data_type": "bf16"`, 4, "fp32", 1,
			[]wantDiag{{Warning, "seq_parallel_communication_data_type", []string{"does not read", "seq_parallel_comm_data_type", "reduce in fp32"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, diags := compileString(t, `{`+batchOK+` "optimizer": {"type": "AdamW"}, "bf16": {"enabled": true}, `+tc.extra+`}`, Options{WorldSize: tc.world})
			if diags.HasErrors() || len(diags.Filter(Unsupported)) > 0 {
				t.Fatalf("diagnostics: %v", diags)
			}
			if p.CommunicationDataType != tc.wantComm {
				t.Errorf("communication dtype %q, want %q", p.CommunicationDataType, tc.wantComm)
			}
			if got := p.DataParallelSize(); got != tc.wantDP {
				t.Errorf("data-parallel size %d, want %d", got, tc.wantDP)
			}
			if got := p.Batch.TrainBatchSize; got != 2*tc.wantDP {
				t.Errorf("train_batch_size %d, want 2 × %d", got, tc.wantDP)
			}
			for _, w := range tc.diags {
				if !hasDiag(diags, w) {
					t.Errorf("no %v at %s with %q in %v", w.sev, w.path, w.frags, diags)
				}
			}
		})
	}
}
