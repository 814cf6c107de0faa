"""grpo.resample_all_fail (train/resample.py): the merge of a retry into a batch, by hand, and real tiny-model
runs whose success reward fails everything, or fails only the first generation of the run."""

from __future__ import annotations

import pytest
import torch
from accelerate.utils import gather

from conftest import make_tiny_config
from local_grpo import train
from local_grpo.config import RewardSpec
from local_grpo.rundir import RunDir
from local_grpo.train import resample

PAD = 7


def batch(prompt_lengths, completion_lengths, advantages, seed):
    """A TRL-shaped output dict: prompts left-padded, completions right-padded, per-token log-probs."""
    g = torch.Generator().manual_seed(seed)
    width_p, width_c = max(prompt_lengths), max(completion_lengths)
    prompt_ids = torch.full((len(prompt_lengths), width_p), PAD)
    prompt_mask = torch.zeros((len(prompt_lengths), width_p), dtype=torch.long)
    completion_ids = torch.full((len(completion_lengths), width_c), PAD)
    completion_mask = torch.zeros((len(completion_lengths), width_c), dtype=torch.long)
    logps = torch.zeros((len(completion_lengths), width_c))
    for i, (p, c) in enumerate(zip(prompt_lengths, completion_lengths)):
        prompt_ids[i, width_p - p:] = torch.randint(100, 200, (p,), generator=g)
        prompt_mask[i, width_p - p:] = 1
        completion_ids[i, :c] = torch.randint(100, 200, (c,), generator=g)
        completion_mask[i, :c] = 1
        logps[i, :c] = -torch.rand(c, generator=g)
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "advantages": torch.tensor(advantages, dtype=torch.float32),
            "old_per_token_logps": logps, "num_items_in_batch": completion_mask.sum()}


def test_merge_pads_each_side_and_replaces_only_the_chosen_groups():
    # 3 groups of 2; the retry (of groups 0 and 2) has wider prompts and narrower completions, then the reverse
    output = batch([2, 3, 3, 2, 1, 2], [4, 2, 3, 1, 4, 4], [0.0] * 6, seed=0)
    retry = batch([5, 4, 1, 2], [2, 3, 1, 1], [1.0, -1.0, 0.0, 0.0], seed=1)
    merged = resample.merge_groups(output, retry, {0: 0}, num_generations=2, pad_token_id=PAD, gather=gather)

    assert merged["prompt_ids"].shape == (6, 5) and merged["completion_ids"].shape == (6, 4)
    # replaced rows: the retry's prompt (left-padded) and completion (right-padded), values and masks
    assert torch.equal(merged["prompt_ids"][:2], retry["prompt_ids"][:2])
    assert torch.equal(merged["prompt_mask"][:2], retry["prompt_mask"][:2])
    assert torch.equal(merged["completion_ids"][:2, :3], retry["completion_ids"][:2])
    assert (merged["completion_ids"][:2, 3] == PAD).all() and (merged["completion_mask"][:2, 3] == 0).all()
    assert torch.equal(merged["old_per_token_logps"][:2, :3], retry["old_per_token_logps"][:2])
    assert torch.equal(merged["advantages"], torch.tensor([1.0, -1.0, 0, 0, 0, 0]))
    # untouched rows: the same tokens, shifted right by the new left padding of the prompts
    assert torch.equal(merged["prompt_ids"][2:, 2:], output["prompt_ids"][2:])
    assert (merged["prompt_ids"][2:, :2] == PAD).all() and (merged["prompt_mask"][2:, :2] == 0).all()
    assert torch.equal(merged["completion_ids"][2:], output["completion_ids"][2:])
    assert torch.equal(merged["old_per_token_logps"][2:], output["old_per_token_logps"][2:])
    # the loss normaliser counts the merged completion tokens: 2 + 3 replaced the first group's 4 + 2
    assert merged["num_items_in_batch"].item() == 18 - 6 + 5
    assert output["num_items_in_batch"].item() == 18  # the input batch is left as it was

    # a retry wider in the completions: the batch's completions are right-padded to it
    wide = batch([1, 1], [6, 5], [0.5, -0.5], seed=2)
    merged = resample.merge_groups(output, wide, {2: 0}, num_generations=2, pad_token_id=PAD, gather=gather)
    assert merged["completion_ids"].shape == (6, 6) and merged["prompt_ids"].shape == (6, 3)
    assert torch.equal(merged["completion_ids"][:4, :4], output["completion_ids"][:4])
    assert (merged["completion_ids"][:4, 4:] == PAD).all() and (merged["old_per_token_logps"][:4, 4:] == 0).all()
    assert torch.equal(merged["prompt_ids"][4:, 2:], wide["prompt_ids"]) and (merged["prompt_ids"][4:, :2] == PAD).all()
    assert merged["num_items_in_batch"].item() == 18 - 8 + 11


def test_merge_refuses_a_batch_with_images():
    output = batch([1, 1], [1, 1], [0.0, 0.0], seed=0)
    with pytest.raises(resample.UserError, match="grpo.resample_all_fail: works with text prompts only"):
        resample.merge_groups({**output, "pixel_values": torch.zeros(2, 3)}, output, {0: 0}, 2, PAD, gather)


# --- real runs: a success reward file that fails the run's first `fail_calls` scored batches --------------

REWARD = '''CALLS = [0]  # scored batches so far (the reward child process keeps the module loaded)


def first_of_group(completions, **kwargs):
    """0 for every completion of the first {fail} scored batches; then 1 for each group's first completion."""
    CALLS[0] += 1
    if CALLS[0] <= {fail}:
        return [0.0] * len(completions)
    return [1.0 if i % {group} == 0 else 0.0 for i in range(len(completions))]
'''


def resampling_run(tiny_model_dir, folder, fail_calls: int, budget: int, steps: int):
    """A tiny run (2 groups of 4 per step) trained on `first_of_group`; returns the run and each trained batch."""
    reward_file = folder / "reward.py"
    reward_file.write_text(REWARD.format(fail=fail_calls, group=4))
    spec = f"{reward_file}:first_of_group"
    config = make_tiny_config(tiny_model_dir, str(folder / "run"), steps=steps, save_steps=10, max_completion_length=8)
    config.rewards, config.success_reward = [RewardSpec(spec, 1.0)], spec
    config.grpo.p_ref_samples = 0
    config.grpo.resample_all_fail = budget
    trained = []

    def recording(trainer, inputs, output, generate):
        first = {k: v.clone() if torch.is_tensor(v) else v for k, v in output.items()}
        merged = real(trainer, inputs, output, generate)
        trained.append((first, merged))
        return merged

    real = resample.resample_all_fail
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resample, "resample_all_fail", recording)
        train.train(config, progress=False)
    run = RunDir.open(config.output_dir)
    assert not [e for e in run.events() if e["type"] in ("reward_fault", "alert")]  # the reward scored every call
    return run, trained


@pytest.mark.usefixtures("one_torch_thread")
def test_all_fail_groups_are_retried_up_to_the_budget(tiny_model_dir, tmp_path):
    run, trained = resampling_run(tiny_model_dir, tmp_path, fail_calls=10**6, budget=2, steps=2)

    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["resample/groups_all_fail"] == 2 and m["resample/rounds"] == 2 and m["resample/groups_replaced"] == 0
    per_step = {}
    for record in run.completions():
        per_step[record["step"]] = per_step.get(record["step"], 0) + 1
    assert per_step == {1: 24, 2: 24}  # 8 completions and 2 retries of both groups, each step
    for first, merged in trained:  # nothing replaced: the batch is the first generation's
        assert torch.equal(first["completion_ids"], merged["completion_ids"])
        assert (merged["advantages"] == 0).all()


@pytest.mark.usefixtures("one_torch_thread")
def test_a_retry_with_a_success_replaces_the_failed_group(tiny_model_dir, tmp_path):
    run, trained = resampling_run(tiny_model_dir, tmp_path, fail_calls=1, budget=3, steps=1)

    (metrics,) = run.metrics()
    assert metrics["resample/groups_all_fail"] == 2
    assert metrics["resample/rounds"] == 1 and metrics["resample/groups_replaced"] == 2
    records = run.completions()
    assert len(records) == 16 and {r["step"] for r in records} == {1}
    assert [r["success"] for r in records[8:]] == [1, 0, 0, 0, 1, 0, 0, 0]  # the retry, scored and recorded

    ((first, merged),) = trained
    assert (first["advantages"] == 0).all()  # all-fail groups: no signal
    for group in (merged["advantages"][:4], merged["advantages"][4:]):  # each replaced group: one right of 4
        assert group[0] > 0 and (group[1:] < 0).all()
    assert merged["num_items_in_batch"].item() == merged["completion_mask"].sum().item()
