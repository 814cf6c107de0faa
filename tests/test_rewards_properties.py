"""Property tests: for arbitrary text and chat completions every built-in returns one float-or-None per
completion, inside its documented range, and records no fault (built-ins are total)."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rewards

RANGES = {
    "format_strict": (0.0, 1.0), "format_soft": (0.0, 1.0), "correct_exact": (0.0, 1.0),
    "correct_numeric": (0.0, 1.0), "correct_math": (0.0, 1.0), "gsm8k_strict": (0.0, 1.0),
    "gsm8k_flexible": (0.0, 1.0), "countdown": (0.0, 1.0), "integer_answer": (0.0, 0.5),
    "length_target": (0.0, 1.0), "length_kimi": (-0.5, 0.5), "length_cosine": (-1.0, 1.0),
    "overlong_soft": (-1.0, 0.0), "repetition": (-1.0, 0.0), "reasoning_steps": (0.0, 1.0),
    "code_tests": (-1.0, 1.0),
}
PIECES = ["<think>", "</think>", "<answer>", "</answer>", "Answer:", "answer is", "\\boxed{", "}", "{", "####",
          "85", "-3", "1,234", "3/4", "0.5", "$", "%", " ", "\n", "+", "*", "=", "(", ")", "Step 1:", "```python\n",
          "```", "def f():\n    return 1\n", "\\frac{1}{2}", "é", "答", "\x00", "1/0", "9" * 40]
TEXT = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=25).map("".join)
COMPLETION = st.one_of(TEXT, TEXT.map(lambda t: [{"role": "assistant", "content": t}]))
GOLD = st.one_of(st.integers(-10**6, 10**6).map(str), TEXT, st.sampled_from(["#### 72", "1/2", "$\\frac{1}{2}$", ""]))


def columns(count, draw_golds, prompt):
    """Every dataset column any built-in reads, one value per completion."""
    return {"answer": draw_golds, "prompts": [prompt] * count, "target": [24] * count,
            "nums": [[4, 6, 1, 1]] * count, "tests": [["assert f() == 1"]] * count,
            "completion_ids": [[0] * (7 * i) for i in range(count)]}


def check(name, completions, golds, prompt):
    reward = rewards.get(name)
    scores = reward(completions, **columns(len(completions), golds, prompt))
    low, high = RANGES[name]
    assert len(scores) == len(completions)
    for score in scores:
        assert score is None or (isinstance(score, float) and math.isfinite(score) and low <= score <= high), score
    assert reward.drain_events() == [], (name, completions)


def batch(size_max=4):
    return st.integers(1, size_max).flatmap(
        lambda n: st.tuples(st.lists(COMPLETION, min_size=n, max_size=n), st.lists(GOLD, min_size=n, max_size=n)))


FAST = sorted(set(RANGES) - {"correct_math", "code_tests"})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=batch(), prompt=TEXT)
def test_fast_builtins_are_total_and_in_range(data, prompt):
    completions, golds = data
    for name in FAST:
        check(name, completions, golds, prompt)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=batch(3), prompt=TEXT)
def test_math_and_code_rewards_are_total_and_in_range(data, prompt):
    completions, golds = data
    check("correct_math", completions, golds, prompt)
    check("code_tests", completions, golds, prompt)


@settings(max_examples=30, deadline=None)
@given(text=TEXT)
def test_format_soft_with_tags_in_range(text):
    [score] = rewards.get("format_soft", tags=("think", "answer"))([text])
    assert 0.0 <= score <= 1.0


def test_empty_batch_gives_empty_list():
    for name in RANGES:
        assert rewards.get(name)([], **columns(0, [], "")) == []
