// Package data turns data files into the micro-batches that each rank
// trains on: a corpus stream for pretraining, or fine-tuning records
// tokenized, masked and packed into rows.
//
// # Global batches
//
// Global batches are laid out the way DeepSpeed's data-parallel ranks see
// them: optimizer step s has GAS × world micro-batches of B samples; rank r
// reads micro-batch mb = micro × world + r at each micro-step. So the global
// batch, and the result, do not depend on how it is split across ranks.
// Both loaders below follow it.
//
// # Pretraining corpora
//
// A corpus is one stream of token ids. Text is tokenized byte by byte
// (vocabulary 256); a .bin file holds little-endian uint16 ids as nanoGPT's
// prepare scripts write them. The stream is cut into windows of T+1 tokens
// (inputs and the targets shifted by one), taken in order and wrapping
// around at the end (Load, NewLoader).
//
// # Fine-tuning records
//
// LoadSFT reads the record files that fine-tuning uses — JSON (an array of
// records, or one per line), JSON Lines, and Parquet, one file, a glob, or a
// directory in the Hugging Face Hub layout data/train-0000x-of-0000n.parquet
// (ResolveFiles) — and tells the format from the first record's fields
// (or takes SFTOptions.Format):
//
//	format             fields                                       loss on
//	text               text                                         every token; EOS appended
//	alpaca             instruction, input, output (system, history) the response (the assistant turns)
//	messages           messages: [{role, content}]                  the assistant turns
//	sharegpt           conversations: [{from, value}]               the assistant turns
//	prompt_completion  prompt, completion (strings or messages)     the completion
//
// Conversations are rendered with the tokenizer's chat template (package
// tokenizer/chat) and tokenized as apply_chat_template does; chat.Tokenize's
// assistant mask marks the tokens that take a loss (trl's
// assistant_only_loss=True, LLaMA-Factory's default train_on_prompt=False;
// SFTOptions.TrainOnPrompt trains on every token instead). The template
// writes the end-of-turn token, so no EOS is added.
//
// Alpaca records become a conversation as LLaMA-Factory's converter builds
// it: the system field as a system message, each history pair as a user
// and an assistant turn, then instruction and input joined by "\n" (each
// only when non-empty) as the user turn and output as the assistant turn.
// When the tokenizer has no chat template, alpaca records use
// AlpacaTemplate, LLaMA-Factory's "alpaca" template (the Stanford Alpaca
// prompt); other conversations then need a template.
//
// ShareGPT roles map as LLaMA-Factory's default tags do: human → user,
// gpt → assistant, system → system, observation → tool, function_call →
// assistant; turns must alternate user (or tool) and assistant and end
// with the assistant. Messages may use either {role, content} or
// {from, value} keys; other keys of a message reach the template.
//
// Prompt-completion records follow trl: strings are tokenized with the
// tokenizer's special tokens (BOS for Llama-2/Mistral), prompt+completion
// as one text with EOS after it, and the loss starts after as many tokens as
// the prompt alone has; message lists render the prompt with the generation
// prompt and the loss covers everything after it. Plain text is tokenized
// the same way and every token takes the loss.
//
// Labels are the token ids, or model.IgnoreIndex (−100) where a token takes
// no loss; the model predicts the label of token k+1 at position k, so a
// row's Targets are its labels shifted by one and the last token of each
// sample predicts nothing.
//
// # Rows and packing
//
// A sample longer than SFTOptions.Seq is an error naming its file and
// record, unless SFTOptions.Truncate keeps its first Seq tokens (trl's
// truncation_mode="keep_start"; a sample left with nothing to learn is
// dropped and counted). Without packing each sample has a row, padded with
// the pad id (PAD, else EOS) and IgnoreIndex targets. With packing, samples
// go into rows by best-fit decreasing, exactly as trl's
// packing_strategy="bfd" bins them: the longest first, each into the row
// with the least room that fits it. Positions restart at 0 at each sample,
// and the models attend only within a sample (model.Batch.Positions), so
// packing changes no sample's loss. trl's older "wrapped" packing, which
// cuts the token stream into rows regardless of samples and lets them see
// each other, is not offered.
//
// # Order and loss normalization
//
// SFTLoader hands out rows in the global-batch layout, through every row
// once per epoch, shuffled per epoch with splitmix64 from a seed (as the
// Trainer's sampler reshuffles each epoch) or in order. Each micro-batch
// carries LossDenom, the number of targets that take a loss in the step's
// whole global batch — the HF Trainer's num_items_in_batch with
// average_tokens_across_devices — so every token of the step weighs the
// same, whichever micro-batch and rank it fell in.
//
// A micro-batch is a pure function of (step, micro, rank) and the seed, so
// resuming from a checkpoint at step s needs no saved data state: the loop
// asks for step s again (Position(s) is the number of rows consumed, for
// the record).
//
// The training loop calls, per rank:
//
//	d, err := data.LoadSFT(path, tok, data.SFTOptions{Seq: T, Packing: true})
//	ld, err := data.NewSFTLoader(d, data.Layout{B: B, T: T, GAS: gas, World: world}, true, seed)
//	b := ld.NewBatch()
//	for step := ...; {
//		for micro := 0; micro < gas; micro++ {
//			ld.Micro(step, micro, rank, &b) // b.LossDenom = ld.LossDenom(step)
//			loss, err := m.Forward(b)
//			err = m.Backward(scale)
//		}
//	}
//
// # Errors
//
// Bad data is an error that names the file and the record (its index, and
// its line in JSON files) and says what to fix: a missing field, a field of
// the wrong type, an empty file, invalid UTF-8, a conversation whose turns
// do not alternate, a record with nothing to learn, a sample longer than
// the sequence. No record is skipped silently; SFTStats counts the empty
// texts skipped and the samples truncated or dropped.
//
// The Parquet reader is github.com/parquet-go/parquet-go (pure Go); rows
// are assembled into the same values JSON decodes to, so one set of format
// rules serves both.
package data
