"""kill -9 of `local-grpo train` mid-run, then `train --resume`: no duplicated or missing steps, torn
last lines tolerated by every reader, and the same final adapter as an uninterrupted run (same seed).

Both runs go through the CLI in subprocesses with the same environment (one thread each), started
together so the two cores are used at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
from safetensors.torch import load_file

from apps import runs
from local_grpo import cli
from local_grpo.rundir import RunDir, read_jsonl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS, SAVE_STEPS = 4, 2


def train_command(model_dir, run_dir, *extra):
    return [sys.executable, "-m", "local_grpo.cli", "train", "--model", model_dir, "--backend", "hf",
            "--task", "arithmetic", "--num-train", "16", "--num-heldout", "4", "--num-generations", "4",
            "--per-device-train-batch-size", "8", "--max-completion-length", "12", "--max-seq-length", "128",
            "--lora-r", "4", "--lora-alpha", "8", "--learning-rate", "0.01", "--max-steps", str(STEPS),
            "--save-steps", str(SAVE_STEPS), "--p-ref-samples", "0", "--output", str(run_dir), "--json", *extra]


def env():
    return {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def steps_in(path):
    return [r["step"] for r in read_jsonl(path)]


def wait_for(condition, process, timeout=600):
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, "training ended before it could be killed"
        assert time.time() < deadline, "timed out waiting for the run"
        time.sleep(0.1)


def test_kill_9_then_resume_loses_nothing_and_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, capsys):
    killed_dir, reference_dir = tmp_path / "killed", tmp_path / "reference"
    reference = subprocess.Popen(train_command(tiny_model_dir, reference_dir), env=env(), cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = subprocess.Popen(train_command(tiny_model_dir, killed_dir), env=env(), cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed_dir / "checkpoints" / f"checkpoint-{SAVE_STEPS}" / "trainer_state.json"
    completions = str(killed_dir / "completions.jsonl")
    # kill once the checkpoint exists and the next step has been scored (work past the checkpoint is lost)
    wait_for(lambda: checkpoint.exists() and SAVE_STEPS + 1 in steps_in(completions), victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    run = RunDir.open(str(killed_dir))
    assert not os.path.exists(run.file("summary.json"))

    # a writer killed mid-line leaves a torn last line: every reader must skip it
    for name in ("metrics.jsonl", "completions.jsonl", "events.jsonl"):
        with open(run.file(name), "a") as fh:
            fh.write('{"step": 99, "completion": "torn li')
    metrics = run.metrics()
    assert metrics and all(m["step"] != 99 for m in metrics)
    table = runs.runs_table(str(tmp_path))
    assert int(table.loc[table["run"] == "killed", "steps"].iloc[0]) == metrics[-1]["step"]
    assert not runs.curve_frames(metrics)["reward"].empty
    assert not runs.completions_table(run.completions(), view="latest").empty
    assert isinstance(runs.alerts_table(run.events()), pd.DataFrame)
    capsys.readouterr()
    assert cli.main(["rewards", "score", "--rewards", "correct_numeric", "--completions", completions, "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored  # the torn line was skipped, not an error
    assert cli.main(["predict", "--from-run", str(killed_dir), "--beta", "0.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)

    lines_before = {name: sum(1 for _ in open(run.file(name))) for name in ("metrics.jsonl", "completions.jsonl")}
    resumed = subprocess.run(train_command(tiny_model_dir, killed_dir, "--resume"), env=env(), cwd=tmp_path,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out, err = reference.communicate(timeout=900)
    assert reference.returncode == 0, err[-3000:]

    # no duplicated or missing steps; the resumed run redid only the steps after the checkpoint
    assert [m["step"] for m in run.metrics()] == list(range(1, STEPS + 1))
    per_step = pd.Series([c["step"] for c in run.completions()]).value_counts().sort_index()
    assert list(per_step.index) == list(range(1, STEPS + 1)) and (per_step == 8).all()
    assert any("resumed from step 2" in e["message"] for e in run.events())
    redone = lines_before["metrics.jsonl"] - 1 - SAVE_STEPS  # metric lines past the checkpoint, dropped on resume
    assert redone <= STEPS - SAVE_STEPS

    # same seed, same final adapter (the checkpoint restores optimizer, scheduler, sampler and RNG state)
    killed_adapter = load_file(str(killed_dir / "adapter" / "adapter_model.safetensors"))
    reference_adapter = load_file(str(reference_dir / "adapter" / "adapter_model.safetensors"))
    assert killed_adapter.keys() == reference_adapter.keys()
    max_diff = max((killed_adapter[k] - reference_adapter[k]).abs().max().item() for k in killed_adapter)
    assert max_diff == 0.0, f"adapters differ by up to {max_diff}"
    completions_a = [(c["step"], c["completion"]) for c in run.completions()]
    completions_b = [(c["step"], c["completion"]) for c in RunDir(str(reference_dir)).completions()]
    assert completions_a == completions_b
