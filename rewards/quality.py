"""Quality rewards: n-gram repetition penalty and reasoning-steps count (open-r1 style).

Factories returning TRL-signature functions; pure Python, in-process, total.
"""

from __future__ import annotations

import re

from rewards.extract import completion_texts


def repetition(ngram_size: int = 3, max_penalty: float = -1.0):
    """Penalty for repeated word n-grams: (1 − distinct/total n-grams) · max_penalty. Range [max_penalty, 0]."""
    if int(ngram_size) < 1:
        raise ValueError("ngram_size must be >= 1")
    if float(max_penalty) > 0:
        raise ValueError("max_penalty must be <= 0")
    size = int(ngram_size)

    def score(text: str) -> float:
        words = text.lower().split()
        if len(words) < size:
            return 0.0
        ngrams = [tuple(words[i:i + size]) for i in range(len(words) - size + 1)]
        return (1.0 - len(set(ngrams)) / len(ngrams)) * float(max_penalty)

    def repetition_reward(completions, **kwargs):
        return [score(t) for t in completion_texts(completions)]

    return repetition_reward


STEP_MARKERS = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)", re.MULTILINE)


def reasoning_steps(target: int = 3):
    """Counts step markers ("Step 1:", "1.", bullets, First/Next/Finally): min(count / target, 1). Range [0, 1]."""
    if int(target) < 1:
        raise ValueError("target must be >= 1")

    def reasoning_steps_reward(completions, **kwargs):
        return [min(1.0, len(STEP_MARKERS.findall(t)) / int(target)) for t in completion_texts(completions)]

    return reasoning_steps_reward
