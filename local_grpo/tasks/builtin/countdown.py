"""The countdown task: reach a target from given numbers with + - * /, each number at most once.

Rows are generated (data.task_options: numbers, max_number) and carry `numbers` and `target` columns for
the countdown reward; the audit evaluates the stated equation with exact fractions.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from fractions import Fraction

from ...errors import UserError
from ..answers import answer_span
from ..task import Rubric, Task, Verifier

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
PROMPT_NUMBERS = re.compile(r"\[([\d,\s]+)\]")
SYMBOLS = (("×", "*"), ("÷", "/"), ("−", "-"), ("\\times", "*"), ("\\div", "/"), ("\\cdot", "*"))


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


def stated_equation(text: str) -> str | None:
    """The parser: the equation the answer states (left of any "="), in + - * / and parentheses; None otherwise."""
    span = answer_span(text)
    if span is None:
        return None
    for symbol, operator_ in SYMBOLS:
        span = span.replace(symbol, operator_)
    equation = span.split("=")[0].strip().strip("$`*").strip()
    if not equation or len(equation) > 200 or not re.fullmatch(r"[\d+\-*/()\s]+", equation):
        return None
    return equation


def exact_value(node: ast.AST, used: list[int]) -> Fraction:
    """Exact value of an equation of integers with + - * / and parentheses; ValueError otherwise."""
    if isinstance(node, ast.Expression):
        return exact_value(node.body, used)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        raise ValueError("negative literals are not allowed")
    if isinstance(node, ast.BinOp):
        left, right = exact_value(node.left, used), exact_value(node.right, used)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div) and right != 0:
            return left / right
    raise ValueError("not an equation of integers with + - * /")


def countdown_verdict(record: dict) -> bool | None:
    """The stated equation uses the prompt's numbers at most once each and equals the target exactly."""
    found = PROMPT_NUMBERS.search(record.get("prompt") or "")
    try:
        target = Fraction(str(record.get("answer")).strip())
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if found is None:
        return None
    available = [int(n) for n in found.group(1).replace(",", " ").split()]
    equation = stated_equation(record.get("completion") or "")
    if equation is None:
        return False
    used: list[int] = []
    try:
        value = exact_value(ast.parse(equation, mode="eval"), used)
    except (SyntaxError, ValueError, RecursionError, ZeroDivisionError):
        return False
    for number in used:
        if number not in available:
            return False
        available.remove(number)
    return value == target


task = Task(
    name="countdown",
    description="reach a target from 3 numbers with + - * / (data.task_options: numbers, max_number)",
    system_prompt=(
        "Write an equation that reaches the target using the given numbers. Think briefly, then end "
        "with a last line 'Answer: <equation>', e.g. 'Answer: (3 + 5) * 2'."
    ),
    examples=countdown_examples,
    parse_answer=stated_equation,
    rubric=Rubric([("countdown", 1.0), ("format_soft", 0.2)], success="countdown"),
    verifier=Verifier.per_record("equation", countdown_verdict),
)
