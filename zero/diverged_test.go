package zero_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dszero/dszero/internal/zcore"
	"github.com/dszero/dszero/internal/ztest"
	"github.com/dszero/dszero/zero/lrsched"
)

// TestDivergedEveryStage: a learning rate that overflows the fp32 weights
// makes the next gradient norm infinite, and every stage stops the run
// with the one divergence error (zcore.ErrDiverged), naming the step.
func TestDivergedEveryStage(t *testing.T) {
	d := ztest.MustLoadMLP(t, mlpRef)
	for stage := 0; stage <= 3; stage++ {
		js := strings.Replace(ztest.StageJSON(stage, 20000, false), `"lr": 1e-3`, `"lr": 1e38`, 1)
		js = strings.Replace(js, `"gradient_clipping": 1.0,`, ``, 1)
		js = strings.Replace(js, `"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3`, `"warmup_min_lr": 1e38, "warmup_max_lr": 1e38`, 1)
		plan, err := ztest.Plan(js, 2)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ztest.RunMLP(plan, 4, lrsched.DeepSpeed0195, d, nil)
		if !errors.Is(err, zcore.ErrDiverged) || !strings.Contains(err.Error(), "step ") {
			t.Errorf("stage %d: %v, want the divergence error naming the step", stage, err)
		}
	}
}
