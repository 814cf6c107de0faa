"""Built-in tasks: seeded generators of (question, answer) pairs with a system prompt.

A task knows what it asks for (its system prompt) and how to make its examples; which rewards judge
and train it by default is config (config.TASK_REWARDS).
No torch or transformers here.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Callable

from .errors import UserError

ANSWER_LINE_PROMPT = (
    "Solve the problem. Think briefly, then end your reply with a last line "
    "'Answer: <number>'."
)


@dataclass
class Task:
    name: str
    system_prompt: str
    make_examples: Callable[[int, int, dict], list[dict]] | None = None


# --- arithmetic ---------------------------------------------------------------------------

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
        value = nums[0]
        if "*" in ops and any(o != "*" for o in ops):
            value = eval(text.replace("×", "*"))  # noqa: S307 - our own digits and operators only
        else:
            for op, num in zip(ops, nums[1:]):
                value = _OPS[op](value, num)
        out.append({"question": f"What is {text}?", "answer": str(value)})
    return out


# --- countdown ----------------------------------------------------------------------------

def countdown_examples(n: int, seed: int, options: dict) -> list[dict]:
    """Countdown: reach `target` from `numbers` with + - * /, each number used at most once.

    The target is built from a random expression over the numbers, so every problem is solvable.
    options: numbers (how many, default 3), max_number (default 50).
    """
    count = int(options.get("numbers", 3))
    max_number = int(options.get("max_number", 50))
    if count < 2:
        raise UserError(f"data.task_options.numbers: must be >= 2, got {count}")
    rng = random.Random(seed)
    out, seen = [], set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 1000:
            raise UserError("data.task_options: cannot generate enough distinct countdown problems")
        nums = [rng.randint(1, max_number) for _ in range(count)]
        value = nums[0]
        for num in nums[1:]:
            op = rng.choice("+-*")
            value = _OPS[op](value, num)
        if value <= 0 or value > 1000 or (tuple(nums), value) in seen:
            continue
        seen.add((tuple(nums), value))
        listed = ", ".join(map(str, nums))
        out.append(
            {
                "question": f"Using the numbers [{listed}], write an equation that equals {value}. "
                "Use + - * / and each number at most once.",
                "answer": str(value),
                "numbers": nums,
                "target": value,
            }
        )
    return out


TASKS: dict[str, Task] = {
    "arithmetic": Task(
        name="arithmetic",
        system_prompt=ANSWER_LINE_PROMPT,
        make_examples=arithmetic_examples,
    ),
    "gsm8k": Task(
        name="gsm8k",
        system_prompt=ANSWER_LINE_PROMPT,
    ),
    "countdown": Task(
        name="countdown",
        system_prompt=(
            "Write an equation that reaches the target using the given numbers. Think briefly, then end "
            "with a last line 'Answer: <equation>', e.g. 'Answer: (3 + 5) * 2'."
        ),
        make_examples=countdown_examples,
    ),
    "dataset": Task(
        name="dataset",
        system_prompt=ANSWER_LINE_PROMPT,
    ),
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UserError(f"data.task: {name!r} is not one of {', '.join(t for t in TASKS if t != 'dataset')}")
    return TASKS[name]
