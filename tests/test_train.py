"""Real GRPO steps on the tiny model: run-directory contents, LoRA weights moving, resume, live weights."""

import json
import os

import pytest
from safetensors.torch import load_file

from local_grpo import backends, rundir, train
from local_grpo.errors import UserError
from local_grpo.rundir import RunDir


def _adapter_tensors(run_dir):
    return load_file(os.path.join(run_dir, "adapter", "adapter_model.safetensors"))


def test_hf_backend_trains_and_writes_the_run_directory(tiny_config):
    summary = train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    for name in ("config.yaml", "metrics.jsonl", "completions.jsonl", "events.jsonl", "summary.json"):
        assert os.path.isfile(run.file(name)), name
    assert os.path.isfile(os.path.join(run.adapter_dir, "adapter_config.json"))
    assert run.last_checkpoint() is not None

    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    for key in ("reward", "reward_std", "rewards/correct_numeric/mean", "rewards/format_soft/mean",
                "frac_reward_zero_std", "completions/mean_length", "success", "time"):
        assert key in metrics[0], key

    completions = run.completions()
    g = tiny_config.grpo
    assert len(completions) == 2 * g.per_device_train_batch_size
    first = completions[0]
    assert set(first) >= {"step", "prompt", "completion", "answer", "rewards", "total", "success"}
    assert set(first["rewards"]) == {"correct_numeric", "format_soft"}
    expected_total = first["rewards"]["correct_numeric"] * 1.0 + first["rewards"]["format_soft"] * 0.2
    assert first["total"] == pytest.approx(expected_total, abs=1e-5)
    assert first["prompt"].startswith("What is ")

    # the LoRA B matrices start at zero; after two steps with graded rewards they must have moved
    tensors = _adapter_tensors(tiny_config.output_dir)
    lora_b = [t for name, t in tensors.items() if "lora_B" in name]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b)
    assert summary["steps"] == 2 and summary["run_dir"] == run.path
    # what the run computed in: bf16 autocast where this CPU has native bf16 (auto), else fp32 (None)
    assert summary["cpu_autocast"] == ("bfloat16" if backends.cpu_bf16_flags() else None)


def test_extra_callbacks_run_after_ours_at_every_step(tiny_config):
    from transformers import TrainerCallback

    class Seen(TrainerCallback):
        def __init__(self):
            self.begun, self.logged_lines, self.fused = [], [], []

        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            self.begun.append(state.global_step)
            self.fused.append(optimizer.defaults.get("fused"))

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:  # a step's row: ours has written its metrics line by now
                self.logged_lines.append(len(RunDir.open(tiny_config.output_dir).metrics()))

    seen = Seen()
    train.train(tiny_config, progress=False, callbacks=[seen])
    assert seen.begun == [0, 1]
    assert seen.logged_lines == [1, 2]
    assert seen.fused == [True, True]  # grpo.optim's default, adamw_torch_fused, as TRL's own default


def test_existing_run_directory_is_never_overwritten(tiny_config):
    os.makedirs(tiny_config.output_dir)
    marker = os.path.join(tiny_config.output_dir, "keep.txt")
    with open(marker, "w") as fh:
        fh.write("precious")
    with pytest.raises(UserError, match="already exists"):
        train.train(tiny_config, progress=False)
    assert open(marker).read() == "precious"
    assert not os.path.exists(os.path.join(tiny_config.output_dir, "config.yaml"))


def test_resume_continues_from_the_last_checkpoint(tiny_config):
    tiny_config.grpo.max_steps = 2
    train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    # simulate a crash after step 2's checkpoint: a torn line and a step past the checkpoint
    with open(run.file(rundir.METRICS), "a") as fh:
        fh.write(json.dumps({"step": 3, "reward": 0.0}) + "\n" + '{"step": 4, "rew')
    tiny_config.grpo.max_steps = 4
    train.train(tiny_config, resume=True, progress=False)
    steps = [m["step"] for m in run.metrics()]
    assert steps == [1, 2, 3, 4]
    assert sorted({c["step"] for c in run.completions()}) == [1, 2, 3, 4]
    assert any("resumed from step 2" in e["message"] for e in run.events())


def _snapshot(folder) -> dict:
    """{relative path: (size, mtime_ns)} of every file under a run directory."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.stat(path)
            out[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return out


def test_resume_of_a_finished_run_changes_nothing_and_a_larger_max_steps_extends_exactly(tiny_config, capsys):
    from local_grpo import cli

    tiny_config.grpo.max_steps, tiny_config.grpo.save_steps, tiny_config.grpo.p_ref_samples = 4, 2, 0
    train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    before = _snapshot(run.path)

    for max_steps in (4, 3):  # the same or a smaller --max-steps: already complete
        tiny_config.grpo.max_steps = max_steps
        summary = train.train(tiny_config, resume=True, progress=False)
        assert summary["already_complete"] and summary["checkpoint_step"] == 4 and summary["steps"] == 4
    assert "already complete (step 4 of max_steps 4)" in train.format_summary(summary)
    # plain --resume keeps the run's own max_steps (not the default 40)
    assert cli.main(["train", "--model", tiny_config.model.name, "--output", run.path, "--resume"]) == 0
    assert "is already complete" in capsys.readouterr().out
    assert _snapshot(run.path) == before

    tiny_config.grpo.max_steps = 6
    summary = train.train(tiny_config, resume=True, progress=False)
    assert summary["steps"] == 6 and not summary.get("already_complete")
    assert [m["step"] for m in run.metrics()] == [1, 2, 3, 4, 5, 6]
    assert sorted({c["step"] for c in run.completions()}) == [1, 2, 3, 4, 5, 6]
    assert os.path.basename(run.last_checkpoint()) == "checkpoint-6"


def test_weights_changed_event(tiny_config):
    from local_grpo.train.callbacks import RunDirCallback
    from local_grpo.train.recorder import RewardRecorder

    run = RunDir.create(tiny_config.output_dir)
    import rewards

    fns = [rewards.get("correct_numeric"), rewards.get("format_soft")]
    recorder = RewardRecorder(run, fns, [1.0, 0.2], fns[0])
    callback = RunDirCallback(run, recorder, tiny_config, progress=False)
    run.write_json(rundir.CONTROL, {"weights": {"format_soft": 0.0, "nonexistent": 1.0}})
    callback.apply_control()
    assert recorder.weights == [1.0, 0.0]
    kinds = [e["type"] for e in run.events()]
    assert "weights_changed" in kinds and "warning" in kinds
    callback.apply_control()  # unchanged file: nothing new
    assert len(run.events()) == 2


def test_weight_zero_reward_is_logged_but_not_trained(tiny_config):
    from local_grpo.config import RewardSpec

    tiny_config.rewards = [RewardSpec("correct_numeric", 1.0), RewardSpec("format_soft", 0.0)]
    tiny_config.grpo.max_steps = 1
    train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    record = run.completions()[0]
    assert "format_soft" in record["rewards"]
    assert record["total"] == pytest.approx(record["rewards"]["correct_numeric"])
    assert "rewards/format_soft/mean" in run.metrics()[0]


def test_bad_reward_name_fails_before_loading_the_model(tiny_config):
    from local_grpo.config import RewardSpec

    tiny_config.rewards = [RewardSpec("no_such_reward", 1.0)]
    with pytest.raises(UserError, match=r"rewards\[0\]"):
        train.train(tiny_config, progress=False)
    assert not os.path.exists(tiny_config.output_dir)


def test_two_rewards_with_one_name_keep_apart_under_unique_keys(tiny_config):
    """format_soft twice (different params, weights 1 and 10): both scores kept, the total weighs both."""
    import rewards
    from local_grpo.config import RewardSpec
    from local_grpo.train.recorder import RewardRecorder

    fns = [rewards.get("format_soft"), rewards.get("format_soft", scale=0.5)]
    recorder = RewardRecorder(None, fns, [1.0, 10.0], rewards.get("correct_numeric"))
    assert recorder.names == ["format_soft", "format_soft#2"]
    seen = []
    recorder.on_scored.append(lambda step, records: seen.extend(records))
    completions = [[{"role": "assistant", "content": "2 + 2 = 4\nAnswer: 4"}]]
    for wrapped in recorder.wrapped():
        wrapped(completions, prompts=[[{"role": "user", "content": "What is 2 + 2?"}]], answer=["4"])
    first, second = seen[0]["rewards"]["format_soft"], seen[0]["rewards"]["format_soft#2"]
    assert second == pytest.approx(first / 2) and first > 0
    assert seen[0]["total"] == pytest.approx(first + 10 * second)

    tiny_config.rewards = [RewardSpec("format_soft", 1.0), RewardSpec("format_soft", 10.0, {"scale": 0.5})]
    tiny_config.grpo.max_steps, tiny_config.grpo.p_ref_samples = 1, 0
    train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    assert {"rewards/format_soft/mean", "rewards/format_soft#2/mean"} <= set(run.metrics()[0])
    for record in run.completions():
        scores = record["rewards"]
        assert set(scores) == {"format_soft", "format_soft#2"}
        assert record["total"] == pytest.approx(scores["format_soft"] + 10 * scores["format_soft#2"], abs=1e-5)
