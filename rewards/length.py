"""Length rewards: target band, Kimi-1.5 length reward, cosine scaling by correctness, DAPO overlong penalty.

Lengths are in tokens when the trainer passes `completion_ids` (unit="tokens"), else estimated as
characters / 4; unit="chars" counts characters. Factories returning TRL-signature functions;
pure Python, in-process, total.
"""

from __future__ import annotations

import builtins
import math

from rewards.correctness import column, is_correct
from rewards.extract import completion_texts, prompt_as_text, prompt_texts

UNITS = ("tokens", "chars")


def checked_unit(unit: str) -> str:
    """The unit, or ValueError naming the valid ones."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    return unit


def lengths(completions, kwargs: dict, unit: str) -> list[int]:
    """Length of each completion in the unit (token ids when given, else characters / 4 for tokens)."""
    texts = completion_texts(completions)
    ids = kwargs.get("completion_ids")
    if unit == "tokens" and ids is not None and len(ids) == len(texts):
        return [len(i) if hasattr(i, "__len__") else 0 for i in ids]
    if unit == "tokens":
        return [math.ceil(len(t) / 4) for t in texts]
    return [len(t) for t in texts]


def length_target(min: int = 16, max: int = 256, unit: str = "tokens", falloff: int | None = None):  # noqa: A002
    """1.0 inside the band [min, max]; linear decay to 0 below (length/min) and above (over `falloff`, default max). Range [0, 1]."""
    low, high = int(min), int(max)
    if low < 0 or high < low:
        raise ValueError(f"need 0 <= min <= max, got min={min}, max={max}")
    width = int(falloff) if falloff is not None else high
    if width <= 0:
        raise ValueError("falloff must be > 0")
    checked_unit(unit)

    def score(length: int) -> float:
        if length < low:
            return length / low
        if length > high:
            return builtins.max(0.0, 1.0 - (length - high) / width)
        return 1.0

    def length_target_reward(completions, **kwargs):
        return [score(n) for n in lengths(completions, kwargs, unit)]

    return length_target_reward



def correctness(completions, kwargs: dict) -> list[bool | None]:
    """Per-completion correctness against the `answer` column (numeric when possible, else exact)."""
    golds = column(kwargs, "answer", len(completions))
    prompts = prompt_texts(kwargs.get("prompts"), len(completions))
    return [is_correct(t, p, g) for t, p, g in zip(completion_texts(completions), prompts, golds)]


def groups(kwargs: dict, count: int) -> list[list[int]]:
    """Indices grouped by prompt (the GRPO group), or one group when prompts are absent."""
    prompts = kwargs.get("prompts")
    if not prompts or len(prompts) != count:
        return [list(range(count))] if count else []
    by_prompt: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_prompt.setdefault(prompt_as_text(prompt), []).append(index)
    return list(by_prompt.values())


def length_kimi(unit: str = "tokens"):
    """Kimi 1.5 length reward per prompt group: λ = 0.5 − (len − min)/(max − min); correct → λ, wrong → min(0, λ). Range [-0.5, 0.5]."""
    checked_unit(unit)

    def length_kimi_reward(completions, **kwargs):
        verdicts = correctness(completions, kwargs)
        sizes = lengths(completions, kwargs, unit)
        scores: list[float | None] = [0.0] * len(sizes)
        for group in groups(kwargs, len(sizes)):
            shortest, longest = min(sizes[i] for i in group), max(sizes[i] for i in group)
            for i in group:
                if verdicts[i] is None:
                    scores[i] = None
                elif longest == shortest:
                    scores[i] = 0.0
                else:
                    lam = 0.5 - (sizes[i] - shortest) / (longest - shortest)
                    scores[i] = lam if verdicts[i] else min(0.0, lam)
        return scores

    return length_kimi_reward



def length_cosine(max_len: int = 1000, min_value_wrong: float = -1.0, max_value_wrong: float = -0.5,
                  min_value_correct: float = 0.5, max_value_correct: float = 1.0, unit: str = "tokens"):
    """Cosine-scaled correctness (open-r1/TRL): short correct answers score most, short wrong ones least.

    Range [min(min_value_wrong, max_value_wrong), max(min_value_correct, max_value_correct)];
    lengths beyond max_len count as max_len. None when the gold cannot be judged.
    """
    if int(max_len) <= 0:
        raise ValueError("max_len must be > 0")
    checked_unit(unit)

    def score(length: int, correct: bool | None) -> float | None:
        if correct is None:
            return None
        progress = min(1.0, length / int(max_len))
        cosine = math.cos(progress * math.pi)
        low, high = (min_value_correct, max_value_correct) if correct else (max_value_wrong, min_value_wrong)
        return low + 0.5 * (high - low) * (1.0 + cosine)

    def length_cosine_reward(completions, **kwargs):
        return [score(n, c) for n, c in zip(lengths(completions, kwargs, unit), correctness(completions, kwargs))]

    return length_cosine_reward


def overlong_soft(max_len: int = 1024, cache_len: int = 256, penalty: float = 1.0, unit: str = "tokens"):
    """DAPO soft overlong punishment: 0 up to max_len − cache_len, linear to −penalty at max_len, −penalty beyond. Range [-penalty, 0]."""
    if int(cache_len) <= 0 or int(cache_len) > int(max_len):
        raise ValueError("need 0 < cache_len <= max_len")
    if float(penalty) < 0:
        raise ValueError("penalty must be >= 0")
    checked_unit(unit)
    safe_len = int(max_len) - int(cache_len)

    def score(length: int) -> float:
        if length <= safe_len:
            return 0.0
        if length <= int(max_len):
            return -float(penalty) * (length - safe_len) / int(cache_len)
        return -float(penalty)

    def overlong_soft_reward(completions, **kwargs):
        return [score(n) for n in lengths(completions, kwargs, unit)]

    return overlong_soft_reward
