"""One rank of a DeepSpeed training run; gen_case.py starts WORLD of these.

usage (by gen_case.py, with RANK/WORLD_SIZE/MASTER_* and the rest of the environment set):
  rank_train.py --spec RAW/spec.json [--resume-from-step K]

spec.json: {"ds_config", "init_dir", "model", "steps", "save_at", "ckpt_dir", "raw_dir"}.
Writes RAW/rank<r>[_resume<K>].json: per optimizer step the lr used, the loss (mean over ranks
and micro-steps), this rank's micro-step losses, the gradient norm, the loss scale (fp16) and
the skipped-step count. Rank 0 also writes the final fp32 weights: final_fp32_live*.safetensors
(DeepSpeed's safe_get_full_fp32_param on the live engine) and, for the uninterrupted run,
final_fp32.safetensors (zero_to_fp32 of the last checkpoint; see final_fp32()).

With "sequence_parallel_size" sp > 1 in the ds_config (a key DeepSpeed 0.14.5 itself does not
read) the rank runs DeepSpeed-Ulysses as Megatron-DeepSpeed drives it: the groups come from an
mpu (UlyssesMPU), the GPT's attention goes through deepspeed.sequence.layer.DistributedAttention,
an SP group's ranks read the same samples and each keeps its slice of the tokens (models.py).
"""
import argparse
import copy
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
torch.use_deterministic_algorithms(True)

import compat  # noqa: E402
import models  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
CLIENT_KEY = "harness_step"      # client_state key saved in every checkpoint (as in the shipped references)


def interned(o):
    """The config with its strings interned, as if written as Python literals (the harness built its
    configs in code). Checkpoints pickle the config next to the optimizer's param_groups, whose keys
    ("lr", "betas", ...) are interned literals; pickle stores an object seen before as a back-reference,
    so only interned keys give the shipped references' checkpoint files byte for byte."""
    if isinstance(o, dict):
        return {interned(k): interned(v) for k, v in o.items()}
    if isinstance(o, list):
        return [interned(v) for v in o]
    return sys.intern(o) if isinstance(o, str) else o


def inner_optimizer(engine):
    """The torch optimizer under DeepSpeed's wrappers (ZeRO, BF16_Optimizer, FP16_Optimizer)."""
    o = engine.optimizer
    while hasattr(o, "optimizer") and not isinstance(o, torch.optim.Optimizer):
        o = o.optimizer
    return o


def capture_stage0_norm(captured):
    """Stage-0 fp32 clips with deepspeed.runtime.utils.clip_grad_norm_ and discards the norm
    (engine.get_global_grad_norm() stays None): record it through a wrapper that changes nothing."""
    from deepspeed.runtime import engine as eng_mod
    orig = eng_mod.clip_grad_norm_

    def clip(*a, **k):
        n = orig(*a, **k)
        captured["norm"] = float(n)
        return n
    eng_mod.clip_grad_norm_ = clip


def openblas_core():
    """The OpenBLAS kernel set in use (Debian's OpenBLAS picks it by CPU at run time unless
    OPENBLAS_CORETYPE names one): different kernels round matmuls differently."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def live_fp32(engine):
    """Full fp32 master weights through DeepSpeed's API (a collective: every rank calls it)."""
    from deepspeed.utils import safe_get_full_fp32_param
    opt = engine.optimizer
    master = {}     # FP16_UnfusedOptimizer/FP16_Optimizer (fp16 stage 0) keep fp32 copies DeepSpeed's API does not see
    if hasattr(opt, "fp16_groups") and hasattr(opt, "fp32_groups"):
        for g16, g32 in zip(opt.fp16_groups, opt.fp32_groups):
            for a, b in zip(g16, g32 if isinstance(g32, (list, tuple)) else []):
                master[id(a)] = b
    out = {}
    for n, p in engine.module.named_parameters():
        t = safe_get_full_fp32_param(p)
        if t is None:
            t = master.get(id(p), p)
        out[n] = t.detach().float().cpu().clone()
    return out


def final_fp32(engine, ckpt_dir, tag, live, res):
    """Rank 0: the run's final fp32 weights. As for the shipped references: zero_to_fp32 of the
    final checkpoint when DeepSpeed keeps separate fp32 master weights (ZeRO >= 1, bf16, fp16),
    the module's own parameters for stage-0 fp32. zero_to_fp32 refuses BF16_Optimizer checkpoints
    (bf16 + stage 0: "... is not a zero checkpoint"); those fall back to the live weights."""
    fp32_master = engine.zero_optimization_stage() > 0 or engine.bfloat16_enabled() or engine.fp16_enabled()
    if not fp32_master:
        res["final_fp32_source"] = "engine.module.named_parameters()"
        return {n: p.detach().float().cpu().clone() for n, p in engine.module.named_parameters()}
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    try:
        sd = get_fp32_state_dict_from_zero_checkpoint(ckpt_dir, tag=tag)
        sd = {n: sd[n].float() for n in live}
        res["final_fp32_source"] = "deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint"
        res["zero_to_fp32_vs_live_max_abs_diff"] = max(float((sd[n] - live[n]).abs().max()) for n in sd)
        return sd
    except Exception as e:  # noqa: BLE001
        res["zero_to_fp32_error"] = f"{type(e).__name__}: {e}"
        res["final_fp32_source"] = "deepspeed.utils.safe_get_full_fp32_param (zero_to_fp32 failed on this checkpoint)"
        return live


class UlyssesMPU:
    """The mpu DeepSpeed 0.14.5 takes its sequence-parallel groups from (deepspeed/utils/groups.py,
    _get_sequence_parallel_group and the rest: 0.14.5 reads no sequence_parallel_size from the
    ds_config, only from an mpu, as Megatron-DeepSpeed passes its parallel_state). This is that
    parallel_state for tensor and pipeline parallel size 1 and sequence_parallel_size sp
    (megatron/core/parallel_state.py, initialize_model_parallel): the sequence-parallel groups
    are sp consecutive ranks, the data-parallel groups the ranks with the same place in them
    (stride sp, so rank r is data-parallel rank r // sp), the sequence-data-parallel group
    (ZeRO's dp_process_group and the gradient reduction's) is every rank, and each rank is its
    own model-parallel group. Every rank creates every group, in the same order."""

    def __init__(self, world, sp, rank):
        td = torch.distributed
        if sp < 1 or world % sp:
            raise SystemExit(f"sequence_parallel_size {sp} does not divide the world size {world}")
        self.sp, self.dp, self.rank = sp, world // sp, rank
        for g in range(world // sp):
            grp = td.new_group(list(range(g * sp, (g + 1) * sp)))
            if rank // sp == g:
                self.sp_group = grp
        for j in range(sp):
            grp = td.new_group(list(range(j, world, sp)))
            if rank % sp == j:
                self.dp_group = grp
        for r in range(world):
            grp = td.new_group([r])
            if r == rank:
                self.mp_group = grp
        self.sdp_group = td.new_group(list(range(world)))

    def get_sequence_parallel_world_size(self): return self.sp
    def get_sequence_parallel_rank(self): return self.rank % self.sp
    def get_sequence_parallel_group(self): return self.sp_group
    def get_data_parallel_world_size(self): return self.dp
    def get_data_parallel_rank(self): return self.rank // self.sp
    def get_data_parallel_group(self): return self.dp_group
    def get_sequence_data_parallel_world_size(self): return self.sp * self.dp
    def get_sequence_data_parallel_rank(self): return self.rank
    def get_sequence_data_parallel_group(self): return self.sdp_group
    def get_model_parallel_world_size(self): return 1
    def get_model_parallel_rank(self): return 0
    def get_model_parallel_group(self): return self.mp_group
    get_tensor_model_parallel_world_size = get_model_parallel_world_size
    get_tensor_model_parallel_rank = get_model_parallel_rank
    get_tensor_model_parallel_group = get_model_parallel_group


def train(spec, resume, res):
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    res.update(deepspeed_version=deepspeed.__version__, torch_version=torch.__version__,
               accelerator=get_accelerator()._name, comm_backend=get_accelerator().communication_backend_name())
    cfg = interned(spec["ds_config"])
    res["patches"] = compat.install_for(cfg, RANK)
    res["openblas_core"] = openblas_core()
    deepspeed.init_distributed(dist_backend="gloo")
    world = torch.distributed.get_world_size()

    desc = models.read_models(spec["init_dir"])[spec["model"]]
    model = models.build_model(desc)
    init, _ = models.load_safetensors(models.init_file(spec["init_dir"], desc["init_file"]))
    model.load_state_dict(init, strict=True)
    data = models.Data(models.init_file(spec["init_dir"], desc["data_file"]), models.arch_of(desc))
    sp, mpu = int(cfg.get("sequence_parallel_size", 1)), None
    dp_rank, dp_world = RANK, world
    if sp > 1:
        if not hasattr(model, "set_seq_parallel"):
            raise SystemExit(f"sequence_parallel_size {sp}: the {models.arch_of(desc)} model has no Ulysses path here (the GPT and the Llama family have)")
        mpu = UlyssesMPU(world, sp, RANK)
        model.set_seq_parallel(models.SeqParallel(mpu.get_sequence_parallel_group(), mpu.get_sequence_parallel_rank(), sp))
        dp_rank, dp_world = mpu.get_data_parallel_rank(), mpu.get_data_parallel_world_size()
        res["sequence_parallel"] = {
            "size": sp, "data_parallel_size": dp_world,
            "groups": "UlyssesMPU (rank_train.py), passed as deepspeed.initialize(mpu=...): sequence-parallel groups of "
                      "sp consecutive ranks, data-parallel rank r // sp, ZeRO over every rank",
            "attention": "deepspeed.sequence.layer.DistributedAttention(scatter_idx=2, gather_idx=1), batch_dim_idx 0",
            "loss": "per-token cross-entropy all-gathered over the group, mean over the whole sequence; backward takes "
                    "the rank's slice (deepspeed/sequence/cross_entropy.py of v0.15.0, models._GatherSequence)",
            "data": "an SP group reads data-parallel rank r // sp's samples; member s keeps tokens s*T/sp ... at global positions"}
        if cfg.get("zero_optimization", {}).get("stage", 0) == 3:
            # ZeRO-3 partitions the parameters over the group zero.Init names. Left to itself the
            # engine converts the module with mpu.get_data_parallel_group() (parameter_offload.py,
            # _convert_to_zero_parameters) while its optimizer reduces and partitions over the
            # sequence-data-parallel group: DeepSpeed 0.14.5 then trains other numbers (each
            # rank's fp32 partition is the whole model, the losses drift from stage 0's by 3e-2
            # in 10 steps). Megatron-DeepSpeed builds its model inside
            # zero.Init(sequence_data_parallel_group=...); here the loaded module is converted so.
            deepspeed.zero.Init(module=model, sequence_data_parallel_group=mpu.get_sequence_data_parallel_group(),
                                config_dict_or_path=copy.deepcopy(cfg), mpu=mpu)
            res["zero_init"] = "deepspeed.zero.Init(module=model, sequence_data_parallel_group=<every rank>)"

    captured = {}
    capture_stage0_norm(captured)
    # DeepSpeed edits the dict it is given (it pops "torch_adam"): cfg is this rank's own interned copy,
    # and gen_case.py records the config as given.
    engine, _, _, scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg, mpu=mpu)
    B, gas = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    res["engine"] = {"optimizer_wrapper": type(engine.optimizer).__name__,
                     "basic_optimizer": type(engine.basic_optimizer).__name__
                     if getattr(engine, "basic_optimizer", None) is not None else None,
                     "scheduler": type(scheduler).__name__ if scheduler is not None else None,
                     "zero_stage": engine.zero_optimization_stage(), "bf16": engine.bfloat16_enabled(),
                     "fp16": engine.fp16_enabled(), "train_batch_size": engine.train_batch_size(),
                     "micro_batch_size": B, "gradient_accumulation_steps": gas, "world_size": world,
                     "sequence_parallel_size": engine.sequence_parallel_size,
                     "dp_world_size": engine.dp_world_size, "seq_dp_world_size": engine.seq_dp_world_size}
    res["dtype"] = str(next(engine.module.parameters()).dtype)

    ckpt_dir, start = spec["ckpt_dir"], 0
    if resume:
        load_path, client = engine.load_checkpoint(ckpt_dir, tag=f"global_step{resume}")
        res["resume_load_path"] = load_path
        res["resume_client_state"] = {k: v for k, v in (client or {}).items() if isinstance(v, (int, float, str))}
        res["global_steps_after_load"] = engine.global_steps
        start = resume

    if engine.progressive_layer_drop:
        # DeepSpeedExamples' training scripts seed numpy alike on every rank, and their PLD encoder draws its
        # layers from numpy's global generator; dszero's conformance runner trains with seed 0
        np.random.seed(0)
    fp16 = engine.fp16_enabled()
    skipped_before = int(engine.skipped_steps)
    steps = res["steps"] = []
    for s in range(start, spec["steps"]):
        rec = {"step": s + 1, "lr_used": float(engine.get_lr()[0])}
        if fp16:
            rec["loss_scale"] = float(engine.optimizer.cur_scale)    # the scale this step's gradients carry
        t0 = time.perf_counter()
        micro = []
        for m in range(gas):
            loss = engine(data.micro_batch(s, m, dp_rank, B, gas, dp_world))    # an SP group's ranks read the same samples
            engine.backward(loss)
            engine.step()
            micro.append(float(loss.item()))
        rec["step_time_s"] = time.perf_counter() - t0
        # the step loss: sum over ranks per micro-step (float64 all-reduce), then over micro-steps
        lt = torch.tensor(micro, dtype=torch.float64)
        torch.distributed.all_reduce(lt)
        rec["loss"] = float(lt.sum().item() / (world * gas))
        gn = engine.get_global_grad_norm()
        if gn is None:
            gn = captured.pop("norm", None)
        rec["grad_norm"] = float(gn) if gn is not None else None
        captured.clear()
        skipped = int(engine.skipped_steps)
        # skipped: fp16 overflow, no optimizer step; DeepSpeed's grad norm is then stale (the last one)
        rec.update(micro_losses=micro, lr_after=float(engine.get_lr()[0]), global_steps=engine.global_steps,
                   skipped_steps=skipped, skipped=skipped > (steps[-1]["skipped_steps"] if steps else skipped_before))
        if fp16:
            rec["loss_scale_after"] = float(engine.optimizer.cur_scale)
            rec["overflow"] = bool(getattr(engine.optimizer, "overflow", False))
        betas = inner_optimizer(engine).param_groups[0].get("betas")
        if betas is not None:
            rec["betas_after"] = list(betas)
        steps.append(rec)
        if not resume and s + 1 == spec["save_at"]:
            engine.save_checkpoint(ckpt_dir, client_state={CLIENT_KEY: s + 1})

    live = live_fp32(engine)
    suffix = f"_resume{resume}" if resume else ""
    final = None
    if not resume:
        engine.save_checkpoint(ckpt_dir, client_state={CLIENT_KEY: spec["steps"]})
        torch.distributed.barrier()
        if RANK == 0:
            final = final_fp32(engine, ckpt_dir, f"global_step{spec['steps']}", live, res)
    torch.distributed.barrier()
    if RANK == 0:
        raw = spec["raw_dir"]
        models.save_safetensors(os.path.join(raw, f"final_fp32_live{suffix}.safetensors"), live,
                                {"what": "fp32 master weights via deepspeed.utils.safe_get_full_fp32_param"})
        if final is not None:
            models.save_safetensors(os.path.join(raw, "final_fp32.safetensors"), final,
                                    {"what": res["final_fp32_source"]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--resume-from-step", type=int, default=0)
    ap.add_argument("--local_rank", type=int, default=0)      # DeepSpeed convention; unused
    args = ap.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    resume = args.resume_from_step
    res = {"rank": RANK, "status": "started", "resume_from_step": resume}
    try:
        train(spec, resume, res)
        res["status"] = "ok"
    except BaseException as e:  # noqa: BLE001 (recorded, then the process exits non-zero)
        res.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-6000:])
        print(res["traceback"], file=sys.stderr, flush=True)
    suffix = f"_resume{resume}" if resume else ""
    with open(os.path.join(spec["raw_dir"], f"rank{RANK}{suffix}.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    if res["status"] != "ok":
        os._exit(3)


if __name__ == "__main__":
    main()
