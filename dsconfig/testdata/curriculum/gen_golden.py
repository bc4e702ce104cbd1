"""Regenerate golden.json: DeepSpeed's own CurriculumScheduler and
ProgressiveLayerDrop, loaded from a DeepSpeed checkout, evaluated on the
schedules of knobs_test.go.

    /usr/bin/python3 gen_golden.py /path/to/DeepSpeed > golden.json

Read at DeepSpeed v0.14.5 (git show v0.14.5:deepspeed/runtime/...); the
two files import only math/numpy, deepspeed.utils.logger/log_dist and the
data_pipeline constants, which are stubbed or loaded from the checkout.
"""
import importlib.util, json, subprocess, sys, types

repo = sys.argv[1]
tag = sys.argv[2] if len(sys.argv) > 2 else "v0.14.5"


def source(path):
    return subprocess.check_output(["git", "-C", repo, "show", f"{tag}:{path}"]).decode()


utils = types.ModuleType("deepspeed.utils")
utils.logger = types.SimpleNamespace(warning=lambda *a, **k: None, info=lambda *a, **k: None)
utils.log_dist = lambda *a, **k: None
for name in ["deepspeed", "deepspeed.runtime", "deepspeed.runtime.data_pipeline"]:
    m = types.ModuleType(name)
    m.__path__ = []
    sys.modules[name] = m
sys.modules["deepspeed.utils"] = utils


def load(name, path):
    m = types.ModuleType(name)
    m.__package__ = name.rsplit(".", 1)[0]
    sys.modules[name] = m
    exec(compile(source(path), path, "exec"), m.__dict__)
    return m


load("deepspeed.runtime.data_pipeline.constants", "deepspeed/runtime/data_pipeline/constants.py")
cs = load("deepspeed.runtime.data_pipeline.curriculum_scheduler", "deepspeed/runtime/data_pipeline/curriculum_scheduler.py")
pld = load("deepspeed.runtime.progressive_layer_drop", "deepspeed/runtime/progressive_layer_drop.py")

schedules = {
    "linear_8_1024": {"min_difficulty": 8, "max_difficulty": 1024, "schedule_type": "fixed_linear",
                      "schedule_config": {"total_curriculum_step": 60000, "difficulty_step": 8}},
    "linear_odd": {"min_difficulty": 5, "max_difficulty": 37, "schedule_type": "fixed_linear",
                   "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 3}},
    "root2_64_1024": {"min_difficulty": 64, "max_difficulty": 1024, "schedule_type": "fixed_root",
                      "schedule_config": {"total_curriculum_step": 100, "difficulty_step": 8, "root_degree": 2}},
    "root3_16_128": {"min_difficulty": 16, "max_difficulty": 128, "schedule_type": "fixed_root",
                     "schedule_config": {"total_curriculum_step": 7, "difficulty_step": 16, "root_degree": 3}},
    "discrete": {"min_difficulty": 1, "max_difficulty": 3, "schedule_type": "fixed_discrete",
                 "schedule_config": {"difficulty": [1, 2, 3], "max_step": [5, 10]}},
}
steps = [0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 25, 50, 99, 100, 101, 29999, 30000, 59999, 60000, 70000]
out = {"deepspeed": tag, "curriculum": {}, "pld": {}}
for name, cfg in schedules.items():
    # The engine calls update_difficulty(global_steps + 1) before each
    # forward, global_steps counting the finished optimizer steps.
    s = cs.CurriculumScheduler(json.loads(json.dumps(cfg)))
    out["curriculum"][name] = {"config": cfg, "seqlen": [[f, s.update_difficulty(f + 1)] for f in steps]}
for theta, gamma in [(0.5, 0.001), (0.25, 0.1), (1.0, 0.01)]:
    p = pld.ProgressiveLayerDrop(theta=theta, gamma=gamma)
    rows = []
    for g in [0, 1, 2, 10, 100, 1000, 5000, 100000]:
        p.update_state(g)
        rows.append([g, float(p.get_theta())])
    out["pld"][f"{theta}_{gamma}"] = {"theta": theta, "gamma": gamma, "theta_at": rows}
json.dump(out, sys.stdout, separators=(",", ":"))
print()
