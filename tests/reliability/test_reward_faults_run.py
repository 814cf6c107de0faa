"""Reward faults inside a real run (tiny model, real TRL steps): the run completes, every fault is in
events.jsonl, and the studio's run views (apps.runs) show them."""

from __future__ import annotations

import os

from apps import runs
from local_grpo import train
from local_grpo.train import run as train_run
from local_grpo.config import RewardSpec
from local_grpo.rundir import RunDir

FAULTY = '''
def boom(completions, **kwargs):
    raise ValueError("boom")

def forever(completions, **kwargs):
    while True:
        pass

def not_a_number(completions, **kwargs):
    return [float("nan")] * len(completions)

def too_short(completions, **kwargs):
    return [1.0]

def edited(completions, **kwargs):
    return [0.5] * len(completions)
'''
FORBIDDEN_CODE = "```python\nimport os\ndef f():\n    return 1\n```"


def code_tests_on_forbidden_code(rewards_module):
    """code_tests scoring a completion that imports `os` (a random tiny model never writes Python by itself)."""
    inner = rewards_module.registry.BUILTINS["code_tests"]()

    def code_tests(completions, **kwargs):
        n = len(completions)
        return inner([FORBIDDEN_CODE] * n, tests=[["assert f() == 1"]] * n)

    return rewards_module.SafeReward("code_tests", code_tests)


def test_a_run_survives_every_reward_fault_and_records_them(tiny_config, tmp_path, monkeypatch):
    import rewards

    reward_file = tmp_path / "faulty.py"
    reward_file.write_text(FAULTY)
    spec = str(reward_file)
    tiny_config.rewards = [
        RewardSpec("correct_numeric", 1.0),
        RewardSpec(f"{spec}:boom", 0.1),
        RewardSpec(f"{spec}:forever", 0.1, {"timeout_s": 1.0}),
        RewardSpec(f"{spec}:not_a_number", 0.1),
        RewardSpec(f"{spec}:too_short", 0.1),
        RewardSpec(f"{spec}:edited", 0.1),
        RewardSpec("code_tests", 0.1),
    ]
    tiny_config.grpo.max_steps = 3
    tiny_config.grpo.save_steps = 10
    tiny_config.grpo.p_ref_samples = 0

    real_get = rewards.get
    monkeypatch.setattr(rewards, "get", lambda name, **params: code_tests_on_forbidden_code(rewards)
                        if name == "code_tests" else real_get(name, **params))

    class EditingRecorder(train_run.RewardRecorder):
        """Breaks the reward file's syntax once step 1 has been scored (an edit during the run)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.on_scored.append(self.break_file_after_step_1)

        def break_file_after_step_1(self, step, records):
            if step == 1:
                before = os.stat(reward_file).st_mtime_ns
                reward_file.write_text(FAULTY.replace("def edited(completions, **kwargs):", "def edited(completions"))
                os.utime(reward_file, ns=(before + 10**9, before + 10**9))

    monkeypatch.setattr(train_run, "RewardRecorder", EditingRecorder)

    summary = train.train(tiny_config, progress=False)

    run = RunDir.open(tiny_config.output_dir)
    assert summary["steps"] == 3 and [m["step"] for m in run.metrics()] == [1, 2, 3]
    assert os.path.isfile(os.path.join(run.adapter_dir, "adapter_model.safetensors"))
    events = run.events()
    faults = {(e.get("reward"), e.get("kind")) for e in events if e["type"] == "reward_fault"}
    assert {("boom", "exception"), ("forever", "timeout"), ("not_a_number", "nan"), ("too_short", "wrong_length"),
            ("code_tests", "forbidden_import"), ("edited", "syntax_error")} <= faults, faults
    reloads = [e for e in events if e.get("kind") == "reward_reloaded"]  # one per reward of that file
    assert sorted(e["reward"] for e in reloads) == ["boom", "edited", "forever", "not_a_number", "too_short"]
    assert all(e["type"] == "info" and e["step"] == 2 for e in reloads)
    assert all("syntax error" in e["message"] and "faulty.py" in e["message"] for e in reloads)
    assert any(e["type"] == "alert" and e.get("reward") == "boom" for e in events)  # 3 all-failed calls in a row
    assert summary["reward_faults"] > 0

    # the studio's views of that run directory show the faults
    alerts = runs.alerts_table(events)
    shown = set(zip(alerts["reward"], alerts["type"]))
    for name in ("boom", "forever", "not_a_number", "too_short", "code_tests", "edited"):
        assert (name, "reward_fault") in shown, name
    assert "reward_reloaded" not in set(alerts["type"]) and any("changed: syntax error" in m for m in alerts["message"])
    faults_view = runs.completions_table(run.completions(), view="faults")
    assert len(faults_view) > 0 and (faults_view["boom"] == "fault").all()
    assert "reward fault(s)" in runs.run_overview(run.path, run.metrics(), events)
