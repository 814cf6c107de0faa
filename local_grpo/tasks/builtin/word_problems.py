"""The word_problems task: one-step arithmetic word problems with multi-digit numbers, solved without tools.

"Sam has 812 books and gives away 357. How many books does Sam have left?" Rows are generated
(data.task_options: digits, operations) and carry the arithmetic they ask for in an `expression` column
("812 - 357"), which reaches the rewards like any column, and a worked solution in a `solution` column
(the arithmetic a place value at a time, one step a line, for grpo.hints); the rubric is correct_numeric plus format_soft at 0.2; the audit
compares the stated integer with the gold exactly. It is the control of the `calculator` task, which asks
the same problems (the same rows for the same data.seed) with a calculator tool.
"""

from __future__ import annotations

import random

from ...errors import UserError
from ..answers import ANSWER_LINE_PROMPT, ANSWER_LINE_RUBRIC, integer_answer
from ..task import Task
from ..verifiers import INTEGER_ANSWER

NAMES = ("Sam", "Ana", "Omar", "Mei", "Lena", "Ravi", "Tom", "Zoe")
ITEMS = ("books", "stamps", "marbles", "coins", "stickers", "cards", "shells", "beads")
# operation -> question templates over {name}, {item}, {a}, {b}; the gold is a op b
TEMPLATES = {
    "+": ("{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?",
          "A shop sold {a} {item} on Monday and {b} on Tuesday. How many {item} did it sell in total?"),
    "-": ("{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?",
          "A box held {a} {item}. {name} took out {b}. How many {item} are still in the box?"),
    "*": ("Each bag holds {a} {item}. How many {item} are in {b} bags?",
          "{name} buys {b} packs of {item} with {a} {item} in each pack. How many {item} is that?"),
    "/": ("{name} shares {a} {item} equally among {b} friends. How many {item} does each friend get?",
          "{a} {item} are packed into boxes of {b}. How many boxes are filled?"),
}
OPERATIONS = tuple(TEMPLATES)


def operands(op: str, digits: int, rng: random.Random) -> tuple[int, int, int]:
    """(a, b, gold) for one problem: +/- on two `digits`-digit numbers (a > b for -), * a `digits`-digit number
    by a 2-digit one, / a multiple of a 2-digit divisor whose quotient has `digits` digits."""
    low, high = 10 ** (digits - 1), 10**digits - 1
    if op == "+":
        a, b = rng.randint(low, high), rng.randint(low, high)
        return a, b, a + b
    if op == "-":
        a, b = sorted((rng.randint(low, high), rng.randint(low, high)), reverse=True)
        return (a, b, a - b) if a != b else (a + 1, b, 1)
    if op == "*":
        a, b = rng.randint(low, high), rng.randint(11, 99)
        return a, b, a * b
    b, quotient = rng.randint(11, 99), rng.randint(low, high)
    return b * quotient, b, quotient


def place_parts(number: int) -> list[int]:
    """`number` split by place value, largest first, zero places left out: 357 -> [300, 50, 7]."""
    digits = str(number)
    return [int(d) * 10 ** (len(digits) - 1 - i) for i, d in enumerate(digits) if d != "0"]


def worked_solution(op: str, a: int, b: int, gold: int) -> str:
    """The arithmetic of `a op b` a place value at a time, one step a line; the last line states the result.

    + and -: b's places added or taken one by one; *: a times each place of b, then the sum; /: long
    division, the quotient's places found one by one."""
    steps: list[str] = []
    if op in "+-":
        parts, value = place_parts(b), a
        if len(parts) > 1:
            steps.append(f"Split {b} into {', '.join(map(str, parts[:-1]))} and {parts[-1]}.")
            for part in parts:
                steps.append(f"{value} {op} {part} = {value + part if op == '+' else value - part}.")
                value = value + part if op == "+" else value - part
    elif op == "*":
        parts = place_parts(b)
        if len(parts) > 1:
            steps.append(f"Split {b} into {', '.join(map(str, parts[:-1]))} and {parts[-1]}.")
            steps += [f"{a} * {part} = {a * part}." for part in parts]
            steps.append(f"{' + '.join(str(a * part) for part in parts)} = {gold}.")
    else:
        parts, rest = place_parts(gold), a
        steps.append(f"Divide {a} by {b} a place at a time.")
        for part in parts:
            steps.append(f"{b} * {part} = {b * part}, leaving {rest} - {b * part} = {rest - b * part}.")
            rest -= b * part
        if len(parts) > 1:
            return "\n".join(steps + [f"{' + '.join(map(str, parts))} = {gold}, so {a} / {b} = {gold}."])
    return "\n".join(steps + [f"{a} {op} {b} = {gold}."])


def word_problem_examples(n: int, seed: int, options: dict) -> list[dict]:
    """`n` distinct problems with integer answers. options: digits (2..6, default 3), operations (default + - * /)."""
    digits = int(options.get("digits", 3))
    operations = list(options.get("operations", OPERATIONS))
    if not 2 <= digits <= 6:
        raise UserError(f"data.task_options.digits: must be 2..6, got {digits}")
    bad = [op for op in operations if op not in TEMPLATES]
    if bad or not operations:
        raise UserError(f"data.task_options.operations: {bad or operations} not in {list(OPERATIONS)}")
    rng = random.Random(seed)
    seen, out = set(), []
    for _ in range(50 * n + 1000):
        if len(out) == n:
            return out
        op = rng.choice(operations)
        a, b, gold = operands(op, digits, rng)
        template = rng.choice(TEMPLATES[op])
        question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
        if question in seen:
            continue
        seen.add(question)
        out.append({"question": question, "answer": str(gold), "expression": f"{a} {op} {b}",
                    "solution": worked_solution(op, a, b, gold)})
    if len(out) < n:
        raise UserError(f"data.num_train: {n} distinct problems requested, only {len(out)} found for these options")
    return out


task = Task(
    name="word_problems",
    description="one-step word problems with 3-digit numbers, no tools: the control of `calculator` "
                "(data.task_options: digits, operations)",
    system_prompt=ANSWER_LINE_PROMPT,
    examples=word_problem_examples,
    parse_answer=integer_answer,
    rubric=ANSWER_LINE_RUBRIC,
    verifier=INTEGER_ANSWER,
    solutions=True,
)
