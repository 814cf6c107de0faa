"""Difficulty filtering (grpo.filter_zero_std): stop sampling prompts that give no learning signal.

A prompt whose group was all-right or all-wrong (every completion the same total reward, so every
advantage is zero) on each of its last RETIRE_AFTER visits is retired: the training sampler moves it
to the end of the epoch and takes the next prompt of TRL's shuffled order instead. An epoch keeps its
length (retired prompts come last, so training never stalls), and with max_steps shorter than an
epoch they are in effect skipped. Retirements are logged to events.jsonl.

Hooks: the recorder's `on_scored` (which prompts had zero-std groups) and the trainer's
`_get_train_sampler` override (train/trainer.py; it wraps TRL 1.15's RepeatSampler and keeps its layout). This changes what
the dynamics model assumes; see docs/dynamics.md.
"""

from __future__ import annotations

RETIRE_AFTER = 2  # consecutive zero-std visits before a prompt is skipped


class SkipRetiredSampler:
    """TRL's RepeatSampler order, with retired prompts skipped when each batch of prompts is formed."""

    def __init__(self, base, retired: set):
        self.base = base
        self.retired = retired
        self.prompts_per_batch = base.batch_size
        self.skipped = 0

    def __len__(self):
        return len(self.base)

    def __iter__(self):
        order = list(dict.fromkeys(iter(self.base)))  # unique prompt indices in TRL's shuffled order
        deferred = []

        def active():
            for index in order:
                if index in self.retired:  # checked when its batch is formed, so retirements apply at once
                    deferred.append(index)
                    self.skipped += 1
                else:
                    yield index
            yield from deferred  # only reached if the epoch outlasts the active prompts

        chunk = []
        for index in active():
            chunk.append(index)
            if len(chunk) == self.prompts_per_batch:
                for _ in range(self.base.repeat_count):
                    for prompt in chunk:
                        for _ in range(self.base.mini_repeat_count):
                            yield prompt
                chunk = []


class ZeroStdFilter:
    """Tracks zero-std visits per prompt (a RewardRecorder on_scored hook) and retires prompts."""

    def __init__(self, run, train_rows: list[dict]):
        self.run = run
        self.index_of = {row.get("question"): i for i, row in enumerate(train_rows)}
        self.history: dict[int, list[bool]] = {}
        self.retired: set[int] = set()

    def __call__(self, step: int, records: list[dict]) -> None:
        groups: dict[str, set] = {}
        for record in records:
            groups.setdefault(record["prompt"], set()).add(record["total"])
        for prompt, totals in groups.items():
            index = self.index_of.get(prompt)
            if index is None or index in self.retired:
                continue
            visits = self.history.setdefault(index, [])
            visits.append(len(totals) == 1)
            if len(visits) >= RETIRE_AFTER and all(visits[-RETIRE_AFTER:]):
                self.retired.add(index)
                self.run.event("info", f"filter_zero_std: skipping prompt {prompt!r} (zero reward std on its last "
                               f"{RETIRE_AFTER} visits)", step=step, kind="prompt_retired")
