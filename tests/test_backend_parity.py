"""One config trains the same on both backends: the GRPOConfig each backend builds, compared field by field.

Unsloth rewrites GRPOConfig's defaults on a GPU (unsloth/models/rl.py); on a CPU-only machine its
import takes a CPU fallback that leaves TRL alone. Each child process below builds our GRPOConfig
with `train.trainer.grpo_args`; the Unsloth one first sets UNSLOTH_ALLOW_CPU=1 (Unsloth's own switch that
imports its GPU code path without a GPU) and applies the GRPO patch its GPU import applies
(`_patch_trl_rl_trainers("grpo_trainer")`, called by PatchFastRL). Unsloth never enters this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent('''
    import json, os, sys
    backend, run_dir = sys.argv[1], sys.argv[2]
    from local_grpo.output import stdout_to_stderr
    if backend == "unsloth":
        os.environ["UNSLOTH_ALLOW_CPU"] = "1"
        with stdout_to_stderr():
            import unsloth  # noqa: F401
            from unsloth.models import rl
            rl._patch_trl_rl_trainers("grpo_trainer")
    from local_grpo.config import RewardSpec, from_dict
    from local_grpo.presets import apply_preset
    from local_grpo.train import trainer

    config = from_dict(apply_preset("8gb", {"grpo": {"learning_rate": 5e-6, "beta": 0.0, "loss_type": "dapo"}}))
    config.rewards = [RewardSpec("correct_math", 1.0), RewardSpec("format_soft", 0.2)]
    args = trainer.grpo_args(config, run_dir, on_cuda=False, backend=backend)
    classes = [f"{c.__module__}.{c.__qualname__}" for c in type(args).__mro__]
    print(json.dumps({"classes": classes, "fields": args.to_dict()}, default=str))
''')

# Fields allowed to differ: none of them changes what is trained.
NOT_TRAINING = {
    "output_dir",  # each child writes its own run directory
    "gradient_checkpointing",  # Unsloth applies its own ("unsloth") in get_peft_model, so TRL's stays off there
    "logging_nan_inf_filter",  # logging only
    "per_device_eval_batch_size", "eval_accumulation_steps",  # we never evaluate inside the trainer
    "torch_empty_cache_steps",  # Unsloth empties the CUDA cache every 250 steps: memory housekeeping
    "generation_kwargs",  # None (TRL) and {} (Unsloth) both add nothing
}


def build_configs(tmp_path) -> dict:
    env = {**os.environ, "PYTHONPATH": REPO, "UNSLOTH_DISABLE_STATISTICS": "1", "HF_HUB_OFFLINE": "1"}
    procs = {b: subprocess.Popen([sys.executable, "-c", CHILD, b, str(tmp_path / b)], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for b in ("hf", "unsloth")}
    results = {}
    for backend, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        results[backend] = (out, err)
    return results


def test_both_backends_build_the_same_grpo_config(tmp_path):
    results = build_configs(tmp_path)
    hf, unsloth = (json.loads(results[b][0]) for b in ("hf", "unsloth"))  # stdout: exactly one JSON object each
    assert "unsloth_num_chunks" in unsloth["fields"], f"no Unsloth GRPOConfig in the child: {unsloth['classes']}"
    a, b = hf["fields"], unsloth["fields"]
    different = {k: (a[k], b[k]) for k in set(a) & set(b) - NOT_TRAINING if a[k] != b[k]}
    assert different == {}, f"fields that train differently: {different}"
    for key, value in (("mask_truncated_completions", False), ("weight_decay", 0.0), ("epsilon_high", 0.2),
                       ("loss_type", "dapo"), ("beta", 0.0), ("learning_rate", 5e-6)):
        assert a[key] == b[key] == value, key
