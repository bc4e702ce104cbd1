package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/dszero/dszero/device"
	"github.com/dszero/dszero/ptfile"
	"github.com/dszero/dszero/zero"
	"github.com/dszero/dszero/zero/lossscale"
)

// A checkpoint DeepSpeed wrote has no manifest: its stage and world size
// are read from its files — the number of zero_pp_rank_R optimizer files,
// and the zero_stage its optimizer state records (ZeroStageEnum) — and its
// files are read without checksums.

var optimFile = regexp.MustCompile(`^(bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt$`)

// zeroStages are ZeroStageEnum's members.
var zeroStages = map[string]int{"disabled": 0, "optimizer_states": 1, "gradients": 2, "weights": 3}

func foreignManifest(path string, dtype device.DType) (manifest, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return manifest{}, fmt.Errorf("checkpoint: %w", err)
	}
	m := manifest{foreign: true}
	for _, e := range ents {
		if optimFile.MatchString(e.Name()) {
			m.World++
		}
	}
	if m.World == 0 {
		// Stage 0: the optimizer's state is in the model states file.
		model, _ := FileNames(0, 0, dtype)
		if _, err := os.Stat(filepath.Join(path, model)); err != nil {
			return m, fmt.Errorf("checkpoint %s: neither a dszero manifest nor DeepSpeed's %s: not a checkpoint directory", path, model)
		}
		m.World = 1
		return m, nil
	}
	_, optim := FileNames(1, 0, dtype)
	// Opened, not read: only the pickle is needed, not the tensors.
	f, err := ptfile.Open(filepath.Join(path, optim), ptfile.Options{DeepSpeed: true})
	if err != nil {
		return m, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	defer f.Close()
	v := f.Root
	zs, err := ptfile.Lookup(v, "optimizer_state_dict.zero_stage")
	if err != nil {
		if _, cerr := ptfile.Lookup(v, "optimizer_state_dict.clip_grad"); cerr == nil && dtype == device.BF16 {
			// BF16_Optimizer at stage 0 records no zero_stage.
			m.Stage = 0
			return m, nil
		}
		return m, fmt.Errorf("checkpoint %s/%s: %w", path, optim, err)
	}
	o, ok := zs.(*ptfile.Object)
	stage, known := 0, false
	if ok {
		stage, known = zeroStages[o.Attr]
	}
	if !known {
		return m, fmt.Errorf("checkpoint %s/%s: zero_stage is %v, not a ZeroStageEnum member", path, optim, zs)
	}
	m.Stage = stage
	return m, nil
}

// readDSScaler reads DeepSpeed's pickled loss scaler (LossScaler or
// DynamicLossScaler) from a file's optimizer_state_dict.loss_scaler — or,
// at stage 0, where there is none in fp32, leaves the static scale of 1.
func readDSScaler(v any, st *zero.State) error {
	st.Scaler, st.Dynamic = lossscale.State{CurScale: 1}, false
	if ok, err := readFP16WrapperScaler(v, st); ok { // stage-0 fp16
		return err
	}
	x, err := ptfile.Lookup(v, "optimizer_state_dict.loss_scaler")
	if err != nil {
		return nil // none: fp32/bf16 without a scaler
	}
	o, ok := x.(*ptfile.Object)
	if !ok {
		return fmt.Errorf("optimizer_state_dict.loss_scaler is %s", ptfile.TypeName(x))
	}
	if s, err := asFloat(o.State, "cur_scale"); err == nil {
		st.Scaler.CurScale = s
	}
	if o.Name == "DynamicLossScaler" {
		st.Dynamic = true
		for _, f := range []struct {
			k string
			p *int
		}{{"cur_iter", &st.Scaler.CurIter}, {"last_overflow_iter", &st.Scaler.LastOverflowIter}, {"cur_hysteresis", &st.Scaler.CurHysteresis}} {
			n, err := asInt(o.State, f.k)
			if err != nil {
				return fmt.Errorf("DynamicLossScaler.%s: %w", f.k, err)
			}
			*f.p = int(n)
		}
	}
	return nil
}
