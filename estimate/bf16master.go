package estimate

import (
	"fmt"
	"strings"

	"github.com/dszero/dszero/mem"
)

// bf16MasterNote is what bf16.bf16_master_weights_and_grads (and
// bf16_optimizer_states) saves in DeepSpeed 0.19.5 at the config's stage —
// or, with fp16 true, fp16.fp16_master_weights_and_grads: the ZeRO
// optimizer allocates the master partition
// (single_partition_of_fp32_groups / fp32_partitioned_groups_flat) and its
// gradient in master_weights_and_grads_dtype = bf16 (fp16), 2 bytes an
// element instead of 4; DeepSpeedCPUAdam's moments follow with
// fp32_optimizer_states=False (forced by bf16_optimizer_states), and on
// the device an optimizer creates them like the bf16 parameters. It
// returns the stage's model states at those widths and the note that says
// so; dszero itself refuses the keys and keeps fp32 (the table).
func bf16MasterNote(st Stage, bf16States, fp16 bool) (Tiers, string) {
	var with Tiers
	var master, grads, states int64
	for _, l := range st.States {
		b := l.Bytes
		switch {
		case l.Category == mem.MasterParams:
			master += l.Elements
			b = 2 * l.Elements
		case l.Category == mem.Grads && strings.Contains(l.What, "partition"):
			grads += l.Elements
			b = 2 * l.Elements
		case l.Category == mem.OptimState && bf16States:
			states += l.Elements
			b = 2 * l.Elements
		}
		with.Add(l.Tier, b)
	}
	what := fmt.Sprintf("the master partition (%s elements) and its gradient partition (%s)", num(master), num(grads))
	key, dtype := "bf16_master_weights_and_grads", "bf16"
	if fp16 {
		key, dtype = "fp16_master_weights_and_grads", "fp16"
	}
	if bf16States {
		what += fmt.Sprintf(" and the optimizer state (%s)", num(states))
		key += " with bf16_optimizer_states"
	}
	fp32 := st.StatesTotal
	return with, fmt.Sprintf("%s: DeepSpeed keeps %s in %s, 2 bytes instead of 4: stage %d's model states take %s on the device, %s pinned on the host, %s on NVMe, against the fp32 %s, %s, %s above (dszero train refuses the key and keeps fp32)",
		key, what, dtype, st.Stage, bytesOrDash(with.Device), bytesOrDash(with.PinnedHost), bytesOrDash(with.NVMe),
		bytesOrDash(fp32.Device), bytesOrDash(fp32.PinnedHost), bytesOrDash(fp32.NVMe))
}
