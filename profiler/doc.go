// Package profiler is DeepSpeed's FLOPS profiler (ds_config
// "flops_profiler"): at the profile step it prints, for the model's
// forward pass, every module's parameters, multiply-accumulates (MACs),
// floating-point operations (FLOPs), latency and FLOPS, and the step's
// totals, in the layout of deepspeed/profiling/flops_profiler/profiler.py
// (read at DeepSpeed 0.19.6, master edaa722; 0.14.5 prints the same).
//
// # Where the numbers come from
//
// DeepSpeed counts by monkey-patching torch.nn.functional and a few
// tensor methods while one forward runs, attributing each call to the
// innermost module running. dszero computes the same counts from the
// model's shapes instead: a model configuration is a model.FlopCounter
// that lists its PyTorch twin's modules (model.FlopModule: name, class,
// extra_repr, own parameters, own MACs and FLOPs) for a micro-batch
// shape. The report sums them up the tree as DeepSpeed does:
//
//   - a module's params are the distinct parameter elements in its
//     subtree (a tied head's weight counts once in its parents);
//   - its MACs and FLOPs are its own plus its children's;
//   - its latency is its own measured forward time, or, when it was not
//     timed (0), the sum of its children's: a ModuleList's is its
//     blocks', an untimed leaf's is 0;
//   - fwd FLOPS = FLOPs / latency; the backward is estimated at
//     (2 + recompute_fwd_factor) × the forward's flops.
//
// Latencies: the root module's is the whole Forward call (Start to
// Stop); a module that is one of the model's units (a GPT block, a Llama
// decoder layer or embed_tokens, an MLP layer) gets the time between
// that unit's BeforeForward and AfterForward through Hooks. dszero runs
// each unit as one fused forward, so the modules inside a unit (a
// block's attention and MLP, its Linears) and the parts of the model
// that are not a module of their own show "0 s" and "0 FLOPS", which is
// what DeepSpeed prints for a module whose forward hooks never fired.
//
// # The report
//
// Write prints the header ("Profile Summary at step N", the engine's
// world size, data and model parallel sizes, batch size per GPU), the
// totals (params per GPU, fwd MACs and flops per GPU, fwd/bwd/step/iter
// latency, FLOPS per GPU, samples/second), the aggregated profile (per
// depth, the top_modules classes by params, MACs and latency, each
// class summed over its modules at that depth) and, when detailed, the
// module tree as print(model) prints it under torch ≥ 2.0 with each
// module's profile as its extra_repr. Numbers are formatted by
// NumberToString and friends exactly as DeepSpeed's helpers do; the
// golden tests compare the whole text byte for byte with what DeepSpeed's
// own profiler.py printed for PyTorch twins of dszero's models
// (testdata/gen_golden.py).
//
// # Wiring it into the training loop
//
// DeepSpeed's engine drives the profiler from three places; the loop
// does the same, on global rank 0 only:
//
//  1. Build: p, err := profiler.New(cfg, opts, time.Now, syncDevice) with
//     opts from the frozen flops_profiler block (DefaultOptions for
//     absent keys; Options.Validate names the bad key), and install
//     p.Hooks(stageHooks) as the model's Options.Hooks (the wrapper calls
//     the ZeRO stage's hooks first and reads no clock unless a profile is
//     running, so every rank may install it). Enabling the profiler also
//     turns on wall_clock_breakdown, whose fwd, bwd and step timers the
//     report reads.
//  2. Each micro-step: active := rank == 0 && p.Active(globalSteps),
//     where globalSteps counts the optimizer steps finished so far (0
//     during the first). If active, call p.Start(model.FlopShape{Batch:
//     B, Seq: T, RowPositions: batch.Positions != nil}) right before the
//     model's Forward and p.Stop() right after it (the forward prologue
//     and epilogue; the backward, and a recomputation under activation
//     checkpointing, are not counted).
//  3. After the micro-step's backward and optimizer call (DeepSpeed's
//     engine.step() runs after every micro-step and updates only at the
//     accumulation boundary), if active: p.Print(os.Stdout, label,
//     &profiler.Engine{WorldSize, DataParallel, ModelParallel: 1,
//     MicroBatch: train_micro_batch_size_per_gpu, Fwd, Bwd, Step}) where
//     label is globalSteps after that call (profile_step + 1 at the
//     boundary, profile_step before it) and Fwd, Bwd, Step are the
//     engine's global timers in seconds: summed over the micro-steps of
//     the current accumulation window so far, reset after each boundary.
//
// So with gradient_accumulation_steps g the report prints g times during
// the profiled optimizer step, each with that micro-step's forward counts
// and the window's timers so far, and output_file keeps the last one, as
// in DeepSpeed.
//
// # Where dszero differs from DeepSpeed
//
//   - DeepSpeed's stop_profile does not restore Tensor.__matmul__ or
//     F.scaled_dot_product_attention, so every later start_profile in the
//     process wraps them again and the k-th profile counts each `@` and
//     SDPA call k times (with g > 1 its later prints inflate the
//     attention's MACs). Here every profile counts each op once.
//   - Options are validated before training (a negative profile_step,
//     module_depth < -1, a negative top_modules); a module_depth past the
//     deepest level prints the levels there are where DeepSpeed raises a
//     KeyError; a zero latency gives 0 FLOPS where DeepSpeed divides by
//     zero.
package profiler
