"""bench/gpu_plan_check.py on the CPU: its dry run (items, commands, caps, plans), and one item's
child process, stdout parsing and judgement on a real export of the tiny run."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_plan_check", os.path.join(REPO, "bench", "gpu_plan_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_dry_run_plans_every_item_of_the_issue(check, tmp_path):
    out = tmp_path / "report.json"
    assert check.main(["--dry-run", "--out", str(out), "--workdir", str(tmp_path / "work")]) == 0
    report = json.loads(out.read_text())
    items = {row["item"]: row for row in report["items"]}
    assert {"train-hf-8gb", "train-unsloth-8gb", "train-hf-kl-mirror-8gb", "export-lora", "export-merged16",
            "export-gguf"} <= set(items)
    assert {row["cap_gb"] for row in report["items"]} == {8, 16}
    assert all(row["command"].startswith("local-grpo ") and row["command"].endswith("--json") for row in report["items"])
    assert items["train-unsloth-8gb"]["backend"] == "unsloth" and items["train-hf-kl-mirror-8gb"]["backend"] == "hf"
    for name in ("train-hf-8gb", "train-unsloth-8gb", "train-hf-kl-mirror-8gb"):
        assert items[name]["plan"]["fits"] and items[name]["plan"]["total_gb"] < 8  # the 8gb recipe, 0.5B shape

    config = (tmp_path / "work" / "configs" / "train-hf-kl-mirror-8gb.yaml").read_text()
    assert "kl: mirror" in config and "preset: 8gb" in config and "shared" not in config
    data = [json.loads(line) for line in open(tmp_path / "work" / "gsm8k-tiny.jsonl")]
    assert len(data) >= 56 and all("####" in row["answer"] for row in data)  # num_train 48 + num_heldout 8


def test_budget_and_item_selection(check, tmp_path, monkeypatch):
    args = check.parse_args(["--items", "train-hf-8gb,export-lora", "--budget-s", "0", "--workdir", str(tmp_path)])
    args.dry_run = False
    monkeypatch.setattr(check, "prepare", lambda workdir, items, build_model: {"model_dir": str(tmp_path / "model")})
    report = check.run_check(args)
    assert [r["item"] for r in report["items"]] == ["train-hf-8gb", "export-lora"]
    assert report["summary"]["skipped"] == 2  # nothing starts once the budget is spent
    with pytest.raises(SystemExit):
        check.parse_args(["--items", "train-everything"])


def test_an_export_item_runs_in_a_child_and_is_judged(check, trained_tiny_run, tmp_path):
    workdir = tmp_path / "work"
    shutil.copytree(trained_tiny_run, check.run_dir("train-hf-8gb", str(workdir)))
    os.makedirs(workdir / "measure")
    item = next(i for i in check.ITEMS if i.name == "export-lora")
    row = check.judge(item, check.run_item(item, str(workdir), timeout_s=600), str(workdir))
    assert row["rc"] == 0, row.get("stderr_tail")
    assert row["stdout_is_one_json_object"] and row["passed"] and row["verification"]["failed"] == []
    assert row["measured"]["cap_gb"] == 16 and row["measured"]["rc"] == 0


def test_a_train_item_is_judged_from_its_run_directory(check, trained_tiny_run, tmp_path):
    workdir = tmp_path / "work"
    shutil.copytree(trained_tiny_run, check.run_dir("train-hf-8gb", str(workdir)))
    summary = json.loads((workdir / "runs" / "train-hf-8gb" / "summary.json").read_text())
    item = check.ITEMS[0]
    row = {"rc": 0, "stdout_is_one_json_object": True, "stdout_json": summary, "measured": {"peak_reserved_gb": 2.0}}
    judged = check.judge(item, row, str(workdir))
    assert judged["passed"] and judged["steps"] == 2 and judged["step_seconds"] > 0
    assert judged["plan"]["total_gb"] > 0 and judged["plan_over_measured"] > 0
