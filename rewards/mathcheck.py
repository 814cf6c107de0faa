"""Symbolic answer checking with math-verify, run in a pool of child processes with our own timeouts.

math-verify's own timeouts use signal.alarm, which raises off the main thread (and user code
that catches it scores 0 silently); here they are disabled (parsing_timeout=None,
timeout_seconds=None) and every item runs in a rewards.worker child with a per-item deadline.
`judge` is the child-side function; `judge_pairs` is what rewards call in the parent. A fast path
decides plain-integer answers in the parent, with the same result math-verify gives.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections import OrderedDict
from fractions import Fraction

from rewards.extract import boxed_contents, has_math_delimiters, has_words, plain_number_latex

PLAIN_INTEGER = re.compile(r"\s*-?\d+\s*")
POOL_LOCK = threading.Lock()
POOL = None
CACHE: "OrderedDict[tuple[str, str], float | None]" = OrderedDict()
CACHE_SIZE = 50_000


def prediction_config():
    """math-verify extraction for completions: \\boxed{} first, then other LaTeX, then plain expressions."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return [LatexExtractionConfig(normalization_config=NormalizationConfig(units=True), boxed_match_priority=0),
            ExprExtractionConfig()]


def gold_config():
    """math-verify extraction for a gold already known to be one formula: LaTeX only."""
    from math_verify import LatexExtractionConfig

    return [LatexExtractionConfig()]


@functools.lru_cache(maxsize=4096)
def parsed_gold(gold: str):
    r"""The gold answer parsed once per child, whole, or [] when it cannot be judged (no signal-based timeout).

    The last \boxed{} of the gold is the gold. A plain number ("1,234", "12 dollars") is parsed as
    that one number. A gold in words ("forty two") is []: read as LaTeX it would be a product of
    letters. Any other gold is parsed as one LaTeX formula, so a matrix, tuple, interval, set,
    equation or expression is compared as a whole, never as its last number.
    """
    from math_verify import parse

    boxes = boxed_contents(gold)
    text = " ".join((boxes[-1] if boxes else gold).split())
    number = plain_number_latex(text)
    if number is not None:
        source = f"${number}$"
    elif has_words(text):
        return []
    else:
        source = text if has_math_delimiters(text) else f"${text}$"
    parsed = parse(source, extraction_config=gold_config(), parsing_timeout=None)
    return parsed if judged(parsed) else []


def judged(parsed: list) -> bool:
    """True when math-verify produced a math object, not only its string fallback."""
    return any(not isinstance(item, str) for item in parsed)


@functools.lru_cache(maxsize=1)
def cached_prediction_config():
    """prediction_config built once per process."""
    return prediction_config()


def judge(item: tuple[str, str]) -> float | None:
    """Child side: 1.0 when the prediction text verifies against the gold, 0.0 when not, None when the gold cannot be judged."""
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold, prediction = item
    gold_parsed = parsed_gold(gold)
    if not gold_parsed:
        return None
    predicted = parse(prediction, extraction_config=cached_prediction_config(), extraction_mode="first_match",
                      parsing_timeout=None)
    return float(verify(gold_parsed, predicted, timeout_seconds=None))


BOXED_INTEGER = re.compile(r"\s*(-?)(\d{1,3}(?:,\d{3})+|\d+)\s*")
BOXED_FRACTION = re.compile(r"\s*\\d?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}\s*")


def boxed_value(content: str) -> Fraction | None:
    """The exact value of a boxed integer ("85", "-3", "1,234") or integer fraction ("\\frac{6}{4}"), else None."""
    integer = BOXED_INTEGER.fullmatch(content)
    if integer:
        return Fraction(int(integer.group(2).replace(",", ""))) * (-1 if integer.group(1) else 1)
    fraction = BOXED_FRACTION.fullmatch(content)
    if fraction and int(fraction.group(2)) != 0:
        return Fraction(int(fraction.group(1)), int(fraction.group(2)))
    return None


def fast_judgement(gold: str, prediction: str) -> float | None:
    """The verdict for a plain-integer gold and exactly one \\boxed{} holding an integer or integer fraction.

    None when the pair is not of that shape (math-verify decides then). Tests and the benchmark
    check that these verdicts equal math-verify's.
    """
    if not PLAIN_INTEGER.fullmatch(gold):
        return None
    if prediction.count("\\boxed") != 1 or "\\fbox" in prediction:
        return None  # math-verify reads \\boxed only
    boxes = boxed_contents(prediction)
    value = boxed_value(boxes[0]) if len(boxes) == 1 else None
    if value is None:
        return None
    return 1.0 if value == int(gold) else 0.0


def pool():
    """The shared pool of math-verify children (started on first use, two at most on small machines)."""
    global POOL
    with POOL_LOCK:
        if POOL is None:
            from rewards.worker import ChildPool

            size = max(1, min(2, os.cpu_count() or 1))
            POOL = ChildPool(size, "rewards.mathcheck", memory_mb=4096, label="math-verify",
                             warm_call=("judge", [("1/2", "\\boxed{\\frac{2}{4}}"), ("3", "$x=3$")]))
        return POOL


def warm_pool_in_background() -> None:
    """Start the math-verify children now, off the caller's thread, so the first scoring call does not wait."""

    def warm():
        try:
            pool().warm()
        except Exception:
            pass  # a failed start is retried, and reported, by the first real call

    threading.Thread(target=warm, name="rewards-math-warmup", daemon=True).start()


def remember(key: tuple[str, str], verdict: float | None) -> None:
    """Keep a verdict in the bounded result cache."""
    with POOL_LOCK:
        CACHE[key] = verdict
        if len(CACHE) > CACHE_SIZE:
            CACHE.popitem(last=False)


def judge_pairs(pairs: list[tuple[str, str]], item_timeout_s: float = 5.0, use_fast_path: bool = True):
    """Verdicts for (gold, prediction) pairs: ("ok", 1.0|0.0|None) or ("timeout"|"error", message) each.

    Duplicates and earlier results come from a cache; plain-integer boxed answers from the fast
    path; the rest from the child pool.
    """
    results: dict[tuple[str, str], tuple[str, object]] = {}
    for pair in pairs:
        if pair in results:
            continue
        cached = CACHE.get(pair, "missing")
        if cached != "missing":
            results[pair] = ("ok", cached)
        elif use_fast_path and (verdict := fast_judgement(*pair)) is not None:
            results[pair] = ("ok", verdict)
    todo = [pair for pair in dict.fromkeys(pairs) if pair not in results]
    for pair, outcome in zip(todo, pool().map("judge", todo, item_timeout_s)):
        results[pair] = outcome
        if outcome[0] == "ok":
            remember(pair, outcome[1])
    return [results[pair] for pair in pairs]
