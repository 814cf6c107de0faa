"""A disk that fills up mid-run (simulated with RLIMIT_FSIZE: writes past the limit fail with EFBIG,
as they would with ENOSPC on a full disk): one clear stderr line naming the file, the lines written
before survive, and a torn last line stays readable. Unwritable output folders and old-schema run
directories are in test_bad_input.py (output-under-a-file, output-in-proc, resume-old-schema)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from apps import runs
from local_grpo.rundir import RunDir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT_BYTES = 4000  # config.yaml fits; completions.jsonl (~1.5 KB a step) passes it during step 3


def test_disk_full_mid_run_is_one_clear_line_and_keeps_earlier_lines(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))

    command = [sys.executable, "-m", "local_grpo.cli", "train", "--model", tiny_model_dir, "--backend", "hf",
               "--num-train", "16", "--num-heldout", "4", "--num-generations", "4", "--per-device-train-batch-size", "8",
               "--max-completion-length", "12", "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
               "--max-steps", "8", "--save-steps", "100", "--p-ref-samples", "0", "--output", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                            preexec_fn=small_disk)

    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("local-grpo: error: cannot write ") and "File too large" in last, last
    assert str(run_dir / "completions.jsonl") in last and "--resume" in last

    run = RunDir.open(str(run_dir))
    assert os.path.getsize(run.file("completions.jsonl")) <= LIMIT_BYTES
    steps = sorted({c["step"] for c in run.completions()})
    assert steps and steps[0] == 1 and len(run.completions()) >= 8  # step 1's lines survived whole
    assert [m["step"] for m in run.metrics()] == list(range(1, len(run.metrics()) + 1))
    assert not os.path.exists(run.file("summary.json"))
    assert runs.run_status(run.path) in ("running", "stopped")
    assert not runs.completions_table(run.completions()).empty  # the torn last line does not break the app


def test_a_line_appended_after_a_torn_line_stays_whole(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    run.event("info", "first")
    with open(run.file("events.jsonl"), "a") as fh:
        fh.write('{"time": 1, "type": "info", "mess')  # the writer was killed mid-line
    reopened = RunDir.open(str(tmp_path / "run")) if os.path.exists(run.file("config.yaml")) else RunDir(run.path)
    reopened.event("info", "resumed from step 2")
    reopened.event("info", "third")
    assert [e["message"] for e in reopened.events()] == ["first", "resumed from step 2", "third"]
