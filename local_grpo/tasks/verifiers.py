"""Audit verifiers the built-in tasks share: the stated integer compared exactly, and math-verify on the stated answer.

Both read the completion with the tasks' own parser (answers.py); neither imports the reward library.
"""

from __future__ import annotations

from .answers import final_integer, stated_answer
from .mathverify import shared_child
from .task import Verifier


def integer_verdict(record: dict) -> bool | None:
    """Exact integer compare of the stated final answer with the gold; None when the gold is not an integer."""
    try:
        gold = int(str(record.get("answer")).strip())
    except (TypeError, ValueError):
        return None
    return final_integer(record.get("completion") or "") == gold


def math_verdicts(records: list[dict]) -> list[bool | None]:
    """math-verify's verdict per record (child process, own deadline); no stated answer is wrong."""
    answers = [stated_answer(r.get("completion") or "") for r in records]
    judged = [(str(r.get("answer")), a) for r, a in zip(records, answers) if a is not None]
    verdicts = iter(shared_child().verdicts(judged))
    return [next(verdicts) if a is not None else False for a in answers]


INTEGER_ANSWER = Verifier.per_record("integer-answer", integer_verdict)
MATH_VERIFY = Verifier("math-verify", math_verdicts)
