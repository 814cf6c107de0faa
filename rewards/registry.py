"""The registry: built-in reward names → factories, and spec resolution (names and user files).

A spec is a registry name ("correct_numeric") or a user file ("path/f.py:function", or "path/f.py"
for all its public functions with `load`). Everything returned is a SafeReward. Bad specs raise
RewardSpecError with one line naming the spec. The names below are a contract: extend, don't rename.
"""

from __future__ import annotations

import inspect
import math

from rewards import code, correctness, format, length, quality
from rewards.errors import RewardSpecError
from rewards.safe import SafeReward
from rewards.userfile import is_file_spec, load_file_reward, load_file_rewards, split_file_spec

BUILTINS = {
    "format_strict": format.format_strict,
    "format_soft": format.format_soft,
    "correct_exact": correctness.correct_exact,
    "correct_numeric": correctness.correct_numeric,
    "correct_math": correctness.correct_math,
    "gsm8k_strict": correctness.gsm8k_strict,
    "gsm8k_flexible": correctness.gsm8k_flexible,
    "countdown": correctness.countdown,
    "integer_answer": correctness.integer_answer,
    "length_target": length.length_target,
    "length_kimi": length.length_kimi,
    "length_cosine": length.length_cosine,
    "overlong_soft": length.overlong_soft,
    "repetition": quality.repetition,
    "reasoning_steps": quality.reasoning_steps,
    "code_tests": code.code_tests,
}


# Built-ins that judge whether the answer is right (the soundness probe's battery applies to them).
CORRECTNESS = ("correct_exact", "correct_numeric", "correct_math", "gsm8k_strict", "gsm8k_flexible", "countdown")

SUCCESS_THRESHOLD = 0.999  # the success rule, everywhere: a score >= this x the reward's maximum


def reward_max(fn) -> float:
    """The score that means "fully correct" for a reward: its `scale` or `bonus` parameter, else 1.0."""
    params = getattr(fn, "params", {}) or {}
    for key in ("scale", "bonus"):
        if isinstance(params.get(key), (int, float)) and not isinstance(params[key], bool) and params[key] > 0:
            return float(params[key])
    return 1.0


def is_success(score, maximum: float) -> bool:
    """The one success rule: score >= SUCCESS_THRESHOLD x the reward's maximum (`reward_max`); None is no success.

    Training's `success`, p_ref, eval's pass@k, the rewards check and the probe all judge with it.
    """
    return score is not None and score >= SUCCESS_THRESHOLD * maximum


def unique_keys(reward_names: list[str]) -> list[str]:
    """Stable, unique keys for a run's rewards: a name as is, repeats as name#2, name#3, ...

    These keys name the rewards in metrics.jsonl, completions.jsonl, control.json and the app.
    """
    seen: dict[str, int] = {}
    keys = []
    for name in reward_names:
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return keys


def name_uniquely(reward_fns: list) -> list:
    """Rename a run's reward functions to their `unique_keys` (in place; returns the list)."""
    for fn, key in zip(reward_fns, unique_keys([fn.__name__ for fn in reward_fns])):
        fn.__name__ = key
    return reward_fns


def names() -> list[str]:
    """Built-in reward names, sorted."""
    return sorted(BUILTINS)


def default_params(factory) -> dict:
    """The factory's parameters and their defaults."""
    return {p.name: p.default for p in inspect.signature(factory).parameters.values()}


def describe(name: str) -> dict:
    """{"name", "summary" (one line), "params": {param: default}} for a built-in."""
    factory = builtin_factory(name)
    doc = inspect.getdoc(factory) or ""
    return {"name": name, "summary": doc.splitlines()[0] if doc else "", "params": default_params(factory)}


def builtin_factory(name: str):
    """The factory for a built-in name, or RewardSpecError listing the valid names."""
    if name not in BUILTINS:
        raise RewardSpecError(f"unknown reward {name!r} (valid: {', '.join(names())}, or path/to/file.py:function)")
    return BUILTINS[name]


def builtin_source(factory) -> str:
    """Source code of a built-in factory (its inner function included)."""
    try:
        return inspect.getsource(factory)
    except (OSError, TypeError):
        return ""


def get(spec: str, **params) -> SafeReward:
    """A ready SafeReward for a registry name or `path/to/file.py:function`, with parameters for its factory."""
    spec = checked_spec(spec)
    if is_file_spec(spec):
        path, function = split_file_spec(spec)
        if function is None:
            raise RewardSpecError(f"reward {spec!r}: name the function as {spec}:function (or use rewards.load)")
        return load_file_reward(spec, path, function, params)
    factory = builtin_factory(spec)
    allowed = default_params(factory)
    for key, value in params.items():
        if key not in allowed:
            raise RewardSpecError(f"reward {spec!r}: unknown parameter {key!r} (valid: {', '.join(allowed) or 'none'})")
    try:
        function = factory(**params)
    except (TypeError, ValueError) as error:
        raise RewardSpecError(f"reward {spec!r}: {error}") from None
    return SafeReward(spec, function, source=builtin_source(factory), params={**allowed, **params})


def load(spec: str, **params) -> list[SafeReward]:
    """Like get, but `path/to/file.py` alone loads every public top-level function of that file."""
    spec = checked_spec(spec)
    if is_file_spec(spec) and split_file_spec(spec)[1] is None:
        return load_file_rewards(spec, spec, params)
    return [get(spec, **params)]


def checked_spec(spec) -> str:
    """The spec stripped, or RewardSpecError for an empty or non-string spec."""
    if not isinstance(spec, str) or not spec.strip():
        raise RewardSpecError(f"reward spec must be a name or path/to/file.py:function, got {spec!r}")
    return spec.strip()


def parse_reward_list(text: str) -> list[tuple[str, float]]:
    """Parse "name[:weight],..." (file specs may contain colons: "path/f.py:fn:0.5") into (spec, weight) pairs."""
    if not isinstance(text, str) or not text.strip():
        raise RewardSpecError("--rewards: expected name[:weight],... (e.g. format_soft:0.5,correct_numeric)")
    pairs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise RewardSpecError(f"--rewards: empty entry in {text!r}")
        spec, weight = split_weight(item)
        if not spec:
            raise RewardSpecError(f"--rewards: missing reward name in {item!r}")
        pairs.append((spec, weight))
    return pairs


def split_weight(item: str) -> tuple[str, float]:
    """`spec:weight` → (spec, weight); no numeric suffix → weight 1.0."""
    if ":" in item:
        head, tail = item.rsplit(":", 1)
        try:
            weight = float(tail)
        except ValueError:
            return item, 1.0
        if not math.isfinite(weight):
            raise RewardSpecError(f"--rewards: weight of {head!r} must be a finite number, got {tail!r}")
        return head.strip(), weight
    return item, 1.0
