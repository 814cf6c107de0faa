"""Run directory: whole-line appends, torn-line tolerance, never overwriting, resume trimming."""

import json
import re
import os

import pytest

from local_grpo.errors import UserError
from local_grpo.rundir import METRICS, REWARD_CODE, RunDir, read_jsonl


def test_append_and_read_back(tmp_path):
    run = RunDir.create(str(tmp_path / "r"))
    run.append(METRICS, {"step": 1, "reward": 0.5})
    run.append(METRICS, {"step": 2, "reward": 0.75, "note": "ünïcode"})
    assert [m["step"] for m in run.metrics()] == [1, 2]


def test_append_all_writes_whole_lines_after_a_torn_one(tmp_path):
    from local_grpo.rundir import COMPLETIONS

    run = RunDir.create(str(tmp_path / "r"))
    with open(run.file(COMPLETIONS), "w") as fh:  # a writer killed mid-line
        fh.write('{"step": 1}\n{"step": 1, "compl')
    run.append_all(COMPLETIONS, [{"step": 2, "i": i} for i in range(3)])
    run.append_all(COMPLETIONS, [])
    assert [(r["step"], r.get("i")) for r in run.completions()] == [(1, None), (2, 0), (2, 1), (2, 2)]


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


# --- the documented contract ---------------------------------------------------------------

def _doc_section(title: str) -> str:
    import pathlib

    text = (pathlib.Path(__file__).parents[1] / "docs" / "run-directory.md").read_text(encoding="utf-8")
    if not title:
        return text
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


@pytest.mark.parametrize("title,record", [
    ("MetricsRecord", "MetricsRecord"), ("CompletionRecord", "CompletionRecord"), ("EventRecord", "EventRecord"),
    ("RewardFileRecord", "RewardFileRecord"), ("BaseModelRecord", "BaseModelRecord"), ("BestRecord", "BestRecord")])
def test_docs_list_every_field_of_each_record(title, record):
    import dataclasses

    from local_grpo import rundir

    section = _doc_section(title)
    documented = set(re.findall(r"^\| `([a-z_0-9]+)` \|", section, flags=re.MULTILINE))
    assert documented == {f.name for f in dataclasses.fields(getattr(rundir, record))}


def test_docs_list_every_file_and_event_type():
    from local_grpo import rundir

    files = _doc_section("Files")
    documented = set(re.findall(r"^\| `([a-z_.]+)/?` \|", files, flags=re.MULTILINE))
    assert documented == set(rundir.FILES)
    events = _doc_section("EventRecord")
    assert all(f"`{kind}`" in events for kind in rundir.EVENT_TYPES)


def test_only_rundir_names_the_run_directory_files():
    """File names are string literals in rundir.py alone (the app, eval, export and predict use its constants)."""
    import ast
    import pathlib

    from local_grpo import rundir

    root = pathlib.Path(__file__).parents[1]
    names = set(rundir.FILES) - {rundir.ADAPTER, rundir.CHECKPOINTS}
    offenders = []
    for path in [*root.glob("local_grpo/**/*.py"), *root.glob("apps/**/*.py")]:
        if path.name == "rundir.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                offenders.append(f"{path.relative_to(root)}:{node.lineno} {node.value}")
    assert offenders == []


def test_completion_records_round_trip_as_documented(tmp_path):
    from local_grpo import rundir

    run = rundir.RunDir.create(str(tmp_path / "run"))
    record = rundir.CompletionRecord(step=1, prompt="What is 2 + 2?", completion="Answer: 4", answer="4",
                                     rewards={"correct_numeric": 1.0, "format_soft": None}, total=1.0, success=1)
    run.append(rundir.COMPLETIONS, record.to_json())
    assert run.completions() == [record.to_json()]
    metrics = rundir.MetricsRecord(step=3, time=1.5, success=0.25, values={"reward": 0.5}).to_json()
    assert metrics == {"step": 3, "reward": 0.5, "success": 0.25, "time": 1.5}


def test_reward_file_versions_are_kept_once_per_content(tmp_path):
    import hashlib

    run = RunDir.create(str(tmp_path / "r"))
    first = b"def f(completions, **kw):\n    return [0.0] * len(completions)\n"
    second = first.replace(b"0.0", b"1.0")
    assert run.keep_reward_file("rw/mine.py:f", first, 1)["file"] == f"reward_code/{hashlib.sha256(first).hexdigest()[:16]}-mine.py"
    assert run.keep_reward_file("rw/mine.py:f", first, 3) is None  # unchanged: no second entry
    run.keep_reward_file("rw/mine.py:g", first, 1)  # another function of the same file shares the copy
    run.keep_reward_file("rw/mine.py:f", second, 4)
    entries = run.reward_files()
    assert [(e["spec"], e["first_step"]) for e in entries] == [("rw/mine.py:f", 1), ("rw/mine.py:g", 1), ("rw/mine.py:f", 4)]
    assert [e["sha256"] for e in entries] == [hashlib.sha256(c).hexdigest() for c in (first, first, second)]
    assert len(os.listdir(run.file(REWARD_CODE))) == 2
    for entry in entries:
        with open(run.file(entry["file"]), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == entry["sha256"]
    # --resume from step 3: the version first used at step 4 is dropped with its copy
    assert run.keep_reward_files_up_to(3) == 1
    assert [e["first_step"] for e in run.reward_files()] == [1, 1]
    assert len(os.listdir(run.file(REWARD_CODE))) == 1
