#!/usr/bin/python3
"""Generates one dszero conformance case by training with real DeepSpeed v0.14.5 on the CPU.

  /usr/bin/python3 conformance/reference/gen_case.py --ds-config CONFIG.json --model MODEL_KEY \
      --init DIR_WITH_models.json [--world-size 2] [--steps 10] [--save-at 5] --out ROOT/<model>/<run>

Starts --world-size ranks of rank_train.py (gloo, one CPU thread each), which build the model
that models.json describes, load its initial weights and data, and train with
deepspeed.initialize on the given ds_config, saving a checkpoint after --save-at steps and after
the last one. A second launch resumes from the --save-at checkpoint and is compared with the
uninterrupted run. The case directory then holds (format: conformance/doc.go):

  result.json              ds_config, versions, per step: loss, lr_used, grad_norm, [loss_scale],
                           skipped_steps, micro_losses per rank; resume_from_step<K>; provenance
  final_fp32.safetensors   the final fp32 weights (zero_to_fp32 of the last checkpoint)
  checkpoint.json          the structure of every file of the last checkpoint
  ckpt/                    DeepSpeed's checkpoints (global_step<K>, global_step<steps>)
  raw/                     per-rank records, logs and the live fp32 weights (for debugging)

Put it below a root whose init/ holds models.json (or copy init/ there) and run
`dszero conformance ROOT`. Setup and run-time patches: README.md next to this file.
"""
import argparse
import glob
import json
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True    # no __pycache__ in the source tree
import envsetup     # imports no torch: OpenBLAS's kernels are chosen when torch is first imported

HERE, DS_SRC, ENV = envsetup.HERE, envsetup.DS_SRC, envsetup.ENV
compat = checkpoint_json = models = None    # modules that import torch: imported by main() after envsetup.apply()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, args, log_path, timeout, local_size=None):
    """Starts the ranks of rank_train.py with the variables torchrun would set, plus LOCAL_SIZE
    (DeepSpeed's own launcher sets it, and the CPU accelerator uses it as device_count(); without it
    ZeRO-3 runs `numactl --hardware`). torchrun itself fails with Debian's torch 1.13.1 on Python
    3.11 (Std.from_str("0") is None: 3.11's IntFlag iteration skips the 0 member).
    local_size (default world): LOCAL_SIZE, the ranks DeepSpeed takes for one node (ZeRO++ qgZ
    reduces hierarchically only with more than one node).
    Returns the exit codes, or None when the ranks ran past the timeout (killed)."""
    port, addr = str(free_port()), "127.0.0.1"
    env = dict(os.environ)     # envsetup.apply() has set ENV and PYTHONPATH
    procs = []
    with open(log_path, "w") as log:
        for r in range(world):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                     LOCAL_SIZE=str(local_size or world), GROUP_RANK="0", MASTER_ADDR=addr, MASTER_PORT=port)
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "rank_train.py")] + args,
                                          env=e, stdout=log, stderr=subprocess.STDOUT))
        deadline, rcs = time.monotonic() + timeout, None
        try:
            rcs = [p.wait(timeout=max(1, deadline - time.monotonic())) for p in procs]
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
                p.wait()
        finally:
            # DeepSpeed's CPU shared-memory all-reduce (deepspeed_shm_comm, set up in init_distributed)
            # leaves a 66 MB /dev/shm file per rank; /dev/shm is RAM.
            for f in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{addr}_{port}_*"):
                try:
                    os.unlink(f)
                except OSError:
                    pass
    return rcs


def read_ranks(raw, world, suffix=""):
    recs = []
    for r in range(world):
        try:
            with open(os.path.join(raw, f"rank{r}{suffix}.json")) as f:
                recs.append(json.load(f))
        except (OSError, ValueError):
            recs.append(None)
    return recs


def merge_steps(recs):
    """Rank 0's step records with every rank's micro-step losses and step times."""
    out = []
    for i, s in enumerate(recs[0]["steps"]):
        m = {k: v for k, v in s.items() if k not in ("micro_losses", "step_time_s")}
        m["micro_losses"] = {f"rank{r}": rec["steps"][i]["micro_losses"] for r, rec in enumerate(recs)}
        m["step_time_s"] = {f"rank{r}": round(rec["steps"][i]["step_time_s"], 5) for r, rec in enumerate(recs)}
        out.append(m)
    return out


def max_abs(a, b):
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def status_of(recs, rcs, timeout):
    if rcs is None:
        return "no_result", f"the ranks ran past {timeout} s and were killed (DeepSpeed hung?); see raw/log*.txt"
    bad = [r for r in recs if r is None or r.get("status") != "ok"]
    if not bad:
        return "ok", None
    failed = [r for r in bad if r is not None]
    if failed:
        return "failed", failed[0].get("error")
    return "no_result", f"a rank wrote no record (exit codes {rcs}); see raw/log*.txt"


def resume_record(base, recs, raw, k, steps, out, keep_resumed=False):
    """Compares the run resumed from global_step<k> with the uninterrupted one (steps k+1..steps);
    keep_resumed also keeps the resumed run's steps and its live final fp32 weights
    (final_fp32_resume<k>.safetensors beside result.json)."""
    st, err = status_of(recs, [0], 0)
    if st != "ok":
        return {"status": st, "error": err, "traceback": (next((r for r in recs if r and r.get("traceback")), {})
                                                          .get("traceback"))}
    by_step = {s["step"]: s for s in base}
    res = merge_steps(recs)
    pairs = [(by_step[s["step"]], s) for s in res]

    def worst(key):     # grad norms of skipped steps are stale values: not compared
        vals = [abs(a[key] - b[key]) for a, b in pairs if a.get(key) is not None and b.get(key) is not None
                and not (key == "grad_norm" and (a.get("skipped") or b.get("skipped")))]
        return max(vals) if vals else None
    micro = max(abs(x - y) for a, b in pairs for r in a["micro_losses"]
                for x, y in zip(a["micro_losses"][r], b["micro_losses"][r]))
    live_res = os.path.join(raw, f"final_fp32_live_resume{k}.safetensors")
    w_res, _ = models.load_safetensors(live_res)
    w_base, _ = models.load_safetensors(os.path.join(raw, "final_fp32_live.safetensors"))
    rec = {"status": "ok", "loaded": recs[0].get("resume_load_path", "").replace(out, "<case>"),
           "global_steps_after_load": recs[0].get("global_steps_after_load"),
           f"loss_max_abs_diff_steps{k + 1}_{steps}": worst("loss"), "lr_max_abs_diff": worst("lr_used"),
           "grad_norm_max_abs_diff": worst("grad_norm"), "micro_loss_max_abs_diff": micro,
           "final_fp32_max_abs_diff_vs_uninterrupted": max_abs(w_res, w_base)}
    if keep_resumed:
        # The resumed run itself, for optimizers whose resume departs from the uninterrupted run
        # by design (the 1-bit optimizers' load_state_dict resets their compression errors).
        rec["steps"] = res
        dst = os.path.join(out, f"final_fp32_resume{k}.safetensors")
        shutil.copy(live_res, dst)
        rec["final_fp32_file"] = os.path.basename(dst)
    return rec


def record_final(res, r0, out, steps):
    """Final weights and checkpoint description of a run that went through."""
    raw, ckpt = os.path.join(out, "raw"), os.path.join(out, "ckpt")
    root = os.path.dirname(os.path.dirname(out))             # paths in result.json are relative to ROOT
    for k in ("final_fp32_source", "zero_to_fp32_vs_live_max_abs_diff", "zero_to_fp32_error"):
        if k in r0:
            res[k] = r0[k]
    final_path = os.path.join(out, "final_fp32.safetensors")
    shutil.copy(os.path.join(raw, "final_fp32.safetensors"), final_path)
    final, _ = models.load_safetensors(final_path)
    live, _ = models.load_safetensors(os.path.join(raw, "final_fp32_live.safetensors"))
    res["final_fp32_file"] = os.path.relpath(final_path, root)
    res["live_fp32_vs_checkpoint_fp32_max_abs_diff"] = max_abs(live, final)
    desc = checkpoint_json.write(ckpt, os.path.join(out, "checkpoint.json"), f"global_step{steps}")
    res["checkpoint_description_file"] = os.path.relpath(os.path.join(out, "checkpoint.json"), root)
    res["checkpoint_files"] = [(f["path"], f["bytes"]) for f in desc["files"]]


def provenance(argv):
    blas = "/etc/alternatives/libblas.so.3-x86_64-linux-gnu"
    try:
        dpkg = subprocess.run(["dpkg-query", "-W", "python3-torch", "libopenblas0-pthread", "python3-pydantic"],
                              capture_output=True, text=True).stdout.split("\n")
    except OSError:
        dpkg = []
    return {"script": "conformance/reference/gen_case.py",
            "command": " ".join(shlex.quote(a) for a in [sys.executable] + argv),
            "python": platform.python_version(), "deepspeed_src": DS_SRC,
            "blas": os.path.realpath(blas) if os.path.exists(blas) else None,
            "dpkg": [l for l in dpkg if l], "nproc": os.cpu_count(),
            "env": dict(ENV),
            "ambient_openblas": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_") and k not in ENV}}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ds-config", required=True, help="the DeepSpeed config (JSON) to train with")
    ap.add_argument("--model", required=True, help="the model's key in models.json")
    ap.add_argument("--init", required=True, help="the directory holding models.json and the *.safetensors it names")
    ap.add_argument("--world-size", type=int, default=2, help="ranks (processes) to train on")
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps")
    ap.add_argument("--keep-resumed", action="store_true",
                    help="keep the resumed run's steps in resume_from_step<K> and its final weights "
                         "(final_fp32_resume<K>.safetensors): for optimizers whose resume departs from the "
                         "uninterrupted run by design (the 1-bit optimizers)")
    ap.add_argument("--save-at", type=int, default=None,
                    help="save a checkpoint after this many steps and resume from it (default steps//2; 0: no resume)")
    ap.add_argument("--out", required=True, help="the case directory, ROOT/<model>/<run>")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per launch before the ranks are killed")
    ap.add_argument("--openblas-core", default=None,
                    help="OPENBLAS_CORETYPE for the ranks, replacing any in the environment (default: SkylakeX "
                         "on AVX-512 CPUs, as the shipped references; \"\": OpenBLAS's own choice)")
    ap.add_argument("--local-size", type=int, default=None,
                    help="LOCAL_SIZE, DeepSpeed's devices per node (default: the world size, one node); "
                         "1 makes every rank a node, as ZeRO++ qgZ cases need")
    a = ap.parse_args(argv)
    envsetup.apply(a.openblas_core)
    global compat, checkpoint_json, models
    import compat            # noqa: E402  (these import torch)
    import checkpoint_json   # noqa: E402
    import models            # noqa: E402
    save_at = a.steps // 2 if a.save_at is None else a.save_at
    if not 0 <= save_at < a.steps:
        ap.error("--save-at must be below --steps")
    if not os.path.isfile(os.path.join(DS_SRC, "deepspeed", "__init__.py")):
        sys.exit(f"no DeepSpeed source in {DS_SRC}: run setup.sh (or set DS_SRC)")
    with open(a.ds_config) as f:
        cfg = json.load(f)
    zo = cfg.get("zero_optimization", {})
    if int(cfg.get("sequence_parallel_size", 1)) > 1 and zo.get("stage") == 3 and (
            zo.get("reduce_scatter", True) or not zo.get("contiguous_gradients", True)):
        print("gen_case.py: note: with sequence parallelism ZeRO-3's reduce_scatter path (reduce_scatter true, the "
              "default, or contiguous_gradients false) averages the gradients over every rank, not over "
              "world/sequence_parallel_size as stages 0-2 and its contiguous all-reduce path do "
              "(reduce_scatter_coalesced): gradients and norms come out 1/sp of stage 0's; README.md, "
              "\"Sequence parallelism\"", file=sys.stderr)
    init_dir = os.path.abspath(a.init)
    desc = models.read_models(init_dir)
    if a.model not in desc:
        sys.exit(f"{init_dir}/models.json has no model {a.model!r} (it has {sorted(desc)})")
    models.build_model(desc[a.model])      # fail early on a description we cannot build

    out = os.path.abspath(a.out)
    raw, ckpt = os.path.join(out, "raw"), os.path.join(out, "ckpt")
    for stale in (raw, ckpt):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in ("result.json", "final_fp32.safetensors", "checkpoint.json", f"final_fp32_resume{save_at}.safetensors"):
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    os.makedirs(raw)
    spec = {"ds_config": cfg, "init_dir": init_dir, "model": a.model, "steps": a.steps, "save_at": save_at,
            "ckpt_dir": ckpt, "raw_dir": raw}
    with open(os.path.join(raw, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1)

    t0 = time.time()
    rcs = launch(a.world_size, ["--spec", os.path.join(raw, "spec.json")], os.path.join(raw, "log.txt"), a.timeout, a.local_size)
    recs = read_ranks(raw, a.world_size)
    status, err = status_of(recs, rcs, a.timeout)
    res = {"model": a.model, "run": os.path.basename(out), "status": status, "ds_config": cfg,
           "world_size": a.world_size, "local_size": a.local_size or a.world_size, "generator": provenance(argv)}
    r0 = recs[0] or {}
    res["generator"]["openblas_core"] = r0.get("openblas_core")
    for k in ("deepspeed_version", "torch_version", "accelerator", "comm_backend", "engine", "dtype",
              "sequence_parallel", "zero_init"):
        if k in r0:
            res[k] = r0[k]
    res["harness_patches"] = [compat.PATCH_NOTES[p] for p in r0.get("patches", [])]
    if status != "ok":
        res["error"] = err
        res["traceback"] = next((r.get("traceback") for r in recs if r and r.get("traceback")), None)
    else:
        res["steps"] = merge_steps(recs)
        record_final(res, r0, out, a.steps)
        if save_at:
            rcs = launch(a.world_size, ["--spec", os.path.join(raw, "spec.json"), "--resume-from-step", str(save_at)],
                         os.path.join(raw, f"log_resume{save_at}.txt"), a.timeout, a.local_size)
            recs = read_ranks(raw, a.world_size, f"_resume{save_at}")
            res[f"resume_from_step{save_at}"] = (
                resume_record(res["steps"], recs, raw, save_at, a.steps, out, a.keep_resumed) if rcs is not None
                else {"status": "no_result", "error": status_of(recs, None, a.timeout)[1]})
    res["wall_s"] = round(time.time() - t0, 1)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"{a.model}/{res['run']}: {status}" + (f" ({err})" if err else ""), f"in {res['wall_s']} s")
    if status == "ok":
        for s in res["steps"]:
            print(f"  step {s['step']:3d}  loss {s['loss']:.9f}  lr {s['lr_used']:.6g}  grad_norm {s['grad_norm']}")
        rs = res.get(f"resume_from_step{save_at}")
        if rs:
            print("  resume:", json.dumps({k: v for k, v in rs.items() if k not in ("traceback",)}))
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
