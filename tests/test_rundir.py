"""Run directory: whole-line appends, torn-line tolerance, never overwriting, resume trimming."""

import json
import os

import pytest

from local_grpo.errors import UserError
from local_grpo.rundir import METRICS, RunDir, read_jsonl


def test_append_and_read_back(tmp_path):
    run = RunDir.create(str(tmp_path / "r"))
    run.append(METRICS, {"step": 1, "reward": 0.5})
    run.append(METRICS, {"step": 2, "reward": 0.75, "note": "ünïcode"})
    assert [m["step"] for m in run.metrics()] == [1, 2]


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3, "rew')
    assert [r["step"] for r in read_jsonl(str(path))] == [1, 2]


def test_existing_run_dir_is_refused(tmp_path):
    target = tmp_path / "r"
    RunDir.create(str(target)).append(METRICS, {"step": 1})
    with pytest.raises(UserError, match="already exists"):
        RunDir.create(str(target))
    assert read_jsonl(str(target / METRICS)) == [{"step": 1}]


def test_overwrite_only_when_asked(tmp_path):
    target = tmp_path / "r"
    RunDir.create(str(target)).append(METRICS, {"step": 1})
    run = RunDir.create(str(target), overwrite=True)
    assert run.metrics() == []


def test_keep_steps_up_to_trims_later_steps_and_torn_lines(tmp_path):
    run = RunDir.create(str(tmp_path / "r"))
    for step in range(1, 6):
        run.append(METRICS, {"step": step})
    with open(run.file(METRICS), "a") as fh:
        fh.write('{"step": 6, "re')
    dropped = run.keep_steps_up_to(METRICS, 3)
    assert dropped == 3
    assert [m["step"] for m in run.metrics()] == [1, 2, 3]
    run.append(METRICS, {"step": 4})
    assert [m["step"] for m in run.metrics()] == [1, 2, 3, 4]


def test_last_checkpoint(tmp_path):
    run = RunDir.create(str(tmp_path / "r"))
    assert run.last_checkpoint() is None
    for step in (2, 10, 4):
        folder = os.path.join(run.checkpoints_dir, f"checkpoint-{step}")
        os.makedirs(folder)
        with open(os.path.join(folder, "trainer_state.json"), "w") as fh:
            json.dump({}, fh)
    os.makedirs(os.path.join(run.checkpoints_dir, "checkpoint-20"))  # incomplete: no trainer_state
    assert run.last_checkpoint().endswith("checkpoint-10")


def test_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        RunDir.create(str(blocker))
