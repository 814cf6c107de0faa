"""Difficulty-targeted sampling (grpo.prompt_sampling: difficulty): draw the prompts whose groups will have signal.

A group teaches GRPO something only when its completions differ: some right, some wrong. A prompt with
success rate p gives such a group with a chance that grows with p·(1 - p). So each batch of prompts is
drawn, without replacement, with weights E[p·(1 - p)] under each prompt's beta posterior (prompt_stats.py),
updated after every scored batch. Unseen prompts keep the prior's weight, so the sampler still explores;
prompts that always fail or always succeed fade; prompts with a first success come back. The idea is
"Online Difficulty Filtering" (Bae et al., 2025) and VCRL's variance-based selection (2025), as a
posterior rather than a hard band.

TRL's DataLoader asks for the next generation batch's indices while the current one trains, so a
batch is drawn from the posteriors as they stood one scored batch earlier.
"""

from __future__ import annotations

import numpy as np


def signal_weight(alpha: float, beta: float) -> float:
    """E[p·(1 - p)] for p ~ Beta(alpha, beta): the chance that two completions of the prompt disagree, halved."""
    total = alpha + beta
    return alpha * beta / (total * (total + 1.0))


class DifficultySampler:
    """TRL's RepeatSampler layout (each prompt num_generations times in a row, each batch repeated for
    num_iterations x steps_per_generation), with the prompts of each batch drawn by `signal_weight`."""

    def __init__(self, base, stats, seed: int = 0):
        self.base = base
        self.stats = stats
        self.prompts_per_batch = base.batch_size
        self.rng = np.random.default_rng(seed)
        self.batches_drawn = 0

    def __len__(self):
        return len(self.base)

    def draw(self) -> list[int]:
        """One batch of distinct prompt indices, drawn by their current weights."""
        weights = np.array([signal_weight(*self.stats.posterior(row)) for row in range(self.stats.rows)])
        size = min(self.prompts_per_batch, self.stats.rows)
        chosen = self.rng.choice(self.stats.rows, size=size, replace=False, p=weights / weights.sum())
        self.batches_drawn += 1
        return [int(row) for row in chosen]

    def __iter__(self):
        for _ in range(len(self.base) // (self.prompts_per_batch * self.base.mini_repeat_count * self.base.repeat_count)):
            chunk = self.draw()
            for _ in range(self.base.repeat_count):
                for prompt in chunk:
                    for _ in range(self.base.mini_repeat_count):
                        yield prompt
