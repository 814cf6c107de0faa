"""Per-prompt success during training: what the remedies for a task the model rarely solves read.

`PromptStats` is a RewardRecorder `on_scored` hook. For each training row (the dataset's `row` column,
CompletionRecord.row) it keeps a beta posterior on the prompt's success rate, updated with every scored
group, and the success of its latest group. The prior is Beta(m·k, (1 - m)·k) around the starting model's
measured mean success m (p_ref; PRIOR_MEAN when not measured) with weight k = PRIOR_WEIGHT completions,
so an unseen prompt starts where the task as a whole starts.

Readers: grpo.prompt_sampling difficulty (difficulty.py), grpo.resample_all_fail (resample.py) and
grpo.hints (hints.py).
"""

from __future__ import annotations

PRIOR_WEIGHT = 2.0  # the prior counts as this many completions
PRIOR_MEAN = 0.05  # the prior's mean when p_ref was not measured
MEAN_FLOOR = 0.01  # keeps the prior proper when p_ref measured 0


class PromptStats:
    """Beta posteriors on each training prompt's success, and the success of its latest group."""

    def __init__(self, rows: int, prior_mean: float | None = None):
        mean = min(max(PRIOR_MEAN if prior_mean is None else prior_mean, MEAN_FLOOR), 1.0 - MEAN_FLOOR)
        self.prior = (mean * PRIOR_WEIGHT, (1.0 - mean) * PRIOR_WEIGHT)
        self.rows = rows
        self.successes = [0] * rows
        self.attempts = [0] * rows
        self.latest: dict[int, tuple[int, int]] = {}  # row -> (successes, completions) of its latest group
        self.step = 0

    def __call__(self, step: int, records: list[dict]) -> None:
        groups: dict[int, list[int]] = {}
        for record in records:
            row = record.get("row")
            if row is not None and 0 <= row < self.rows:
                groups.setdefault(row, []).append(int(record["success"]))
        for row, outcomes in groups.items():
            self.successes[row] += sum(outcomes)
            self.attempts[row] += len(outcomes)
            self.latest[row] = (sum(outcomes), len(outcomes))
        self.step = step

    def posterior(self, row: int) -> tuple[float, float]:
        """The beta posterior (alpha, beta) on a prompt's success."""
        a, b = self.prior
        return a + self.successes[row], b + self.attempts[row] - self.successes[row]

    def mean(self, row: int) -> float:
        a, b = self.posterior(row)
        return a / (a + b)

    def chance_all_fail(self, row: int, completions: int) -> float:
        """E[(1 - p)^n] under the prompt's posterior: the chance that a group of n completions has no success."""
        a, b = self.posterior(row)
        chance = 1.0
        for i in range(completions):
            chance *= (b + i) / (a + b + i)
        return chance

    def last_group_failed(self, row: int) -> bool:
        """True when the prompt's latest group had no success (False when it was never scored)."""
        latest = self.latest.get(row)
        return latest is not None and latest[0] == 0
