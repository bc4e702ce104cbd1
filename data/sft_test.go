package data

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Each format's ids and labels. The conversations of testdata/ are those
// of tokenizer/testdata/golden/chat.json, so the expected ids are the
// reference render's (@huggingface/jinja + @huggingface/tokenizers); the
// label spans are counted by hand on those ids:
//
//	qwen3 conversation 0:  <|im_start|> user \n What is the capital of France ? <|im_end|> \n
//	                       <|im_start|> assistant \n | <think> \n\n </think> \n\n Paris . <|im_end|> | \n
//	                       → the assistant's tokens are 15…21.
//	qwen3 conversation 1:  "2, 3, 5." <|im_end|> is 23…31, "<think>…7." <|im_end|> is 46…52.
//	llama3 conversation 0: "Paris" "." <|eot_id|> is 17…19 (the template's trailing
//	                       assistant header is layout, not the assistant's).
func TestSFTFormats(t *testing.T) {
	q0, q1, l0 := golden(t, "qwen3", 0), golden(t, "qwen3", 1), golden(t, "llama3", 0)
	qwen := loadTok(t, "qwen3")
	imEnd, _ := qwen.TokenToID("<|im_end|>")
	enc := func(tk interface{ Encode(string, bool) []int }, s string, special bool) []int32 {
		return toInt32(tk.Encode(s, special))
	}
	dir := t.TempDir()

	// alpaca record 1: system, and instruction + "\n" + input as the user
	// turn, in Qwen3's ChatML with the empty think block on the last turn.
	a1Prompt := "<|im_start|>system\nYou are a translator.<|im_end|>\n<|im_start|>user\nTranslate to French.\nGood morning<|im_end|>\n" +
		"<|im_start|>assistant\n"
	a1 := enc(qwen, a1Prompt+"<think>\n\n</think>\n\nBonjour<|im_end|>\n", false)
	a1Lo := len(enc(qwen, a1Prompt, false))

	// prompt-completion strings: tokenized with special tokens (Qwen adds
	// none), EOS after the completion, loss from the prompt's length on.
	pcText := writeFile(t, dir, "pc.jsonl", `{"prompt": "The capital of France is", "completion": " Paris."}`+"\n")
	pcIDs := append(enc(qwen, "The capital of France is Paris.", true), int32(imEnd))
	pcLo := len(enc(qwen, "The capital of France is", true))

	// prompt-completion messages: everything after the generation prompt
	// takes the loss, the template's trailing "\n" too (trl).
	pcChat := writeFile(t, dir, "pcchat.jsonl", `{"prompt": [{"role": "user", "content": "What is the capital of France?"}], `+
		`"completion": [{"role": "assistant", "content": "Paris."}]}`+"\n")

	// Mistral text: BOS from the tokenizer, EOS appended, loss everywhere.
	mistral := loadTok(t, "mistral")
	textFile := writeFile(t, dir, "text.jsonl", `{"text": "Hello world"}`+"\n")
	hello, _ := mistral.TokenToID("▁Hello")
	world, _ := mistral.TokenToID("▁world")
	textIDs := []int32{1, int32(hello), int32(world), 2} // <s> ▁Hello ▁world </s>

	// Mistral prompt-completion: BOS on the prompt, which is masked with it.
	pcM := []int32{1}
	pcM = append(pcM, enc(mistral, "2+2=", false)...)
	pcMLo := len(pcM)
	pcMFile := writeFile(t, dir, "pcm.jsonl", `{"prompt": "2+2=", "completion": "4"}`+"\n")
	pcM = append(enc(mistral, "2+2=4", true), 2)

	// No chat template (the GPT-2-style tokenizer): alpaca goes through
	// AlpacaTemplate, LLaMA-Factory's "alpaca" template.
	gpt2 := loadTok(t, "gpt2style")
	alpPrompt := "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n" +
		"### Instruction:\nWhat is the capital of France?\n\n### Response:\n"
	alpIDs := enc(gpt2, alpPrompt+"Paris.<EOT>\n\n", false)
	alpLo := len(enc(gpt2, alpPrompt, false))
	alpHi := len(enc(gpt2, alpPrompt+"Paris.<EOT>", false))

	td := func(name string) string { return filepath.Join("testdata", name) }
	for _, tc := range []struct {
		name   string
		path   string
		tok    string
		opt    SFTOptions
		format Format
		sample int
		ids    []int32
		labels []int32
	}{
		{"alpaca", td("alpaca.json"), "qwen3", SFTOptions{}, FormatAlpaca, 0, q0.IDs, labelsFor(q0.IDs, [2]int{15, 22})},
		{"alpaca input+system", td("alpaca.json"), "qwen3", SFTOptions{}, FormatAlpaca, 1, a1, labelsFor(a1, [2]int{a1Lo, len(a1) - 1})},
		{"alpaca history", td("alpaca.json"), "qwen3", SFTOptions{}, FormatAlpaca, 2, q1.IDs, labelsFor(q1.IDs, [2]int{23, 32}, [2]int{46, 53})},
		{"sharegpt", td("sharegpt.json"), "qwen3", SFTOptions{}, FormatShareGPT, 0, q0.IDs, labelsFor(q0.IDs, [2]int{15, 22})},
		{"sharegpt system multi-turn", td("sharegpt.json"), "qwen3", SFTOptions{}, FormatShareGPT, 1, q1.IDs, labelsFor(q1.IDs, [2]int{23, 32}, [2]int{46, 53})},
		{"messages", td("messages.jsonl"), "qwen3", SFTOptions{}, FormatMessages, 1, q1.IDs, labelsFor(q1.IDs, [2]int{23, 32}, [2]int{46, 53})},
		{"messages train on prompt", td("messages.jsonl"), "qwen3", SFTOptions{TrainOnPrompt: true}, FormatMessages, 0, q0.IDs, q0.IDs},
		{"messages llama3", td("messages.jsonl"), "llama3", SFTOptions{}, FormatMessages, 0, l0.IDs, labelsFor(l0.IDs, [2]int{17, 20})},
		{"prompt-completion text", pcText, "qwen3", SFTOptions{}, FormatPromptCompletion, 0, pcIDs, labelsFor(pcIDs, [2]int{pcLo, len(pcIDs)})},
		{"prompt-completion chat", pcChat, "qwen3", SFTOptions{}, FormatPromptCompletion, 0, q0.IDs, labelsFor(q0.IDs, [2]int{15, 23})},
		{"prompt-completion mistral", pcMFile, "mistral", SFTOptions{}, FormatPromptCompletion, 0, pcM, labelsFor(pcM, [2]int{pcMLo, len(pcM)})},
		{"text mistral", textFile, "mistral", SFTOptions{}, FormatText, 0, textIDs, textIDs},
		{"alpaca without a chat template", td("alpaca.json"), "gpt2style", SFTOptions{}, FormatAlpaca, 0, alpIDs, labelsFor(alpIDs, [2]int{alpLo, alpHi})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Seq = 256
			d, err := LoadSFT(tc.path, loadTok(t, tc.tok), opt)
			if err != nil {
				t.Fatal(err)
			}
			if d.Stats.Format != tc.format {
				t.Errorf("format %q, want %q", d.Stats.Format, tc.format)
			}
			ids, labels := d.Sample(tc.sample)
			if diff := cmp.Diff(tc.ids, ids); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.labels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}

// The row of an unpacked sample: the targets are the labels shifted by
// one, the last token predicts nothing, and the rest is padding.
func TestFillRowUnpacked(t *testing.T) {
	q0 := golden(t, "qwen3", 0)
	const seq = 64
	d, err := LoadSFT(filepath.Join("testdata", "messages.jsonl"), loadTok(t, "qwen3"), SFTOptions{Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	pad, _ := loadTok(t, "qwen3").TokenToID("<|endoftext|>")
	if d.Pad != int32(pad) {
		t.Errorf("pad %d, want <|endoftext|> = %d", d.Pad, pad)
	}
	tokens, targets := make([]int32, seq), make([]int32, seq)
	d.FillRow(0, tokens, targets, nil)
	n := len(q0.IDs) // 23
	wantTok := append(append([]int32{}, q0.IDs...), repeat(int32(pad), seq-n)...)
	// Positions 14…20 predict the assistant's tokens 15…21.
	wantTgt := repeat(-100, seq)
	copy(wantTgt[14:21], q0.IDs[15:22])
	if diff := cmp.Diff(wantTok, tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantTgt, targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if d.MaxID != 151668 { // </think>, the largest id of the two conversations
		t.Errorf("MaxID %d, want 151668", d.MaxID)
	}
	if got := d.RowTargets(0); got != 7 {
		t.Errorf("row 0 has %d targets, want 7", got)
	}
}

func repeat(v int32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = v
	}
	return out
}
