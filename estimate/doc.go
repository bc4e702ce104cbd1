// Package estimate predicts the memory of a ZeRO training run before it
// runs: DeepSpeed's own estimators, exactly as DeepSpeed computes and
// prints them, and dszero's fuller estimate for an actual config — model
// states per stage and per memory tier, the buffers of the config's stage,
// and the activations of the micro-batch. `dszero estimate` prints it.
//
// # Vocabulary
//
// Ψ is the number of parameters (each shared tensor once), N the number of
// data-parallel ranks. Model states are the parameters, gradients and
// optimizer state; the rest of a rank's memory is activations and buffers.
// Bytes are per rank; "GB" in DeepSpeed's output is 2^30 bytes, in the
// ZeRO paper 10^9.
//
// # The ZeRO paper (Rajbhandari et al., SC'20, §5)
//
// Mixed-precision Adam keeps 2Ψ of fp16 parameters, 2Ψ of fp16 gradients
// and KΨ of optimizer state, K = 12 (fp32 master 4, momentum 4, variance
// 4). Per rank (Widths.PerRank, PaperAdam):
//
//	baseline (stage 0)  (2 + 2 + K)·Ψ          7.5B, N = 64:  120 GB
//	P_os     (stage 1)  2Ψ + 2Ψ + K·Ψ/N                        31.4 GB
//	P_os+g   (stage 2)  2Ψ + (2 + K)·Ψ/N                       16.6 GB
//	P_os+g+p (stage 3)  (2 + 2 + K)·Ψ/N                        1.9 GB
//
// # DeepSpeed's estimators (stage_1_and_2.py, stage3.py)
//
// With f = additional_buffer_factor (1.5), G = GPUs per node × nodes and
// L = 4 × largest_layer_params (the largest module, gathered):
//
//	ZeRO-2, offload_optimizer cpu:  GPU 2Ψ                CPU Ψ·max(4G, 16)·f
//	ZeRO-2, no offload:             GPU 2Ψ + int(18Ψ/G)   CPU Ψ·4·(GPUs per node)·f
//	ZeRO-3, offload param + optim:  GPU L                 CPU Ψ·18·f/nodes
//	ZeRO-3, offload optim:          GPU L + int(2Ψ/G)     CPU Ψ·16·f/nodes
//	ZeRO-3, no offload:             GPU L + int(18Ψ/G)    CPU largest·4·(GPUs per node)·f
//
// ZeRO-3's CPU column is for zero_init=1; with zero_init=0 every process
// first builds the whole model on the host, so it is at least
// Ψ·4·(GPUs per node)·f (see Zero3ModelStates). The _all_live
// variants count Ψ and the largest layer from a model (ModelToParams);
// the _all_cold ones take them as numbers. WriteZero2 and WriteZero3
// print the lines DeepSpeed prints, character for character, as in
// the tables the Hugging Face DeepSpeed guide publishes.
//
// # dszero's model states
//
// dszero's CPU backend stores every value in float32, 16-bit ones too, so
// each term below is 4 bytes per element; k is the optimizer's fp32 state
// tensors (Adam 2, with AMSGrad 3, SGD with momentum 1, Adagrad 1).
// Stages 1 and 2 pad the flat buffer of Ψ elements to a multiple of 2N
// (Padded) and cut it into N partitions of P = Padded/N; stage 3 pads
// every parameter on its own, and a rank holds R = Σ ceil(numel/N):
//
//	stage 0  master Ψ (the working parameters in fp32; 16-bit runs add a
//	         working copy Ψ), gradients Ψ, optimizer state kΨ
//	stage 1  working Padded, gradients Padded, master P, state kP
//	stage 2  working Padded, gradient partition P, master P, state kP
//	stage 3  working R, gradients R, master R, state kR
//
// offload_optimizer cpu moves master and optimizer state (and the
// gradient partition at stages 2–3) to pinned host memory; nvme moves
// them to NVMe at stage 3 only, as DeepSpeed does; with
// offload_optimizer.ratio < 1 (stage 3, cpu) the sub-groups the ratio does
// not offload keep all three on the device (partition.OffloadOrder: the
// rule of DeepSpeed 0.19.5 unless Input.OffloadOrder says 0.14.5's).
// offload_param moves
// stage 3's working partitions, except those of persistent parameters.
//
// # Buffers
//
// Stages 0 and 1 reduce and all-gather in place. Stage 2 holds the
// gradients of the units in backward and in unreduced buckets of
// reduce_bucket_size (two buckets in flight with overlap_comm):
// LiveGradients replays the bucketing over the model's units. Stage 3
// keeps the persistent parameters gathered (Persistent:
// stage3_param_persistence_threshold, stage3_model_persistence_threshold),
// gathers the unit in use, prefetches by the trace of the first pass up
// to min(stage3_prefetch_bucket_size, stage3_max_live_parameters) more and
// keeps units needed again within stage3_max_reuse_distance; an
// all-gather or reduce-scatter of a tensor that N does not divide goes
// through a staging buffer of N × ceil(numel/N), and the gradients of the
// units in backward and in reduce-scatter are live. ReplayStage3 replays
// the engine's schedule over the model's units and reports the peak of
// the gathered parameters and of the comm buffers, with what holds the
// latter at its peak (one line each: they add up to the peak). NVMe
// offload stages data through pinned buffers (buffer_count of them).
// The model keeps a scratch of its largest tensor for each fresh gradient.
// The rows of the stages other than the config's use its
// zero_optimization knobs as resolved for its own stage (overlap_comm,
// for one, defaults to true at stage 3 only). Stage 3's lines are the
// engine's peaks, exactly, for a run of two or more micro-batches (the
// first records the trace, the later ones prefetch and keep units by it;
// the replay covers both, so a run of one micro-batch stays at or under
// them), with one gathered unit per model unit (the transformer wrap
// policy) and without ZeRO++ hpZ or MiCS; with --params alone its
// gathered line is a bound and its comm is not counted.
//
// # Activations
//
// Activations counts what package gpt keeps from forward for backward, per
// block and for the head, plus the backward scratch, with and without
// activation checkpointing (one block set instead of L); the attention
// probabilities are B·NH·T² per block, so they grow with T². With
// sequence_parallel_size sp (Ulysses) a rank's activations are those of
// T/sp tokens, its attention probabilities those of NH/sp heads over all
// T tokens, plus the exchange buffers (ActivationsSP): about 1/sp, and a
// note says by how much; the model states partition over every rank.
//
// # JSON
//
// `dszero estimate --json` writes Report's MarshalJSON; the field names
// are stable:
//
//	model, params, largest_layer_params, largest_layer, live,
//	num_gpus_per_node, num_nodes, additional_buffer_factor
//	deepspeed.zero2[]: offload_optimizer, per_cpu_bytes, per_gpu_bytes
//	deepspeed.zero3[]: offload_param, offload_optimizer, zero_init, per_cpu_bytes, per_gpu_bytes
//	dszero (null without a config): config, ranks, zero_stage, precision,
//	    optimizer, optimizer_states, optimizer_assumed, offload_optimizer,
//	    offload_param, micro_batch, seq_len, flat_padded, flat_partition,
//	    stage3_partition, activation_checkpointing, notes[],
//	    model_states[4]: stage, states[], total
//	    buffers[], activations[], activations_checkpointed[]
//	    total: device, pinned_host, nvme (the config's stage: states,
//	        buffers and activations as the run checkpoints them)
//	a line (states[], buffers[], activations…[]): what, category, tier,
//	    elements, bytes — category and tier as package mem names them
package estimate
