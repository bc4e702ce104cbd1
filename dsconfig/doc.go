// Package dsconfig reads DeepSpeed JSON configs (ds_config.json) exactly as
// DeepSpeed 0.19.5 reads them, and turns them into one immutable, typed
// Plan that the rest of dszero reads. Nothing else in dszero reads raw JSON.
//
// # Reading
//
// A config arrives as a file path, a JSON string, or DeepSpeed's
// urlsafe-base64 encoding of one (Load). Files are parsed with DeepSpeed's
// Hjson leniency by package lenient: comments, trailing commas, CRLF, a
// BOM. Two things DeepSpeed silently mangles are errors here, with
// file:line:col: a duplicate key (DeepSpeed raises too, without a position)
// and an unquoted value such as ${zero_stage} (Hjson turns it into a string
// and DeepSpeed fails much later).
//
// Hjson syntax outside JSON (comments, trailing or missing commas, unquoted
// keys) is reported too: HF's Trainer and Accelerate read a ds_config with
// json.load, which rejects it. A missing comma is a warning; the deliberate
// Hjson is a warning in HFMode and an info otherwise.
//
// # Two kinds of block
//
// DeepSpeed reads a config in two ways, and the difference decides what a
// typo or an "auto" does:
//
//   - pydantic blocks (zero_optimization, offload_param, offload_optimizer,
//     fp16, bf16, the monitors, comms_logger, compile, hybrid_engine, ...)
//     forbid unknown keys, coerce loosely (5e8 → int, "true" → bool, "1" →
//     1) and drop the string "auto" so that the default applies;
//   - everything else (the top level, optimizer and scheduler params,
//     activation_checkpointing, aio, flops_profiler) is read key by key:
//     unknown keys are ignored and values are used as they are, so "auto"
//     or "8" (a string) reaches arithmetic and fails.
//
// dszero follows both, reports ignored keys as warnings with a did-you-mean
// and what ignoring them means (bp16 → "this run is fp32"), and says at
// once what DeepSpeed would only find later.
//
// # Numbers
//
// DeepSpeed's counts are Python integers: exact at any size, divided with
// floor division. The batch triplet is derived the same way (math/big), so
// every verdict and every number in a message is DeepSpeed's, and nothing
// wraps around to a negative. dszero runs counts up to 2^31−1; a larger
// triplet that DeepSpeed accepts is Unsupported, with the reason.
//
// Messages quote at most 60 characters of any key or value from the config.
//
// # "auto"
//
// In DeepSpeedMode "auto" is treated as DeepSpeed treats it. In HFMode
// (Options.HF set) it is first filled from HF training arguments the way
// transformers' HfTrainerDeepSpeedConfig fills it, including the Trainer's
// mismatch errors for values that disagree with the arguments.
//
// # Provenance
//
// Every knob in the Plan is also listed by Plan.Settings with where it came
// from: the file, an alias, a migrated deprecated key, a default, an "auto"
// that fell back to the default, an HF argument, or derivation (the batch
// triplet). Diagnostics carry severities: Error (DeepSpeed would reject the
// config), Warning, Unsupported (DeepSpeed accepts it but dszero does not run
// that feature yet: check passes, train refuses) and Info.
package dsconfig
