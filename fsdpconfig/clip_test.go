package fsdpconfig

import (
	"strings"
	"testing"
)

func TestClipWords(t *testing.T) {
	long := strings.Repeat("k", 61)
	for in, want := range map[string]string{
		"short words stay as they are, however many of them there are in a message": "short words stay as they are, however many of them there are in a message",
		"key " + long + " ignored":        "key " + long[:60] + "… ignored",
		strings.Repeat("é", 70) + "\tend": strings.Repeat("é", 60) + "…\tend",
	} {
		if got := clipWords(in); got != want {
			t.Errorf("clipWords(%.30q…) = %q, want %q", in, got, want)
		}
	}
}

// TestHugeKey: a 5 MB key is named by its first characters only.
func TestHugeKey(t *testing.T) {
	key := "fsdp_" + strings.Repeat("k", 5<<20)
	for name, data := range map[string]string{
		"trainer.json": `{"fsdp_transformer_layer_cls_to_wrap": ["GPT2Block"], "` + key + `": 1}`,
		"acc.yaml":     acc("fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP", key+": 1"),
	} {
		_, diags := Compile(name, []byte(data), Options{})
		if len(diags) == 0 {
			t.Fatalf("%s: no diagnostics", name)
		}
		for _, d := range diags {
			if s := d.String(); len(s) > 2000 || strings.Contains(s, strings.Repeat("k", 61)) {
				t.Errorf("%s: a %d-byte diagnostic repeating the key: %.300s", name, len(s), s)
			}
		}
	}
}
