#!/usr/bin/python3
"""Compares a regenerated case with a reference case of the same run (e.g. a shipped one).

  /usr/bin/python3 conformance/reference/compare_cases.py REF_CASE_DIR NEW_CASE_DIR

Prints the largest absolute differences of the per-step losses, lr, gradient norms, loss
scales and micro-step losses, of the final fp32 weights (following final_fp32_identical_to in
either case), and whether checkpoint.json (the structure and values of the final checkpoint)
is equal, listing the first differences. Exit status 0 when everything is identical.
Needs only torch (no DeepSpeed).
"""
import json
import os
import sys

sys.dont_write_bytecode = True    # no __pycache__ in the source tree
import models


def load(case):
    with open(os.path.join(case, "result.json")) as f:
        return json.load(f)


def final_weights(case, res):
    d = case
    for _ in range(8):
        p = os.path.join(d, "final_fp32.safetensors")
        if os.path.exists(p):
            return models.load_safetensors(p)[0], p
        if not res.get("final_fp32_identical_to"):
            return None, None
        d = os.path.join(os.path.dirname(d), res["final_fp32_identical_to"])
        res = load(d)
    return None, None


def micro(step):
    m = step.get("micro_losses") or {}
    if isinstance(m, dict):
        return {(r, i): x for r, xs in m.items() for i, x in enumerate(xs)}
    return {(f"rank{e['rank']}", e["micro"]): e["loss"] for e in m}


def tree_diff(a, b, path="", out=None, limit=20):
    """Paths where two JSON trees differ (up to limit)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'new' if k not in a else 'reference'}")
            else:
                tree_diff(a[k], b[k], f"{path}/{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            tree_diff(x, y, f"{path}[{i}]", out, limit)
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:80]} != {json.dumps(b)[:80]}")
    return out


def main(ref_dir, new_dir):
    ref, new = load(ref_dir), load(new_dir)
    same = True
    print(f"reference {ref_dir}\nnew       {new_dir}")
    for k in ("model", "status", "deepspeed_version", "torch_version"):
        print(f"  {k:18s} {ref.get(k)!s:24s} {new.get(k)!s}")
    cfg_same = ref.get("ds_config") == new.get("ds_config")
    same &= cfg_same
    print(f"  ds_config equal    {cfg_same}")
    rs, ns = ref.get("steps") or [], new.get("steps") or []
    if len(rs) != len(ns):
        print(f"  steps: {len(rs)} in the reference, {len(ns)} new")
        same = False
    for key in ("loss", "lr_used", "grad_norm", "loss_scale", "skipped_steps"):
        ds = [abs(a[key] - b[key]) for a, b in zip(rs, ns) if a.get(key) is not None and b.get(key) is not None]
        missing = sum((a.get(key) is None) != (b.get(key) is None) for a, b in zip(rs, ns))
        if ds or missing:
            print(f"  {key:18s} max|Δ| {max(ds) if ds else 0:.3e} over {len(ds)} steps"
                  + (f"  ({missing} steps recorded on one side only)" if missing else ""))
            same &= (not ds or max(ds) == 0) and not missing
    md = [abs(x - micro(b).get(k, float("nan"))) for a, b in zip(rs, ns) for k, x in micro(a).items()]
    print(f"  micro_losses       max|Δ| {max(md) if md else float('nan'):.3e} over {len(md)} values")
    same &= bool(md) and max(md) == 0
    wr, pr = final_weights(ref_dir, ref)
    wn, pn = final_weights(new_dir, new)
    if wr is not None and wn is not None:
        if list(wr) != list(wn) or any(wr[k].shape != wn[k].shape for k in wr):
            print("  final weights: different tensors")
            same = False
        else:
            d = max(float((wr[k].double() - wn[k].double()).abs().max()) for k in wr)
            bits = all(wr[k].dtype == wn[k].dtype and bool((wr[k] == wn[k]).all()) for k in wr)
            print(f"  final fp32 weights max|Δ| {d:.3e}  bit-identical {bits}  ({os.path.relpath(pr, ref_dir)})")
            same &= bits
    else:
        print(f"  final weights: reference {pr}, new {pn}")
    cr, cn = os.path.join(ref_dir, "checkpoint.json"), os.path.join(new_dir, "checkpoint.json")
    if os.path.exists(cr) and os.path.exists(cn):
        with open(cr) as f, open(cn) as g:
            diffs = tree_diff(json.load(f), json.load(g))
        print(f"  checkpoint.json equal {not diffs}")
        for d in diffs:
            print("    " + d)
        same &= not diffs
    for k in [k for k in new if k.startswith("resume_from_step")]:
        print(f"  {k} (new): {json.dumps(new[k])}")
    print("  IDENTICAL" if same else "  DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
