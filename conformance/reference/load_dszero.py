#!/usr/bin/python3
"""Real DeepSpeed v0.14.5 resumes from a checkpoint that dszero wrote (by hand, not CI).

  /usr/bin/python3 conformance/reference/load_dszero.py --ckpt DSZERO_CKPT_ROOT --tag global_step5 \
      --ds-config CONFIG.json --model mlp --init conformance/testdata/deepspeed-0.14.5-cpu/init \
      --world-size 2 --steps 10 --out OUT \
      [--dszero-losses LOSSES.json] [--dszero-final FINAL] [--reference RESULT.json]

Starts --world-size ranks of rank_train.py (gen_case.py's launcher, environment and run-time
patches: see README.md). Each builds the model and engine with deepspeed.initialize as for a
case, then engine.load_checkpoint(DSZERO_CKPT_ROOT, tag=global_step<K>) and trains steps K+1 ...
--steps. DSZERO_CKPT_ROOT is the directory holding `latest`; dszero's checkpoint is only read.
The data, model and loss are gen_case.py's, so the continuation is comparable with dszero's own
continuation from the same checkpoint.

Writes OUT/result.json: the per-step records (loss, lr_used, grad_norm, micro_losses, ...) of the
resumed run, and the comparisons asked for; OUT/raw/ has the rank records, the log and the final
fp32 weights (final_fp32_live_resume<K>.safetensors, DeepSpeed's safe_get_full_fp32_param).

  --dszero-losses   JSON: a list of the losses of steps K+1 ... --steps, or an object whose
                    "continuation" is that list (dszero's continuation from the same checkpoint)
  --dszero-final    dszero's final fp32 weights after --steps: a .safetensors file, or raw
                    little-endian float32 in models.json's parameter order (the flat buffer)
  --reference       a case's result.json (e.g. DeepSpeed's own uninterrupted run of the config)
"""
import argparse
import json
import os
import shutil
import sys
import time

sys.dont_write_bytecode = True
import envsetup  # noqa: E402  (imports no torch)
import gen_case  # noqa: E402  (launch, read_ranks, merge_steps; imports no torch at import time)


def read_losses(path):
    with open(path) as f:
        v = json.load(f)
    return v["continuation"] if isinstance(v, dict) else v


def read_final(path, desc, models, torch):
    if path.endswith(".safetensors"):
        t, _ = models.load_safetensors(path)
        return {k: v.float() for k, v in t.items()}
    import numpy as np
    flat = torch.from_numpy(np.fromfile(path, dtype="<f4").astype(np.float32))
    out, off = {}, 0
    for p in desc["params"]:
        out[p["name"]] = flat[off:off + p["numel"]].view(p["shape"])
        off += p["numel"]
    if off != flat.numel():
        sys.exit(f"{path}: {flat.numel()} float32 values, models.json's parameters have {off}")
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt", required=True, help="dszero's checkpoint root (the directory holding `latest`)")
    ap.add_argument("--tag", default=None, help="global_step<K> (default: the one `latest` names)")
    ap.add_argument("--ds-config", required=True)
    ap.add_argument("--model", required=True, help="the model's key in models.json")
    ap.add_argument("--init", required=True, help="the directory holding models.json")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, required=True, help="train to this optimizer step")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--openblas-core", default=None, help="as gen_case.py's")
    ap.add_argument("--dszero-losses")
    ap.add_argument("--dszero-final")
    ap.add_argument("--reference")
    a = ap.parse_args(argv)
    envsetup.apply(a.openblas_core)
    import torch   # noqa: E402  (after envsetup: OpenBLAS picks its kernels at load)
    import models  # noqa: E402

    ckpt = os.path.abspath(a.ckpt)
    tag = a.tag
    if tag is None:
        with open(os.path.join(ckpt, "latest")) as f:
            tag = f.read().strip()
    if not tag.startswith("global_step") or not tag[len("global_step"):].isdigit():
        sys.exit(f"tag {tag!r}: rank_train.py loads global_step<K>")
    k = int(tag[len("global_step"):])
    if not 0 < k < a.steps:
        sys.exit(f"--steps {a.steps} must be above the checkpoint's step {k}")
    with open(a.ds_config) as f:
        cfg = json.load(f)
    init_dir = os.path.abspath(a.init)
    desc = models.read_models(init_dir)[a.model]

    out = os.path.abspath(a.out)
    raw = os.path.join(out, "raw")
    shutil.rmtree(raw, ignore_errors=True)
    os.makedirs(raw)
    spec = {"ds_config": cfg, "init_dir": init_dir, "model": a.model, "steps": a.steps, "save_at": 0,
            "ckpt_dir": ckpt, "raw_dir": raw}
    with open(os.path.join(raw, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1)

    t0 = time.time()
    rcs = gen_case.launch(a.world_size, ["--spec", os.path.join(raw, "spec.json"), "--resume-from-step", str(k)],
                          os.path.join(raw, f"log_resume{k}.txt"), a.timeout)
    recs = gen_case.read_ranks(raw, a.world_size, f"_resume{k}")
    status, err = gen_case.status_of(recs, rcs, a.timeout)
    res = {"what": "real DeepSpeed resumed from a dszero checkpoint", "dszero_checkpoint": ckpt, "tag": tag,
           "model": a.model, "ds_config": cfg, "world_size": a.world_size, "status": status,
           "generator": gen_case.provenance(argv)}
    r0 = recs[0] or {}
    for key in ("deepspeed_version", "torch_version", "engine", "dtype", "resume_load_path",
                "global_steps_after_load", "resume_client_state", "openblas_core"):
        if key in r0:
            res[key] = r0[key]
    if status != "ok":
        res["error"] = err
        res["traceback"] = next((r.get("traceback") for r in recs if r and r.get("traceback")), None)
    else:
        res["steps"] = gen_case.merge_steps(recs)
        print(f"DeepSpeed {r0.get('deepspeed_version')} loaded {ckpt}/{tag} "
              f"(global_steps {r0.get('global_steps_after_load')}) and trained steps {k + 1}-{a.steps}:")
        ref = None
        if a.reference:
            with open(a.reference) as f:
                ref = {s["step"]: s["loss"] for s in json.load(f)["steps"]}
        dz = read_losses(a.dszero_losses) if a.dszero_losses else None
        if dz is not None and len(dz) != len(res["steps"]):
            sys.exit(f"{a.dszero_losses}: {len(dz)} losses, the run has {len(res['steps'])} steps")
        rows = []
        for i, s in enumerate(res["steps"]):
            row = {"step": s["step"], "deepspeed_loss": s["loss"]}
            line = f"  step {s['step']:3d}  DeepSpeed loss {s['loss']:.9f}"
            if dz is not None:
                row["dszero_loss"] = dz[i]
                row["abs_diff"] = abs(s["loss"] - dz[i])
                line += f"  dszero {dz[i]:.9f}  |Δ| {row['abs_diff']:.2e}"
            if ref is not None and s["step"] in ref:
                row["reference_loss"] = ref[s["step"]]
                line += f"  reference {ref[s['step']]:.9f}  |Δ| {abs(s['loss'] - ref[s['step']]):.2e}"
            rows.append(row)
            print(line)
        res["comparison"] = rows
        if dz is not None:
            res["loss_max_abs_diff_vs_dszero"] = max(r["abs_diff"] for r in rows)
            res["loss_max_rel_diff_vs_dszero"] = max(r["abs_diff"] / abs(r["dszero_loss"]) for r in rows)
            print(f"  losses vs dszero: max |Δ| {res['loss_max_abs_diff_vs_dszero']:.3e}, "
                  f"max rel {res['loss_max_rel_diff_vs_dszero']:.3e}")
        if a.dszero_final:
            live, _ = models.load_safetensors(os.path.join(raw, f"final_fp32_live_resume{k}.safetensors"))
            theirs = read_final(a.dszero_final, desc, models, torch)
            res["final_fp32_max_abs_diff_vs_dszero"] = max(float((live[n].float() - theirs[n]).abs().max())
                                                           for n in live)
            print(f"  final fp32 weights vs dszero: max |Δ| {res['final_fp32_max_abs_diff_vs_dszero']:.3e}")
    res["wall_s"] = round(time.time() - t0, 1)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    if status != "ok":
        print(f"{status}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
