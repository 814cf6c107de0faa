"""A real tiny-model run that edits its user reward file twice and evaluates every 2 steps:
the run keeps each reward-file version with the step it became active, export lists them in the model
card, and eval/pass@1 is on the lines of the eval steps only."""

from __future__ import annotations

import hashlib
import os

import pytest

from conftest import make_tiny_config
from local_grpo import export, rundir, train
from local_grpo.config import RewardSpec
from local_grpo.rundir import RunDir
from local_grpo.train import run as train_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VERSIONS = [  # the file's content from the start, after step 1 is scored, after step 2 is scored
    "def mine(completions, **kwargs):\n    return [0.0] * len(completions)\n",
    "def mine(completions, **kwargs):\n    return [0.5] * len(completions)\n",
    "def mine(completions, **kwargs):\n    return [1.0] * len(completions)\n",
]


def write_version(path, text: str) -> None:
    """Rewrite the file and move its mtime on by a second (an edit the runner cannot miss)."""
    before = os.stat(path).st_mtime_ns if os.path.exists(path) else 0
    path.write_text(text)
    if before:
        os.utime(path, ns=(before + 10**9, before + 10**9))


@pytest.fixture(scope="module")
def edited_run(tiny_model_dir, tmp_path_factory):
    """3 steps; `mine` (the success reward) is edited after steps 1 and 2 are scored; eval every 2 steps."""
    folder = tmp_path_factory.mktemp("record")
    reward_file = folder / "my_reward.py"
    write_version(reward_file, VERSIONS[0])
    spec = f"{reward_file}:mine"
    config = make_tiny_config(tiny_model_dir, str(folder / "run"), steps=3, save_steps=10, max_completion_length=8)
    config.rewards = [RewardSpec("correct_numeric", 1.0), RewardSpec(spec, 0.5)]
    config.success_reward = spec
    config.grpo.p_ref_samples = 0
    config.grpo.eval_steps, config.grpo.eval_prompts = 2, 3

    class EditingRecorder(train_run.RewardRecorder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.on_scored.append(lambda step, records: write_version(reward_file, VERSIONS[step]) if step < 3 else None)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_run, "RewardRecorder", EditingRecorder)
        train.train(config, progress=False)
    return RunDir.open(config.output_dir), spec


def test_each_reward_file_version_is_kept_with_its_first_step(edited_run):
    run, spec = edited_run
    entries = run.reward_files()
    # v2 is picked up by step 2's scoring; v3 by the eval after step 2, so step 3 is its first training step
    assert [(e["spec"], e["first_step"]) for e in entries] == [(spec, 1), (spec, 2), (spec, 3)]
    for entry, text in zip(entries, VERSIONS):
        digest = hashlib.sha256(text.encode()).hexdigest()
        assert entry["sha256"] == digest and entry["file"] == f"{rundir.REWARD_CODE}/{digest[:16]}-my_reward.py"
        with open(run.file(entry["file"]), encoding="utf-8") as fh:
            assert fh.read() == text
    # the scores agree with the versions the record names
    by_step = {}
    for c in run.completions():
        by_step.setdefault(c["step"], set()).add(c["rewards"]["mine"])
    assert by_step == {1: {0.0}, 2: {0.5}, 3: {1.0}}
    reloads = sorted(e["step"] for e in run.events() if e.get("kind") == "reward_reloaded")
    assert reloads[0] == 2 and reloads[-1] == 3


def test_eval_pass_at_1_is_logged_on_eval_steps_only(edited_run):
    run, _ = edited_run
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert [m["step"] for m in metrics if "eval/pass@1" in m] == [2]
    step_2 = metrics[1]
    assert step_2["eval/pass@1"] == 1.0  # judged by v3 of the success reward, which scores every completion 1.0
    assert step_2["eval/seconds"] >= 0
    assert [m["success"] for m in metrics] == [0.0, 0.0, 1.0]  # training's own success, from v1, v2, v3


def test_export_card_lists_the_reward_code(edited_run, tmp_path):
    run, spec = edited_run
    out = tmp_path / "lora"
    export.export_run(run.path, "lora", str(out), verify_prompts=0)
    card = (out / "README.md").read_text()
    assert "## Reward code" in card
    for entry in run.reward_files():
        assert f"| `{spec}` | {entry['first_step']} | `{entry['sha256']}` | `{entry['file']}` |" in card


def test_held_out_eval_matches_the_eval_greedy_path_and_leaves_training_as_it_was(tiny_model_dir):
    """HeldOutEval's pass@1 equals local_grpo.evaluate's pass@1_greedy; train mode and the RNG stream are restored."""
    import torch

    import rewards
    from local_grpo import backends, data, evaluate
    from local_grpo.tasks import RewardSet, fill_defaults
    from local_grpo.train.held_out_eval import HeldOutEval
    from local_grpo.train.recorder import RewardRecorder

    config = fill_defaults(make_tiny_config(tiny_model_dir, "unused", max_completion_length=6))
    config.grpo.eval_steps, config.grpo.eval_prompts = 3, 4
    _, held_out = data.load_examples(config)
    loaded = backends.load_for_inference(config, None)
    # the random tiny model's greedy text is the same for every prompt, so the judge looks at the answer column:
    # prompts with an even gold answer pass (which also checks that each row's columns reach the reward in order)
    even = rewards.SafeReward("even_answer", lambda completions, answer, **kw: [float(int(a) % 2 == 0) for a in answer])
    share_even = sum(int(row["answer"]) % 2 == 0 for row in held_out[:4]) / 4
    assert 0 < share_even < 1
    hook = HeldOutEval(loaded.model, loaded.tokenizer, held_out, RewardRecorder(None, [], [], even), config)

    loaded.model.train()
    rng = torch.random.get_rng_state()
    assert hook(2) == {} and hook(4) == {}
    logged = hook(3)
    assert loaded.model.training and torch.equal(rng, torch.random.get_rng_state())
    expected, _ = evaluate.evaluate(loaded.model, loaded.tokenizer, held_out[:4], RewardSet([even], [1.0], even),
                                    evaluate.EvalSettings(samples=0, max_new_tokens=6), progress=False)
    assert logged["eval/pass@1"] == expected["pass@1_greedy"] == share_even
    loaded.model.eval()
    hook(6)
    assert not loaded.model.training


def test_resume_records_the_reward_file_as_it_is_at_the_resume(tiny_model_dir, tmp_path):
    reward_file = tmp_path / "my_reward.py"
    write_version(reward_file, VERSIONS[0])
    spec = f"{reward_file}:mine"
    config = make_tiny_config(tiny_model_dir, str(tmp_path / "run"), steps=2, save_steps=2, max_completion_length=8)
    config.rewards = [RewardSpec("correct_numeric", 1.0), RewardSpec(spec, 0.5)]
    config.grpo.p_ref_samples = 0
    train.train(config, progress=False)
    run = RunDir.open(config.output_dir)
    # a version first used after the step-2 checkpoint (the run died later): --resume redoes that step
    lost = run.keep_reward_file(spec, VERSIONS[2].encode(), 3)
    write_version(reward_file, VERSIONS[1])  # edited while the run was stopped
    config.grpo.max_steps = 3
    train.train(config, resume=True, progress=False)

    digests = [hashlib.sha256(VERSIONS[i].encode()).hexdigest() for i in (0, 1)]
    assert [(e["first_step"], e["sha256"]) for e in run.reward_files()] == [(1, digests[0]), (3, digests[1])]
    assert not os.path.exists(run.file(lost["file"]))
    assert {c["rewards"]["mine"] for c in run.completions() if c["step"] == 3} == {0.5}
