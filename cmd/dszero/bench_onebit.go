package main

// oneBitBase is bench's base config with its optimizer replaced by
// DeepSpeed's OneBitAdam at the same lr, with freeze_step 1: step 1 is the
// optimizer's initialization pass, step 2 its one warm-up step (the
// gradients all-reduced in fp32), and every later step exchanges the
// momentum compressed, which is what the variant's sent/step shows (with
// --steps 3 or more). DeepSpeed runs it at ZeRO stage 0 only.
func oneBitBase(base map[string]any) map[string]any {
	cfg := map[string]any{}
	for k, v := range base {
		cfg[k] = v
	}
	lr := 1e-4
	if o, ok := base["optimizer"].(map[string]any); ok {
		if p, ok := o["params"].(map[string]any); ok {
			if v, ok := p["lr"].(float64); ok {
				lr = v
			}
		}
	}
	cfg["optimizer"] = map[string]any{"type": "OneBitAdam", "params": map[string]any{"lr": lr, "freeze_step": 1}}
	return cfg
}

// sentTotal is the bytes of a step's SentBytes.
func sentTotal(m map[string]int64) int64 {
	var t int64
	for _, b := range m {
		t += b
	}
	return t
}
