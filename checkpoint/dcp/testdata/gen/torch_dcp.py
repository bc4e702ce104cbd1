"""torch.distributed.checkpoint interop with real PyTorch (torch >= 2.4; the
GPU machine's 2.11 runs it on its CPU, from scripts/gpu/run.sh).

  python3 torch_dcp.py write OUT            dcp.save the fixture (testdata/spec.json):
                                            OUT/w1 (one process), OUT/w3 (3 gloo ranks,
                                            DTensors sharded Shard(0) as FSDP2 holds them),
                                            OUT/fsdp2 (a model under fully_shard and its
                                            AdamW state, saved as Accelerate saves them,
                                            with the full tensors beside in expected_*.pt)
  python3 torch_dcp.py read DIR...          dcp.load dszero's checkpoints of the fixture:
                                            into plain tensors (1 process), into DTensors on
                                            2 gloo ranks, and dcp_to_torch_save; compare
  python3 torch_dcp.py all OUT DIR...       both

Copy OUT's w1, w3 and fsdp2 into checkpoint/dcp/testdata/torch/ to commit them:
TestReadTorch then checks them in `go test`. Exits non-zero on any mismatch.
"""
import os
import sys
import tempfile
import traceback

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # a CPU check: no GPU needed

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

try:
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor
except ImportError:  # torch 2.4
    from torch.distributed._tensor import DTensor, Shard, distribute_tensor
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402


def log(*a):
    print(*a, flush=True)


def init(rank, world, store):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    return init_device_mesh("cpu", (world,))


def shard(sd, mesh):
    """The fixture as FSDP2 holds it: tensors of >= 1 dim as Shard(0) DTensors."""
    if isinstance(sd, dict):
        return {k: shard(v, mesh) for k, v in sd.items()}
    if isinstance(sd, list):
        return [shard(v, mesh) for v in sd]
    if isinstance(sd, torch.Tensor) and sd.dim() > 0:
        return distribute_tensor(sd, mesh, [Shard(0)])
    return sd


def _save_w3(rank, world, store, out):
    mesh = init(rank, world, store)
    dcp.save(shard(common.state_dict(), mesh), checkpoint_id=out)
    dist.destroy_process_group()


def _save_fsdp2(rank, world, store, out):
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions, get_model_state_dict, get_optimizer_state_dict)
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    mesh = init(rank, world, store)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 7))
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    # Accelerate's save_fsdp_model / save_fsdp_optimizer with SHARDED_STATE_DICT.
    msd = get_model_state_dict(model)
    osd = get_optimizer_state_dict(model, opt)
    dcp.save({"model": msd}, checkpoint_id=os.path.join(out, "pytorch_model_fsdp_0"))
    dcp.save({"optimizer": osd}, checkpoint_id=os.path.join(out, "optimizer_0"))
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    fm = get_model_state_dict(model, options=full)
    fo = get_optimizer_state_dict(model, opt, options=full)
    if rank == 0:
        torch.save({"model": fm}, os.path.join(out, "expected_model.pt"))
        torch.save({"optimizer": fo}, os.path.join(out, "expected_optim.pt"))
    dist.destroy_process_group()


def spawn(fn, world, *args):
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(fn, args=(world, os.path.join(d, "store")) + args, nprocs=world, join=True)


def write(out):
    ok = True
    os.makedirs(out, exist_ok=True)
    dcp.save(common.state_dict(), checkpoint_id=os.path.join(out, "w1"))
    log("wrote", os.path.join(out, "w1"))
    spawn(_save_w3, 3, os.path.join(out, "w3"))
    log("wrote", os.path.join(out, "w3"))
    try:
        spawn(_save_fsdp2, 2, os.path.join(out, "fsdp2"))
        log("wrote", os.path.join(out, "fsdp2"))
    except Exception:  # FSDP2 on CPU needs a recent torch: report, go on
        ok = False
        log("fsdp2 save failed:\n" + traceback.format_exc())
    return ok


def zeros_like(sd):
    """A target of the fixture's shape: zero tensors, placeholder values."""
    if isinstance(sd, dict):
        return {k: zeros_like(v) for k, v in sd.items()}
    if isinstance(sd, list):
        if any(isinstance(v, (dict, torch.Tensor)) for v in sd):
            return [zeros_like(v) for v in sd]
        return []
    if isinstance(sd, torch.Tensor):
        return torch.zeros_like(sd)
    if isinstance(sd, tuple):
        return tuple(0.0 for _ in sd)
    return type(sd)()


def compare(got, want, where):
    bad = []
    flat_g = dict(_walk(got))
    flat_w = dict(_walk(want))
    if set(flat_g) != set(flat_w):
        bad.append(f"{where}: keys {sorted(flat_g)} != {sorted(flat_w)}")
    for k, w in flat_w.items():
        g = flat_g.get(k)
        if isinstance(g, DTensor):
            g = g.full_tensor()
        if not common.same(g, w):
            bad.append(f"{where}: {k}: {g!r} != {w!r}")
    return bad


def _walk(v, path=()):
    if isinstance(v, dict):
        for k, e in v.items():
            yield from _walk(e, path + (k,))
    elif isinstance(v, list) and any(isinstance(e, (dict, torch.Tensor)) for e in v):
        for i, e in enumerate(v):
            yield from _walk(e, path + (i,))
    else:
        yield ".".join(map(str, path)), v


def _load_w2(rank, world, store, ck, results):
    mesh = init(rank, world, store)
    target = shard(zeros_like(common.state_dict()), mesh)
    dcp.load(target, checkpoint_id=ck)
    want = common.state_dict()
    bad = []
    for k, w in dict(_walk(want)).items():
        g = dict(_walk(target))[k]
        if isinstance(g, DTensor):
            rc = common.row_chunk(list(w.shape), world, rank)
            local = g.to_local()
            exp = w.narrow(0, rc[0], rc[1]) if rc else w.narrow(0, 0, 0)
            if not (local.shape == exp.shape and torch.equal(local, exp)):
                bad.append(f"rank {rank}: {k}: local {local!r} != rows {exp!r}")
        elif not common.same(g, w):
            bad.append(f"rank {rank}: {k}: {g!r} != {w!r}")
    results.put(bad)
    dist.destroy_process_group()


def read(dirs):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    bad = []
    for ck in dirs:
        target = zeros_like(common.state_dict())
        dcp.load(target, checkpoint_id=ck)
        bad += compare(target, common.state_dict(), ck + " (dcp.load, 1 process)")
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as d:
            procs = [ctx.Process(target=_load_w2, args=(r, 2, os.path.join(d, "store"), ck, q)) for r in range(2)]
            for p in procs:
                p.start()
            for _ in procs:
                bad += q.get()
            for p in procs:
                p.join()
                if p.exitcode != 0:
                    bad.append(f"{ck}: a dcp.load rank exited {p.exitcode}")
        with tempfile.TemporaryDirectory() as d:
            pt = os.path.join(d, "full.pt")
            dcp_to_torch_save(ck, pt)
            bad += compare(torch.load(pt, weights_only=False), common.state_dict(), ck + " (dcp_to_torch_save)")
        log(f"read {ck}: {'ok' if not bad else 'MISMATCH'}")
    for b in bad:
        log("  " + b)
    return not bad


def main():
    log("torch", torch.__version__)
    cmd = sys.argv[1]
    ok = True
    if cmd in ("write", "all"):
        ok = write(sys.argv[2]) and ok
    if cmd == "read":
        ok = read(sys.argv[2:]) and ok
    if cmd == "all":
        ok = read(sys.argv[3:]) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
