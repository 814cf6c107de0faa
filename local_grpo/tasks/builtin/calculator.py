"""The calculator task: the word_problems task's problems, with a calculator tool the model may call.

The rows are word_problems' (the same problems for the same data.seed), and so are the rubric
(correct_numeric plus format_soft at 0.2, success = correct_numeric) and the audit: only the tool and the
system prompt differ, so `word_problems` is its control. The model calls `calculator(expression)` with a
tool call; the result comes back as a tool turn, which the loss does not train on (docs/tasks.md, "Tools").
The tool evaluates + - * / // % ** and parentheses over numbers by walking the expression's syntax tree
(no eval), and answers a bad expression with an error line.
"""

from __future__ import annotations

import ast
import operator

from ..answers import ANSWER_LINE_RUBRIC, integer_answer
from ..task import Task
from ..verifiers import INTEGER_ANSWER
from .word_problems import word_problem_examples

BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
SYMBOLS = (("×", "*"), ("÷", "/"), ("−", "-"), ("^", "**"))
MAX_LENGTH = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e18


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Args:
        expression: The arithmetic to compute, with + - * / and parentheses, e.g. "812 - 357" or "(24 + 6) * 3".
    """
    text = str(expression).strip()
    for symbol, python in SYMBOLS:
        text = text.replace(symbol, python)
    if not text or len(text) > MAX_LENGTH:
        return f"error: give an expression of 1 to {MAX_LENGTH} characters"
    try:
        value = evaluate(ast.parse(text, mode="eval").body)
    except ZeroDivisionError:
        return "error: division by zero"
    except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError) as error:
        return f"error: {error}" if isinstance(error, ValueError) else "error: not an arithmetic expression"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(round(value, 10) if isinstance(value, float) else value)


def evaluate(node: ast.AST) -> int | float:
    """The value of a number, a unary +/- or a binary operation of BINARY; ValueError for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        value = BINARY[type(node.op)](left, right)
        if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
            raise ValueError("result out of range")
        return value
    raise ValueError("only numbers, + - * / // % ** and parentheses are allowed")


task = Task(
    name="calculator",
    description="word_problems with a calculator tool the model may call (tool use; data.task_options as "
                "word_problems)",
    system_prompt=(
        "Solve the problem. For the arithmetic, call the calculator tool, then end your reply with a last "
        "line 'Answer: <number>'."
    ),
    examples=word_problem_examples,
    parse_answer=integer_answer,
    rubric=ANSWER_LINE_RUBRIC,
    verifier=INTEGER_ANSWER,
    tools=[calculator],
    solutions=True,
)
