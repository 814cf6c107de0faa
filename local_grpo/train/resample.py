"""DAPO's dynamic sampling for all-fail groups (grpo.resample_all_fail): sample a failed prompt again.

A group whose completions all failed has zero advantages everywhere and teaches GRPO nothing. After TRL
has generated and scored a generation batch, `resample_all_fail` finds the groups with no success (the
prompt's latest group in prompt_stats.PromptStats, which the recorder fed while TRL scored the batch) and
calls TRL's `_generate_and_score_completions` again on only their input rows, all num_generations copies,
for up to grpo.resample_all_fail rounds. A group that now has a success replaces the failed group's rows
in the batch; groups still all-fail go to the next round, and after the last round they stay as they were.
This is DAPO's dynamic sampling (Yu et al., 2025) for the all-wrong side only, with a bounded number of
retries instead of "until the batch is full".

What a retry changes in the record: every retry is a real sample, scored by the reward recorder,
so its completions are in completions.jsonl at the same step as the batch (a prompt may appear there
more than num_generations times), and they count in that step's `success`, in each prompt's posterior
(prompt_stats) and in the other on_scored hooks (filter_zero_std's visits). Each retry call also appends
TRL's own per-call metrics (reward, reward_std, frac_reward_zero_std, completions/*) to the step's
metrics, which TRL averages per call. Our metrics,
one value per generation batch: resample/groups_all_fail (all-fail groups after the first generation),
resample/rounds (retry calls made) and resample/groups_replaced.

A replaced group keeps the advantages of its retry call: group-normalised there (scale_rewards group or
none, as in the first call); with scale_rewards batch the retry's std is that of the retried groups only.
`num_items_in_batch` (the loss normaliser) is recomputed as TRL computes it. Single process only (run.py
refuses the setting for multi-process training), text prompts only. Checked on TRL's GRPOTrainer (hf
backend); untested with Unsloth's GRPOTrainer.
"""

from __future__ import annotations

from ..errors import UserError

# the output's per-row tensors: key -> (side of the padding, padding value); None = the tokenizer's pad id.
# advantages are one value per row; a (B, 1) sequence-level importance_sampling_ratio needs no padding.
ROW_TENSORS = {
    "prompt_ids": ("left", None),
    "prompt_mask": ("left", 0),
    "completion_ids": ("right", None),
    "completion_mask": ("right", 0),
    "advantages": (None, None),
    "old_per_token_logps": ("right", 0.0),
    "ref_per_token_logps": ("right", 0.0),
    "sampling_per_token_logps": ("right", 0.0),
    "importance_sampling_ratio": ("right", 1.0),
    "tool_mask": ("right", 1),
}
BATCH_SCALARS = ("num_items_in_batch",)  # recomputed after a merge


def all_fail_groups(inputs: list[dict], num_generations: int, stats, groups=None) -> list[int]:
    """Indices of the groups (num_generations consecutive rows of `inputs`) whose latest group had no success."""
    groups = range(len(inputs) // num_generations) if groups is None else groups
    return [g for g in groups if stats.last_group_failed(int(inputs[g * num_generations]["row"]))]


def widen(tensor, width: int, side: str, value):
    """A (B, T) tensor padded to (B, width) on `side` with `value`."""
    import torch.nn.functional as F

    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    return F.pad(tensor, (missing, 0) if side == "left" else (0, missing), value=value)


def loss_items(output: dict, gather):
    """TRL 1.15's num_items_in_batch: the gathered count of completion tokens in the loss."""
    loss_mask = output["completion_mask"]
    if output.get("tool_mask") is not None:
        loss_mask = loss_mask * output["tool_mask"]
    return gather(loss_mask.sum()).sum()


def merge_groups(output: dict, retry: dict, replace: dict[int, int], num_generations: int, pad_token_id: int,
                 gather) -> dict:
    """`output` with group g's rows taken from group replace[g] of `retry`, every per-row tensor padded to the
    wider of the two on its own side, and num_items_in_batch recomputed (`gather`: the accelerator's)."""
    unknown = set(output) - set(ROW_TENSORS) - set(BATCH_SCALARS)
    if unknown:
        raise UserError(f"grpo.resample_all_fail: works with text prompts only; this batch also has "
                        f"{', '.join(sorted(unknown))}; set it to 0")
    merged = dict(output)
    for key, (side, value) in ROW_TENSORS.items():
        if output.get(key) is None:
            continue
        ours, theirs = output[key], retry[key]
        if side is not None:
            value = pad_token_id if value is None else value
            width = max(ours.shape[1], theirs.shape[1])
            ours, theirs = widen(ours, width, side, value), widen(theirs, width, side, value)
        ours = ours.clone()
        for group, source in replace.items():
            rows, from_rows = (slice(i * num_generations, (i + 1) * num_generations) for i in (group, source))
            ours[rows] = theirs[from_rows].to(ours.device)
        merged[key] = ours
    merged["num_items_in_batch"] = loss_items(merged, gather)
    return merged


def resample_all_fail(trainer, inputs: list[dict], output: dict, generate) -> dict:
    """Retry the all-fail groups of a training generation batch (module docstring); `generate` is TRL's
    `_generate_and_score_completions`. Records the resample/* metrics in trainer._metrics["train"]."""
    if not trainer.model.training:  # an eval batch measures the policy; resampling it would bias the measure
        return output
    size, rounds, replaced = trainer.num_generations, 0, 0
    failing = all_fail_groups(inputs, size, trainer.prompt_stats)
    initially = len(failing)
    while failing and rounds < trainer.remedies.resample_all_fail:
        rounds += 1
        retry_inputs = [dict(row) for g in failing for row in inputs[g * size:(g + 1) * size]]
        retry = generate(retry_inputs)  # scored: prompt_stats.latest now holds these groups
        still = set(all_fail_groups(inputs, size, trainer.prompt_stats, failing))
        replace = {g: i for i, g in enumerate(failing) if g not in still}
        if replace:
            output = merge_groups(output, retry, replace, size, trainer._tokenizer.pad_token_id,
                                  trainer.accelerator.gather)
            replaced += len(replace)
        failing = [g for g in failing if g in still]
    metrics = trainer._metrics["train"]
    metrics["resample/groups_all_fail"].append(float(initially))
    metrics["resample/rounds"].append(float(rounds))
    metrics["resample/groups_replaced"].append(float(replaced))
    return output
