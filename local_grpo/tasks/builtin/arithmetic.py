"""The arithmetic task: seeded problems like 'What is 47 + 38?' with integer answers.

Rows are generated (data.task_options: digits, operations, operands), each with a worked solution (one
operation a line, products first; grpo.hints); the rubric is correct_numeric plus format_soft at 0.2; the
audit compares the stated integer with the gold exactly.
"""

from __future__ import annotations

import operator
import random

from ...errors import UserError
from ..answers import ANSWER_LINE_PROMPT, ANSWER_LINE_RUBRIC, integer_answer
from ..task import Task
from ..verifiers import INTEGER_ANSWER

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_OP_WORDS = {"+": "+", "-": "-", "*": "×"}


def arithmetic_examples(n: int, seed: int, options: dict) -> list[dict]:
    """`n` distinct problems like 'What is 47 + 38?' with integer answers.

    options: digits (default 2), operations (default ['+']), operands (default 2).
    """
    digits = int(options.get("digits", 2))
    operations = list(options.get("operations", ["+"]))
    operands = int(options.get("operands", 2))
    if not 1 <= digits <= 9:
        raise UserError(f"data.task_options.digits: must be 1..9, got {digits}")
    if operands < 2:
        raise UserError(f"data.task_options.operands: must be >= 2, got {operands}")
    bad = [op for op in operations if op not in _OPS]
    if bad or not operations:
        raise UserError(f"data.task_options.operations: {bad or operations} not in {list(_OPS)}")
    low, high = 10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1
    capacity = (high - low + 1) ** operands * len(operations) ** (operands - 1)
    if n > capacity:
        raise UserError(f"data.num_train: {n} distinct problems requested, only {capacity} exist for these options")
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        nums = [rng.randint(low, high) for _ in range(operands)]
        ops = [rng.choice(operations) for _ in range(operands - 1)]
        text = str(nums[0])
        for op, num in zip(ops, nums[1:]):
            text += f" {_OP_WORDS[op]} {num}"
        if text in seen:
            continue
        seen.add(text)
        value, steps = worked_steps(nums, ops)
        out.append({"question": f"What is {text}?", "answer": str(value), "solution": "\n".join(steps)})
    return out


def worked_steps(nums: list[int], ops: list[str]) -> tuple[int, list[str]]:
    """The value of `nums[0] ops[0] nums[1] ...` (× before + and -) and its steps, one operation a line."""
    steps = []
    terms, term_ops = [nums[0]], []  # products first
    for op, num in zip(ops, nums[1:]):
        if op == "*":
            steps.append(f"{terms[-1]} {_OP_WORDS[op]} {num} = {terms[-1] * num}.")
            terms[-1] *= num
        else:
            terms.append(num)
            term_ops.append(op)
    value = terms[0]
    for op, num in zip(term_ops, terms[1:]):  # then left to right
        steps.append(f"{value} {op} {num} = {_OPS[op](value, num)}.")
        value = _OPS[op](value, num)
    return value, steps


task = Task(
    name="arithmetic",
    description="two-digit additions by default (data.task_options: digits, operations, operands)",
    system_prompt=ANSWER_LINE_PROMPT,
    examples=arithmetic_examples,
    parse_answer=integer_answer,
    rubric=ANSWER_LINE_RUBRIC,
    verifier=INTEGER_ANSWER,
    solutions=True,
)
