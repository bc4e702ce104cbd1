#!/usr/bin/env python3
"""1-bit Adam and 0/1 Adam on the harness's TinyMLP at N in-process ranks, in float64: DeepSpeed
0.14.5's own OnebitAdam and ZeroOneAdam classes, driven by a port of the engine's loop and of its
compressed all-reduce.

    /usr/bin/python3 conformance/reference/onebit_adam_ref.py \
        --data model/mlp/testdata --world 2 --steps 10 --freeze-step 5 \
        --out zero/testdata/onebit_adam_mlp_world2.json
    /usr/bin/python3 conformance/reference/onebit_adam_ref.py --optimizer zerooneadam \
        --data model/mlp/testdata --world 2 --steps 18 --var-freeze-step 9 ... \
        --out zero/testdata/zeroone_adam_mlp_world2.json

What is DeepSpeed's code and what is the port:

* DeepSpeed's, imported unmodified from its v0.14.5 source (~/.cache/dszero-ref/deepspeed-src, see
  setup.sh): deepspeed.runtime.fp16.onebit.adam.OnebitAdam and
  deepspeed.runtime.fp16.onebit.zoadam.ZeroOneAdam (its variance intervals, the compressed
  gradients between them, the frozen local steps and their compressed syncs) and
  deepspeed.runtime.fp16.onebit.lamb.OnebitLamb (trust ratios, their EMA, the scaled flat momentum,
  the fresh variance and its factor). OnebitAdam's step() is what runs: the
  initialization pass of the first call, the warm-up (exp_avg and exp_avg_sq from the averaged
  gradients, update exp_avg / (sqrt(exp_avg_sq) + eps), no bias correction, weight decay added to
  the update), the switch after the step whose count reaches freeze_step (it sets
  engine.enable_backward_allreduce = False), the compressed phase (exp_avg from the rank's own
  gradient, then compressed_allreduce, exp_avg_sq frozen), the padding of each tensor to a multiple
  of size * lcm(size, 8) and its worker_error / server_error buffers.
* Port, written here from DeepSpeed's source:
  - NcclBackend.compressed_allreduce (deepspeed/runtime/comm/nccl.py), op for op, with cupy's
    packbits + all_to_all_single + all_gather replaced by handing the ±1 sign tensors and the
    scales to the other rank threads (packing signs into bits is lossless: the values are the same).
    It is installed as the module deepspeed.runtime.comm.nccl, because the real one imports cupy
    (CUDA); DeepSpeed's other backends need mpi4py (mpi) or an XPU packbits kernel (compressed).
  - the deepspeed.comm calls OnebitAdam makes (is_initialized, get_rank, get_world_size), for
    the rank threads;
  - the engine's part (runtime/engine.py): each micro-step's loss divided by
    gradient_accumulation_steps before backward; while engine.enable_backward_allreduce is True the
    gradients are averaged over the ranks (allreduce_gradients), afterwards they stay the rank's
    own; then optimizer.step(). No gradient clipping (the config sets none).
* Not DeepSpeed: the MLP (fc1.. Linear layers, ReLU between, MSE loss), the data layout of
  models.Data (step s, micro-step m, rank r reads micro-batch m*world + r), float64 throughout
  (torch.set_default_dtype(torch.float64), so OnebitAdam's error buffers are float64 too).

With --case it writes a conformance case instead (result.json and final_fp32.safetensors, see
conformance/doc.go) for a model of an init directory's models.json, in float32 as DeepSpeed runs
on a CPU. For the MLP such a case matches dszero within 5e-8. For the GPT its losses equal
gen_case.py's real-engine run's, but dszero differs from both by ~1e-4 after two steps at a
constant lr of 1e-3 with micro-batch 2 — with torch.optim.Adam too (gen_case.py, Adam with
torch_adam, no scheduler), so that is not the 1-bit optimizers' — and no GPT case is shipped.

The output is JSON: the ds_config dszero runs, and per step the mean loss over the ranks and
micro-steps, summed in micro-batch order, and whether the step ran compressed.
"""
import argparse
import json
import math
import os
import sys
import threading
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import envsetup  # noqa: E402

envsetup.apply("")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from models import load_safetensors, save_safetensors, Data, build_model, read_models, init_file, arch_of  # noqa: E402

_rank = threading.local()


class Exchange:
    """What the ranks' collectives move, between threads: every rank puts its part, every rank
    reads all parts in rank order."""

    def __init__(self, world):
        self.world = world
        self.slots = [None] * world
        self.barrier = threading.Barrier(world)

    def all(self, mine):
        self.slots[_rank.r] = mine
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got


class FakeDist:
    """deepspeed.comm as OnebitAdam uses it."""

    def __init__(self, world):
        self.world = world

    def is_initialized(self):
        return True

    def get_rank(self, group=None):
        return _rank.r

    def get_world_size(self, group=None):
        return self.world


def make_nccl_module(ex):
    """deepspeed.runtime.comm.nccl with NcclBackend.compressed_allreduce ported."""

    class NcclBackend:
        def __init__(self, mpu=None):
            self.rank = _rank.r
            self.size = ex.world

        def compressed_allreduce(self, buffer_m, worker_error, server_error, local_rank):
            original_shape = buffer_m.size()
            if len(original_shape) > 1:
                buffer_m = torch.flatten(buffer_m)
            original_size = buffer_m.numel()
            worker_error_size = worker_error.numel()
            if original_size != worker_error_size:
                empty_tensor = torch.zeros(worker_error_size - original_size, device=buffer_m.device)
                buffer_m = torch.cat([buffer_m, empty_tensor])

            buffer_m.add_(worker_error)
            worker_scale = torch.linalg.norm(buffer_m) / np.sqrt(buffer_m.numel())
            worker_sign = buffer_m.sign().add_(1).bool().to(buffer_m.dtype).add_(-0.5).mul_(2.0)
            worker_error.set_(buffer_m - worker_scale * worker_sign)

            # Phase 1: all_to_all_single of the packed sign chunks (chunk j to rank j),
            # all_gather of the worker scales.
            got = ex.all((worker_sign.chunk(self.size), worker_scale))
            recv_sign = torch.stack([chunks[self.rank] for chunks, _ in got])
            recv_scale = torch.stack([s.reshape(1) for _, s in got])
            compensated_server_m = recv_sign.mul_(recv_scale.mul_(1 / self.size)).sum(0)
            compensated_server_m.add_(server_error)
            server_scale = torch.linalg.norm(compensated_server_m) / np.sqrt(compensated_server_m.numel())
            server_sign = compensated_server_m.sign().add_(1).bool().to(buffer_m.dtype).add_(-0.5).mul_(2.0)
            server_error.set_(compensated_server_m - server_scale * server_sign)

            # Phase 2: all_gather of the server signs and scales.
            got = ex.all((server_sign, server_scale))
            signs = torch.stack([s for s, _ in got])
            scales = torch.stack([c.reshape(1) for _, c in got])
            buffer_m.data.copy_(signs.mul_(scales).flatten().data)
            if original_size != worker_error_size:
                buffer_m = buffer_m[0:original_size]
            if len(original_shape) > 1:
                buffer_m = buffer_m.reshape(original_shape)
            return buffer_m

    mod = types.ModuleType("deepspeed.runtime.comm.nccl")
    mod.NcclBackend = NcclBackend
    return mod


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.n = len(sizes) - 1

    def forward(self, x, y):
        h = x
        for i in range(1, self.n + 1):
            h = getattr(self, f"fc{i}")(h)
            if i < self.n:
                h = F.relu(h)
        return F.mse_loss(h, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="with --out: the directory with mlp_init.safetensors and mlp_data.safetensors")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--freeze-step", type=int, default=5)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--gas", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--optimizer", choices=["onebitadam", "zerooneadam", "onebitlamb"], default="onebitadam")
    ap.add_argument("--max-coeff", type=float, default=10.0)
    ap.add_argument("--min-coeff", type=float, default=0.01)
    ap.add_argument("--coeff-beta", type=float, default=0.9)
    ap.add_argument("--factor-max", type=float, default=4.0)
    ap.add_argument("--factor-min", type=float, default=0.5)
    ap.add_argument("--factor-threshold", type=float, default=0.1)
    ap.add_argument("--var-freeze-step", type=int, default=100000)
    ap.add_argument("--var-update-scaler", type=int, default=16)
    ap.add_argument("--local-step-scaler", type=int, default=32678)
    ap.add_argument("--local-step-clipper", type=int, default=16)
    ap.add_argument("--out", help="the golden file of zero's tests (MLP, float64)")
    ap.add_argument("--case", help="instead: write a conformance case directory (result.json, final_fp32.safetensors) "
                    "for --model of --init's models.json, in float32 as DeepSpeed runs it on a CPU")
    ap.add_argument("--init", help="with --case: the init directory (models.json, weights, data)")
    ap.add_argument("--model", default="gpt", help="with --case: the models.json key")
    ap.add_argument("--float64", action="store_true", help="with --case: run in float64 (a sensitivity check)")
    a = ap.parse_args()
    if (a.out is None) == (a.case is None) or (a.case and not a.init) or (a.out and not a.data):
        ap.error("give --out with --data, or --case with --init")
    torch.set_default_dtype(torch.float32 if a.case and not a.float64 else torch.float64)
    dtype = torch.get_default_dtype()

    import deepspeed.runtime.fp16.onebit.adam as onebit_adam  # DeepSpeed's own classes
    import deepspeed.runtime.fp16.onebit.zoadam as zoadam
    import deepspeed.runtime.fp16.onebit.lamb as onebit_lamb

    ex = Exchange(a.world)
    sys.modules["deepspeed.runtime.comm.nccl"] = make_nccl_module(ex)
    onebit_adam.dist = FakeDist(a.world)
    zoadam.dist = FakeDist(a.world)
    onebit_lamb.dist = FakeDist(a.world)
    if a.optimizer == "onebitadam":
        params = {"lr": a.lr, "eps": a.eps, "freeze_step": a.freeze_step, "weight_decay": a.weight_decay,
                  "comm_backend_name": "nccl"}
        make_opt = onebit_adam.OnebitAdam
        ds_type = "OneBitAdam"
    elif a.optimizer == "onebitlamb":
        params = {"lr": a.lr, "eps": a.eps, "freeze_step": a.freeze_step, "weight_decay": a.weight_decay,
                  "max_coeff": a.max_coeff, "min_coeff": a.min_coeff, "coeff_beta": a.coeff_beta,
                  "factor_max": a.factor_max, "factor_min": a.factor_min, "factor_threshold": a.factor_threshold,
                  "comm_backend_name": "nccl"}
        make_opt = onebit_lamb.OnebitLamb
        ds_type = "OneBitLamb"
    else:
        params = {"lr": a.lr, "eps": a.eps, "var_freeze_step": a.var_freeze_step,
                  "var_update_scaler": a.var_update_scaler, "local_step_scaler": a.local_step_scaler,
                  "local_step_clipper": a.local_step_clipper, "weight_decay": a.weight_decay,
                  "comm_backend_name": "nccl"}
        make_opt = zoadam.ZeroOneAdam
        ds_type = "ZeroOneAdam"

    if a.case:
        desc = read_models(a.init)[a.model]
        arch = arch_of(desc)
        init, _ = load_safetensors(init_file(a.init, desc["init_file"]))
        data = Data(init_file(a.init, desc["data_file"]), arch)

        def new_model():
            return build_model(desc)

        def loss_of(model, batch):
            return model(batch)
    else:
        init, _ = load_safetensors(os.path.join(a.data, "mlp_init.safetensors"))
        names = sorted({k.split(".")[0] for k in init}, key=lambda s: int(s[2:]))
        sizes = [init[names[0] + ".weight"].shape[1]] + [init[n + ".weight"].shape[0] for n in names]
        data = Data(os.path.join(a.data, "mlp_data.safetensors"), "mlp")

        def new_model():
            return MLP(sizes)

        def loss_of(model, batch):
            x, y = batch
            return model(x.to(dtype), y.to(dtype))
    final = {}
    losses = [[[0.0] * a.gas for _ in range(a.world)] for _ in range(a.steps)]
    frozen = [False] * a.steps
    errors = []

    def rank_main(r):
        _rank.r = r
        try:
            model = new_model()
            with torch.no_grad():
                for n, p in model.named_parameters():
                    p.copy_(init[n].to(p.dtype))
            engine = types.SimpleNamespace(mpu=None, local_rank=r, enable_backward_allreduce=True)
            opt = make_opt(model.parameters(), deepspeed=engine, **params)
            for s in range(a.steps):
                for p in model.parameters():
                    p.grad = None
                for m in range(a.gas):
                    loss = loss_of(model, data.micro_batch(s, m, r, a.micro, a.gas, a.world))
                    losses[s][r][m] = loss.item()
                    (loss / a.gas).backward()
                compressed = not engine.enable_backward_allreduce
                if not compressed:  # allreduce_gradients: the average over the ranks
                    grads = ex.all([p.grad.clone() for p in model.parameters()])
                    for i, p in enumerate(model.parameters()):
                        total = grads[0][i].clone()
                        for g in grads[1:]:
                            total.add_(g[i])
                        p.grad.copy_(total.div_(a.world))
                if r == 0:
                    frozen[s] = compressed
                opt.step()
            if r == 0:
                final.update({n: p.detach().clone().float() for n, p in model.named_parameters()})
        except BaseException as e:  # noqa: BLE001
            errors.append((r, e))
            ex.barrier.abort()
            raise

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(a.world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"rank {errors[0][0]} failed: {errors[0][1]!r}")

    steps = []
    for s in range(a.steps):
        total = 0.0
        for m in range(a.gas):
            for r in range(a.world):
                total += losses[s][r][m]
        steps.append({"step": s + 1, "loss": total / (a.gas * a.world), "compressed": frozen[s]})
        if not math.isfinite(steps[-1]["loss"]):
            print(f"warning: step {s + 1} loss {steps[-1]['loss']}", file=sys.stderr)
    ds_config = {"train_micro_batch_size_per_gpu": a.micro, "gradient_accumulation_steps": a.gas,
                 "optimizer": {"type": ds_type, "params": params}}
    if a.case:
        write_case(a, ds_config, steps, losses, final, make_opt.__name__)
        return
    out = {"generator": f"conformance/reference/onebit_adam_ref.py (DeepSpeed 0.14.5 {make_opt.__name__}, ported engine "
                        "loop and NcclBackend.compressed_allreduce, float64, torch " + torch.__version__ + ")",
           "command": " ".join(["/usr/bin/python3", "conformance/reference/onebit_adam_ref.py"] + sys.argv[1:]),
           "world": a.world, "ds_config": ds_config, "steps": steps}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for st in steps:
        print(f"step {st['step']:3d} loss {st['loss']:.10g}{'  (compressed)' if st['compressed'] else ''}")


def write_case(a, ds_config, steps, losses, final, cls):
    """A conformance case (conformance/doc.go): result.json and final_fp32.safetensors."""
    os.makedirs(a.case, exist_ok=True)
    recs = [{"step": st["step"], "lr_used": a.lr, "loss": st["loss"], "grad_norm": None,
             "micro_losses": {f"rank{r}": losses[i][r] for r in range(a.world)}}
            for i, st in enumerate(steps)]
    res = {"model": a.model, "run": os.path.basename(os.path.normpath(a.case)), "status": "ok",
           "note": f"DeepSpeed 0.14.5's {cls} class in float32, driven by conformance/reference/onebit_adam_ref.py "
                   "(a port of the engine's loop and of NcclBackend.compressed_allreduce: see its docstring); "
                   "no gradient clipping, so no grad_norm",
           "ds_config": ds_config, "deepspeed_version": "0.14.5", "torch_version": torch.__version__,
           "command": " ".join(["/usr/bin/python3", "conformance/reference/onebit_adam_ref.py"] + sys.argv[1:]),
           "steps": recs}
    with open(os.path.join(a.case, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    save_safetensors(os.path.join(a.case, "final_fp32.safetensors"), final)


if __name__ == "__main__":
    main()
