"""Correctness rewards: is the completion's final answer the gold answer (the `answer` column)?

Factories returning TRL-signature functions. Correct → scale (1.0), wrong → 0.0, None when the
gold answer cannot be judged. The final answer comes from rewards.extract: inside the one answer
block (or the text outside the reasoning), one multi-answer rule for every reward
(extract.stated_answer): the last \\boxed{} wins, else the answer after the last marker, else the
region (numeric rewards: its last number). Empty/duplicate answer blocks, answers hidden in the
reasoning and echoed prompt numbers never count. A structured gold (matrix, tuple, interval,
equation, expression) is compared as a whole by correct_math and is None ("cannot judge") for the
numeric rewards, never reduced to one of its numbers. Only correct_math leaves this process
(math-verify runs in rewards.mathcheck's child pool).
"""

from __future__ import annotations

import ast
import operator
import re

from rewards.extract import (after_last_marker, answer_region, completion_texts, echoes_prompt, gold_number,
                             gold_text, has_math_delimiters, has_words, hedged, numbers_match, offers_several_numbers, plain_number,
                             predicted_number, prompt_texts, stated_answer)
from rewards.safe import note_fault


def column(kwargs: dict, name: str, count: int) -> list:
    """A dataset column passed by the trainer, checked to have one value per completion."""
    values = kwargs.get(name)
    if values is None:
        raise KeyError(f"needs the dataset column {name!r} (got columns: {', '.join(sorted(kwargs)) or 'none'})")
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        values = [values] * count
    if len(values) != count:
        raise ValueError(f"column {name!r} has {len(values)} values for {count} completions")
    return list(values)


def numeric_verdict(text: str, prompt: str, gold, tolerance: float = 1e-6) -> bool | None:
    """True/False for the completion's final number against the gold number; None when the gold has no number."""
    gold_value = gold_number(gold)
    if gold_value is None:
        return None
    return numbers_match(predicted_number(text, prompt), gold_value, tolerance)


def exact_verdict(text: str, gold) -> bool | None:
    """True/False for the normalised final answer string against the gold; None for an empty gold."""
    target = normalized(gold_text(gold))
    if not target:
        return None
    region = answer_region(text)
    if region is None:
        return False
    candidate, _ = stated_answer(region)
    return normalized(candidate) == target


def normalized(text: str) -> str:
    """Lower-case, collapsed whitespace, outer quotes/punctuation/$ and \\text{} removed."""
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", str(text))
    text = " ".join(text.split()).lower()
    return text.strip(" .,;:!\"'`*$")


def is_correct(text: str, prompt: str, gold) -> bool | None:
    """Correctness used by the length rewards: numeric when the gold is a number, else exact match."""
    verdict = numeric_verdict(text, prompt, gold)
    return verdict if verdict is not None else exact_verdict(text, gold)


def correct_exact(scale: float = 1.0):
    """Final answer equals the gold answer as text (case, spacing, quotes, trailing period ignored). Range [0, scale]."""

    def correct_exact_reward(completions, **kwargs):
        golds = column(kwargs, "answer", len(completions))
        verdicts = [exact_verdict(t, g) for t, g in zip(completion_texts(completions), golds)]
        return [None if v is None else (scale if v else 0.0) for v in verdicts]

    return correct_exact_reward


def correct_numeric(tolerance: float = 1e-6, scale: float = 1.0, partial: bool = False):
    """Final number equals the gold number within a relative tolerance (commas, $, %, units, a/b). Range [0, scale].

    partial=True gives ratio partial credit like Unsloth's check_answer: 0.5·scale within 10 %,
    0.25·scale within 20 %.
    """
    if float(tolerance) < 0:
        raise ValueError("tolerance must be >= 0")

    def score(text: str, prompt: str, gold) -> float | None:
        gold_value = gold_number(gold)
        if gold_value is None:
            return None
        predicted = predicted_number(text, prompt)
        if numbers_match(predicted, gold_value, float(tolerance)):
            return float(scale)
        if partial and predicted is not None and gold_value != 0:
            ratio = predicted / gold_value
            if 0.9 <= ratio <= 1.1:
                return 0.5 * scale
            if 0.8 <= ratio <= 1.2:
                return 0.25 * scale
        return 0.0

    def correct_numeric_reward(completions, **kwargs):
        golds = column(kwargs, "answer", len(completions))
        prompts = prompt_texts(kwargs.get("prompts"), len(completions))
        return [score(t, p, g) for t, p, g in zip(completion_texts(completions), prompts, golds)]

    return correct_numeric_reward


def correct_math(scale: float = 1.0, timeout_s: float = 5.0):
    """Symbolic equivalence with math-verify, in child processes. Range [0, scale]; None if the gold is not math.

    The answer math-verify reads follows the shared rule: the last \\boxed{}, else the answer after
    the last marker or the whole answer block (bare LaTeX such as \\frac{\\sqrt{505}}{7} read as
    LaTeX). The gold is parsed whole (a matrix, tuple, interval, set, equation or expression stays
    one object); a gold in words ("forty two") is None, never guessed. A completion whose numbers
    are all the prompt's own (e.g. "47 + 38" for "What is 47 + 38?") scores 0.0 even though
    math-verify would evaluate it to the gold.
    """
    from rewards.mathcheck import judge_pairs, warm_pool_in_background

    warm_pool_in_background()

    def correct_math_reward(completions, **kwargs):
        golds = column(kwargs, "answer", len(completions))
        prompts = prompt_texts(kwargs.get("prompts"), len(completions))
        texts = completion_texts(completions)
        regions = [None if region is None or echoes_prompt(region, prompt) or several_for_one(region, gold, text) else region
                   for region, prompt, gold, text in zip((answer_region(t) for t in texts), prompts, golds, texts)]
        pairs = [(gold_text(g), math_text(r, "<answer>" in t)) for g, r, t in zip(golds, regions, texts) if r is not None]
        outcomes = iter(judge_pairs(pairs, float(timeout_s)))
        scores = []
        for region in regions:
            if region is None:
                scores.append(0.0)
                continue
            status, value = next(outcomes)
            if status != "ok":
                note_fault("timeout" if status == "timeout" else "exception", f"math-verify: {value}", 1)
                scores.append(None)
            else:
                scores.append(None if value is None else value * scale)
        return scores

    return correct_math_reward


def math_text(region: str, tagged: bool) -> str:
    r"""The text math-verify reads for a region, by the shared rule: the last \boxed{} alone; else the marker's
    answer or (with answer tags) the whole block, as LaTeX when it is a bare formula; else the region itself."""
    answer, source = stated_answer(region)
    if source == "boxed":
        return f"\\boxed{{{answer}}}"
    if source == "region" and not tagged:
        return plain_markdown(region)
    return latex_answer(plain_markdown(answer))


def latex_answer(answer: str) -> str:
    r"""A stated answer ready for math-verify: a bare formula ("\frac{\sqrt{505}}{7}", "(1, 19)") wrapped as $…$;
    plain numbers without LaTeX, prose and text with its own $…$ as they are (math-verify finds the number in them)."""
    answer = " ".join(answer.split()).strip().rstrip(".;,!").strip()
    if not answer or has_math_delimiters(answer):
        return answer
    if (plain_number(answer) is not None and "\\" not in answer) or has_words(answer):
        return answer
    return f"${answer}$"


def plain_markdown(region: str) -> str:
    """The region as math-verify reads it best: **bold** unwrapped, a space after "Answer:" ("Answer:42" → "Answer: 42")."""
    region = re.sub(r"\*\*(.+?)\*\*", r"\1", region, flags=re.DOTALL)
    return re.sub(r"(\banswer\s*:)(?=\S)", r"\1 ", region, flags=re.IGNORECASE)


def several_for_one(region: str, gold, text: str) -> bool:
    """True when the gold is one number but the stated answer offers several ("42 or 43")."""
    return gold_number(gold) is not None and offers_several_numbers(region, tagged="<answer>" in text)


GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def gsm8k_number(text: str) -> float | None:
    """A GSM8K-style number string ("1,234", "$5", "72.") as a float, or None."""
    cleaned = text.replace(",", "").replace("$", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def gsm8k_strict(scale: float = 1.0):
    """verl's strict GSM8K check: the last "#### <number>" in the completion equals the gold. Range [0, scale].

    Unlike verl, a "#### n" followed by a retraction or negation ("Actually, no: 43") scores 0.
    """

    def score(text: str, gold) -> float | None:
        gold_value = gold_number(gold)
        if gold_value is None:
            return None
        matches = list(GSM8K_STRICT.finditer(text))
        if matches and hedged(text[matches[-1].start():]):
            return 0.0  # "#### 42\nActually, no: 43" is not an answer of 42
        predicted = gsm8k_number(matches[-1].group(1)) if matches else None
        return float(scale) if numbers_match(predicted, gold_value) else 0.0

    def gsm8k_strict_reward(completions, **kwargs):
        golds = column(kwargs, "answer", len(completions))
        return [score(t, g) for t, g in zip(completion_texts(completions), golds)]

    return gsm8k_strict_reward


def gsm8k_flexible(scale: float = 1.0):
    """verl's flexible GSM8K check: the last number anywhere in the completion equals the gold. Range [0, scale]."""

    def score(text: str, gold) -> float | None:
        gold_value = gold_number(gold)
        if gold_value is None:
            return None
        candidates = [a or b for a, b in GSM8K_FLEXIBLE.findall(text) if (a or b) not in ("", ".")]
        values = [v for v in (gsm8k_number(c) for c in candidates) if v is not None]
        return float(scale) if values and numbers_match(values[-1], gold_value) else 0.0

    def gsm8k_flexible_reward(completions, **kwargs):
        golds = column(kwargs, "answer", len(completions))
        return [score(t, g) for t, g in zip(completion_texts(completions), golds)]

    return gsm8k_flexible_reward


def integer_answer(bonus: float = 0.5):
    """Bonus when the final answer is a whole number (Unsloth's int check). Range [0, bonus]."""

    def score(text: str, prompt: str) -> float:
        value = predicted_number(text, prompt)
        return float(bonus) if value is not None and float(value).is_integer() else 0.0

    def integer_answer_reward(completions, **kwargs):
        prompts = prompt_texts(kwargs.get("prompts"), len(completions))
        return [score(t, p) for t, p in zip(completion_texts(completions), prompts)]

    return integer_answer_reward


COUNTDOWN_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def countdown_value(node: ast.AST, used: list[int]) -> float:
    """Evaluate an equation AST of integers and + - * / only; collects the numbers used. ValueError otherwise."""
    if isinstance(node, ast.Expression):
        return countdown_value(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in COUNTDOWN_OPS:
        left, right = countdown_value(node.left, used), countdown_value(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return COUNTDOWN_OPS[type(node.op)](left, right)
    raise ValueError("only integers, + - * / and parentheses are allowed")


def countdown_equation(text: str) -> str | None:
    """The equation the completion proposes: the answer region (or text after the last marker), left of any '='."""
    region = answer_region(text)
    if region is None:
        return None
    tail = after_last_marker(region)
    if tail is not None and tail.strip():
        candidate = tail
    else:
        lines = region.strip().splitlines()
        candidate = lines[-1] if lines else ""
    candidate = candidate.replace("×", "*").replace("÷", "/").replace("−", "-").replace("\\times", "*")
    candidate = candidate.split("=")[0].strip().strip("$*`").strip()  # markdown bold or code around it
    if not candidate or not re.fullmatch(r"[\d+\-*/().\s]+", candidate) or len(candidate) > 200:
        return None
    return candidate


def countdown(format_score: float = 0.1, scale: float = 1.0):
    """TinyZero countdown: the equation uses each of `nums` at most once, only + - * /, and equals `target`.

    Columns `target` and `nums` (TinyZero's name; `numbers`, as the countdown task names it, also works). scale when right, format_score for a well-formed but wrong
    equation, 0.0 without one. Range [0, max(scale, format_score)].
    """

    def score(text: str, target, numbers) -> float:
        equation = countdown_equation(text)
        if equation is None:
            return 0.0
        used: list[int] = []
        try:
            value = countdown_value(ast.parse(equation, mode="eval"), used)
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
            return 0.0
        available = list(numbers)
        for number in used:
            if number not in available:
                return float(format_score)
            available.remove(number)
        return float(scale) if abs(value - float(target)) < 1e-5 else float(format_score)

    def countdown_reward(completions, **kwargs):
        count = len(completions)
        targets = column(kwargs, "target", count)
        numbers = column(kwargs, "numbers" if "nums" not in kwargs and "numbers" in kwargs else "nums", count)
        return [score(t, target, [int(n) for n in nums])
                for t, target, nums in zip(completion_texts(completions), targets, numbers)]

    return countdown_reward
