// Package llama is the decoder family of Hugging Face's LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM, written by
// hand, forward and backward, on a flat parameter buffer like package
// gpt, and read from and written to Hugging Face checkpoint directories.
//
// # Sources
//
// The architecture follows huggingface/transformers (src/transformers/):
// models/llama/modeling_llama.py and configuration_llama.py;
// models/qwen2/modular_qwen2.py and configuration_qwen2.py;
// models/qwen3/modular_qwen3.py and configuration_qwen3.py;
// models/mistral/configuration_mistral.py; modeling_rope_utils.py (the
// rope types, transformers 5's yarn with original_max_position_embeddings,
// truncate and mscale); masking_utils.py (causal, sliding window, packed
// sequences); loss/loss_utils.py (ForCausalLMLoss); and
// modeling_utils.py's _init_weights. testdata/reference holds our own
// plain-PyTorch twin of it, the source of the parity goldens.
//
// # Shapes
//
// B batch rows, T tokens per row, N = B·T, H hidden_size, I
// intermediate_size, L layers, nH query heads, nKV key/value heads
// (nH/nKV = rep query heads share one), D head_dim (need not be H/nH:
// Qwen3-0.6B has 16 heads of 128 over H = 1024), V vocabulary.
//
// # Architecture
//
//	h      = embed_tokens[tokens]                                   (N, H), no scaling
//	cos, sin from the position ids                                  float32, rope type below
//	layer: x1 = input_layernorm(h)                                  RMSNorm
//	       q = q_proj(x1), k = k_proj(x1), v = v_proj(x1)           (N, nH·D), (N, nKV·D) ×2
//	       Qwen3: q, k = q_norm(q), k_norm(k)                       RMSNorm over each head's D
//	       q, k = rope(q), rope(k)                                  half-split rotation
//	       y = softmax(q·kᵀ/√D + mask)·v                            query head j reads kv head j/rep
//	       h = h + o_proj(y)
//	       h = h + down_proj(silu(gate_proj(x2)) ⊙ up_proj(x2)),  x2 = post_attention_layernorm(h)
//	logits = norm(h) · lm_headᵀ                                     lm_head = embed_tokens when tied
//	loss   = Σ cross_entropy over targets ≠ -100, / their count (or / Batch.LossDenom)
//
// RMSNorm is x·rsqrt(mean(x²) + eps)·w in float32. The mask lets query t
// see key t2 ≤ t of its own packed sequence (a new one starts wherever
// the position ids do not continue by one, as HF's position_ids packing
// does) and, in a sliding-window layer, only t2 > t − window.
//
// The five switches: q/k/v biases (Qwen2 always; Llama and Qwen3 with
// attention_bias, which adds o_proj's too), MLP biases (Llama's mlp_bias),
// q/k norms (Qwen3), an explicit head_dim, and a sliding window (Mistral
// on every layer; Qwen2/3 with use_sliding_window from max_window_layers
// on, or per layer_types). Tied embeddings are a sixth. An embedding
// padding row (pad_token_id) starts at zero and, as nn.Embedding's
// padding_idx, gets no gradient from the lookup; tied, it still gets the
// head's.
//
// RoPE types: default (inv_freq[i] = θ^(-2i/D)), linear (/factor), dynamic
// (equal to default within max_position_embeddings; positions past it are
// an error), yarn (cos and sin times the attention factor) and llama3
// (Llama 3.1/3.2's smoothed band). Config.InvFreq computes them operation
// by operation in float32 as torch does. Both config forms are read:
// rope_theta with rope_scaling (rope_type or the legacy type) and
// transformers 5's rope_parameters.
//
// # Flat buffer, units, hooks
//
// The parameters are one []float32 in LlamaForCausalLM's named_parameters
// order under their Hugging Face names (Config.Layout lists them), so a
// checkpoint maps onto the buffer tensor by tensor and a ZeRO partition is
// offset arithmetic. The units are embeddings (0), model.layers.l (1+l,
// one per decoder layer, each of class Family.DecoderLayerClass, so stage
// 3 gathers layer by layer and an FSDP transformer_layer_cls_to_wrap maps
// onto them) and head (L+1; tied, it Borrows unit 0). Model implements
// model.Model: gradients accumulate across Backward calls, or are written
// after OverwriteGrads, exactly as in package gpt; each parameter's
// gradient of one Backward is computed whole and then added (PyTorch's
// AccumulateGrad). A tied embed_tokens gets the head's and the lookup's
// gradients summed first and then accumulated, as autograd does; when
// accumulating, that costs a (V, H) scratch until the lookup's backward.
//
// # Activations and checkpointing
//
// Activations for a (B, T) are allocated through the mem.Accountant as
// mem.Activations when a shape is first seen, reused by later steps that
// fit, and freed by Close; after warm-up a step allocates nothing. With
// Options.Checkpoint only each layer's input is kept and backward
// recomputes the layer first (bit-identical gradients);
// Options.CPUCheckpoint accounts those inputs in the pinned-host tier.
//
// # Compute
//
// Every matrix product is a single-precision GEMM through Options.Gemm:
// the Linear layers as torch's addmm (bias first, beta = 1), the attention
// as one GEMM per (batch row, head) and operand, reading q, k and v in
// place through their row strides, with the (row, kv head) pairs spread
// over a bounded worker pool. Reductions that torch does in float32 (norm
// moments, softmax and loss sums, bias and norm weight gradients) are
// accumulated in float64; exp, silu and the loss in float64. Against
// PyTorch's float32 CPU kernels the results agree to about 1e-6 relative,
// not bit for bit.
//
// # 16-bit compute
//
// Options.Round (half.RoundBF16, half.RoundF16) emulates a bf16/fp16 model
// with the contract of a GPU's 16-bit kernels: every op reads 16-bit
// values, computes in float32 and rounds its output once. It does not
// reproduce torch's CPU bf16 kernels bit for bit (package gpt does that
// for GPT-2). Rounded, forward: cos and sin (HF casts them to the model's
// dtype); each RMSNorm output (the weight multiply inside the op); each
// Linear output (bias included); q and k after RoPE; the scores after the
// 1/√D scale, the probabilities and att·v; each residual sum; the SwiGLU
// output silu(gate)⊙up; the logits, whose loss is float32. Backward:
// dlogits; every Linear's input gradient and its weight and bias
// gradients; each RMSNorm's input and weight gradients; d(gate), d(up);
// d(att), d(scores), dq, dk and dv (each key/value head's summed over its
// query heads); dq, dk after RoPE's backward; each sum of two gradient
// paths; the embedding gradient after each added row. Each parameter's
// gradient of one Backward is rounded before it is added to the float32
// gradient buffer, like a 16-bit .grad added into fp32 accumulators.
//
// # Checkpoints
//
// OpenWeights reads a directory's model.safetensors, or the shards its
// model.safetensors.index.json names, F32, BF16 or F16, by range
// (Weights.ReadRange): a stage-3 rank reads only its slices. A tied
// checkpoint's stored lm_head.weight and old rotary_emb.inv_freq buffers
// are ignored. SaveDir writes config.json (the family's keys, torch_dtype
// and dtype true to the tensors), generation_config.json, the weights
// (sharded with an index above SaveOptions.MaxShardBytes, 5 GB by
// default, split as save_pretrained splits) and the source directory's
// tokenizer files, streaming the weights from a range reader.
package llama
