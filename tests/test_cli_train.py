"""`local-grpo train` through the CLI in subprocesses: the Unsloth backend (it patches TRL globally,
so it never runs in the test process) and the embedded SmolLM2 end to end."""

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--task", "arithmetic", "--num-train", "16", "--num-heldout", "4", "--num-generations", "4",
        "--per-device-train-batch-size", "8", "--max-steps", "2", "--save-steps", "1"]


def run_cli(args, cwd, timeout=900):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "local_grpo.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_trained_run(run_dir, steps):
    metrics = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    assert "success" in metrics[-1] and "reward" in metrics[-1]
    completions = open(os.path.join(run_dir, "completions.jsonl")).read().splitlines()
    assert completions and all(json.loads(line)["rewards"] for line in completions)
    tensors = load_file(os.path.join(run_dir, "adapter", "adapter_model.safetensors"))
    zero_std = [m.get("frac_reward_zero_std") for m in metrics]
    assert any(t.abs().sum() > 0 for name, t in tensors.items() if "lora_B" in name), \
        f"LoRA weights did not move (fraction of groups with equal rewards per step: {zero_std})"


def test_unsloth_backend_trains_in_a_subprocess(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(["train", "--backend", "unsloth", "--model", tiny_model_dir, *FAST,
                      "--max-completion-length", "12", "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
                      "--learning-rate", "0.01", "--output", str(run_dir), "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["backend"] == "unsloth" and summary["steps"] == 2
    assert_trained_run(run_dir, 2)


@pytest.mark.e2e
def test_embedded_smollm2_trains_through_the_cli(tmp_path):
    # the quickstart's own recipe for 2 steps: its one-line system prompt gives the base model groups with
    # reward variance from step 1 (the task's default prompt at a short cap can give 16 equal rewards, and
    # then no gradient: whether that happens depends on the CPU's numerics, bf16 or fp32)
    run_dir = tmp_path / "run"
    result = run_cli(["train", "--config", os.path.join(REPO, "configs", "cpu-quickstart.yaml"), "--backend", "hf",
                      "--max-steps", "2", "--save-steps", "1", "--output", str(run_dir)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "success" in result.stdout and str(run_dir) in result.stdout
    assert_trained_run(run_dir, 2)
    config = open(os.path.join(run_dir, "config.yaml")).read()
    assert "name: embedded" in config


# Bad train input (one stderr line, exit 2, nothing written): the table in tests/reliability/test_bad_input.py.


def test_report_to_tensorboard_wandb_and_trackio_through_grpo_trl(tiny_model_dir, tmp_path):
    """`--trl report_to=[...]` reaches TRL: each tracker writes its local files (all offline)."""
    import glob

    run_dir = tmp_path / "run"
    env_extra = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "TRACKIO_DIR": str(tmp_path / "trackio"),
                 "WANDB_SILENT": "true"}
    os.makedirs(env_extra["WANDB_DIR"])
    args = ["train", "--model", tiny_model_dir, "--backend", "hf", *FAST, "--max-steps", "1", "--max-completion-length", "8",
            "--max-seq-length", "128", "--lora-r", "4", "--p-ref-samples", "0", "--output", str(run_dir), "--json",
            "--trl", "report_to=[tensorboard, wandb, trackio]"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": REPO, **env_extra}
    result = subprocess.run([sys.executable, "-m", "local_grpo.cli", *args], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["steps"] == 1  # stdout stays one JSON object with trackers on
    assert glob.glob(str(run_dir / "**" / "events.out.tfevents.*"), recursive=True), "no TensorBoard event file"
    assert glob.glob(str(tmp_path / "wandb" / "wandb" / "offline-run-*")), "no offline W&B run"
    assert glob.glob(str(tmp_path / "trackio" / "*.db")), "no trackio database"
