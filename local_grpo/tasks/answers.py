"""The tasks' own answer parser: where a completion states its final answer, read without the reward library.

The audit verifiers build on it, so it must share no code with rewards/ (tests/test_tasks.py checks that
no module of local_grpo/tasks imports rewards). It reads the single <answer> block, else the line after
the last answer marker, else the last sentence with a number, and refuses hedged answers.
"""

from __future__ import annotations

import re

from .task import Rubric

INTEGER = re.compile(r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?(?!\d|\.\d)")
MARKER = re.compile(r"(?:answer\s*(?:is|:|=)|####)", re.IGNORECASE)
NEGATION = re.compile(r"\b(?:not|no|wait|actually|instead|never)\b|n't\b|~~|<!--|<(?:del|s|strike)\b|\\x?cancel"
                      r"|display\s*:\s*none", re.IGNORECASE)
RESULT = re.compile(r"=|\bequals\b|\bis\b", re.IGNORECASE)


def visible_text(text: str) -> str:
    """The completion without <think>…</think> reasoning."""
    text = re.sub(r"<think>.*?</think>", " ", text, flags=re.DOTALL)
    return text.split("<think>", 1)[0]


def answer_span(text: str) -> str | None:
    """Where the final answer is: the single <answer> block, else the line after the last marker, else the last sentence with a number.

    None when there is no such span, or when it (or anything after the marker) hedges: "not", "No wait", hidden markup.
    """
    text = visible_text(text)
    if "<answer>" in text or "</answer>" in text:
        blocks = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
        valid = len(blocks) == 1 and blocks[0].strip() and text.count("<answer>") == 1
        return blocks[0] if valid and not NEGATION.search(blocks[0]) else None
    markers = list(MARKER.finditer(text))
    if markers:
        rest = text[markers[-1].start():]
        return None if NEGATION.search(rest) else text[markers[-1].end():].split("\n", 1)[0]
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    sentences = [part for part in re.split(r"(?<=[.!?])\s+", lines[-1]) if re.search(r"\d", part)]
    last = sentences[-1] if sentences else lines[-1]
    return None if NEGATION.search(last) else last


def stated_result(span: str) -> str:
    """The part of an answer span that states the result: after its last "=", "equals" or "is" when a number follows."""
    span = re.sub(r"\\boxed\{([^{}]*)\}", r"\1", span)
    results = list(RESULT.finditer(span))
    if results and INTEGER.search(span[results[-1].end():]):
        return span[results[-1].end():]  # "13 + 56 = 69", "73 + 46 equals 119": the result is the stated answer
    return span


def final_integer(text: str) -> int | None:
    """The one integer the answer span states (after its last "=", "equals" or "is" if a number follows); else None."""
    span = answer_span(text)
    if span is None:
        return None
    values = {int(float(m.group(0).replace(",", ""))) for m in INTEGER.finditer(stated_result(span))}
    return values.pop() if len(values) == 1 else None


def integer_answer(text: str) -> str | None:
    """The parser of the integer-answer tasks: the stated integer as text, or None."""
    value = final_integer(text)
    return None if value is None else str(value)


def stated_answer(text: str) -> str | None:
    """The parser of the maths tasks: the stated result as text (stripped of $, ** and a trailing period), or None."""
    span = answer_span(text)
    if span is None:
        return None
    result = stated_result(span).strip().strip("*").strip()
    return result.rstrip(".").strip() or None


# --- the answer-line tasks' prompt and rubric (arithmetic, gsm8k, a data file) ----------------

ANSWER_LINE_PROMPT = (
    "Solve the problem. Think briefly, then end your reply with a last line "
    "'Answer: <number>'."
)
ANSWER_LINE_RUBRIC = Rubric([("correct_numeric", 1.0), ("format_soft", 0.2)], success="correct_numeric")
