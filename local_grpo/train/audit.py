"""Training-time reward audit (`grpo.audit: true`): re-check the completions the reward likes best.

Each scored batch, the top-k completions by total reward that the reward "says are right" (total at
least half the sum of the positive reward weights, each reward being in [0, 1]) are re-judged by a
verifier independent of the training rewards:
  arithmetic → the final answer parsed here and compared to the gold as an exact integer;
  countdown  → the proposed equation evaluated here with exact fractions (numbers from the prompt);
  gsm8k / dataset → math-verify (`rewards.get("correct_math")`).
A disagreement (reward says right, verifier says wrong) is counted; `audit/disagreement` (fraction of
audited completions), `audit/audited` and `audit/seconds` go into metrics.jsonl, and an `alert` event
goes into events.jsonl (first disagreement, then at most once every ALERT_EVERY steps).
This module only reads records; it never changes rewards or training.
"""

from __future__ import annotations

import ast
import re
import time
from fractions import Fraction

TOP_K = 4
CLAIM_FRACTION = 0.5  # "reward says right": total >= this × sum of positive weights
ALERT_EVERY = 10  # steps between repeated alerts

INTEGER = re.compile(r"(?<![\d.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.0+)?(?!\d|\.\d)")
MARKER = re.compile(r"(?:answer\s*(?:is|:|=)|####)", re.IGNORECASE)
NEGATION = re.compile(r"\b(?:not|no|wait|actually|instead|never)\b|n't\b|~~|<!--|<(?:del|s|strike)\b|\\x?cancel"
                      r"|display\s*:\s*none", re.IGNORECASE)
RESULT = re.compile(r"=|\bequals\b|\bis\b", re.IGNORECASE)
PROMPT_NUMBERS = re.compile(r"\[([\d,\s]+)\]")


# --- verifiers ----------------------------------------------------------------------------

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


def final_integer(text: str) -> int | None:
    """The one integer the answer span states (after its last "=", "equals" or "is" if a number follows); else None."""
    span = answer_span(text)
    if span is None:
        return None
    span = re.sub(r"\\boxed\{([^{}]*)\}", r"\1", span)
    results = list(RESULT.finditer(span))
    if results and INTEGER.search(span[results[-1].end():]):
        span = span[results[-1].end():]  # "13 + 56 = 69", "73 + 46 equals 119": the result is the stated answer
    values = {int(float(m.group(0).replace(",", ""))) for m in INTEGER.finditer(span)}
    return values.pop() if len(values) == 1 else None


def arithmetic_verdict(record: dict) -> bool | None:
    """Exact integer compare of the stated final answer with the gold; None when the gold is not an integer."""
    try:
        gold = int(str(record.get("answer")).strip())
    except (TypeError, ValueError):
        return None
    return final_integer(record.get("completion") or "") == gold


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
    span = answer_span(record.get("completion") or "")
    if span is None:
        return False
    for symbol, operator_ in (("×", "*"), ("÷", "/"), ("−", "-"), ("\\times", "*"), ("\\div", "/"), ("\\cdot", "*")):
        span = span.replace(symbol, operator_)
    equation = span.split("=")[0].strip().strip("$`*").strip()
    if not equation or len(equation) > 200 or not re.fullmatch(r"[\d+\-*/()\s]+", equation):
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


def math_verifier():
    """A batch verifier with math-verify (child processes): records → list of True/False/None."""
    import rewards

    judge = rewards.get("correct_math")

    def verdicts(records: list[dict]) -> list[bool | None]:
        scores = judge([r.get("completion") or "" for r in records], answer=[r.get("answer") for r in records],
                       prompts=[r.get("prompt") or "" for r in records])
        judge.drain_events()
        return [None if s is None else rewards.is_success(s) for s in scores]

    return verdicts


def per_record(check):
    """A batch verifier from a one-record verdict function."""
    return lambda records: [check(r) for r in records]


def verifier_for(task_name: str):
    """(verifier name, batch verifier) for a task: its own checker for built-in tasks, math-verify otherwise."""
    if task_name == "arithmetic":
        return "integer-answer", per_record(arithmetic_verdict)
    if task_name == "countdown":
        return "equation", per_record(countdown_verdict)
    return "math-verify", math_verifier()


# --- the auditor --------------------------------------------------------------------------

def claimed_right(records: list[dict], weights: list[float], top_k: int = TOP_K) -> list[dict]:
    """The top-k records by total among those whose total says "right" (>= CLAIM_FRACTION × positive weights)."""
    ceiling = sum(w for w in weights if w > 0) or 1.0
    claimed = [r for r in records if (r.get("total") or 0.0) >= CLAIM_FRACTION * ceiling]
    return sorted(claimed, key=lambda r: r.get("total") or 0.0, reverse=True)[:top_k]


class Auditor:
    """An `on_scored` hook (step, records) and a metrics hook () → {"audit/...": value}."""

    def __init__(self, task_name: str, weights: list[float], run=None, top_k: int = TOP_K):
        self.verifier_name, self.verify = verifier_for(task_name)
        self.weights = weights  # the recorder's live list: weight changes from the app apply
        self.run = run
        self.top_k = top_k
        self.audited = 0
        self.disagreed = 0
        self.seconds = 0.0
        self.last_alert_step: int | None = None

    def on_scored(self, step: int, records: list[dict]) -> None:
        """Audit one scored batch; accumulate counts until the next metrics line."""
        started = time.perf_counter()
        audited = claimed_right(records, self.weights, self.top_k)
        verdicts = self.verify(audited) if audited else []
        wrong = [r for r, v in zip(audited, verdicts) if v is False]
        self.audited += sum(1 for v in verdicts if v is not None)
        self.disagreed += len(wrong)
        self.seconds += time.perf_counter() - started
        if wrong:
            self.alert(step, wrong, sum(1 for v in verdicts if v is not None))

    def alert(self, step: int, wrong: list[dict], audited: int) -> None:
        """One alert event in events.jsonl (then quiet for ALERT_EVERY steps)."""
        if self.run is None or (self.last_alert_step is not None and step - self.last_alert_step < ALERT_EVERY):
            return
        self.last_alert_step = step
        example = " ".join(str(wrong[0].get("completion", "")).split())[:160]
        self.run.event("alert", f"reward audit: {len(wrong)} of {audited} top-rewarded completions are wrong by "
                                f"the {self.verifier_name} verifier (gold {wrong[0].get('answer')!r}), e.g. {example!r}",
                       step=step, source="audit", disagreed=len(wrong), audited=audited)

    def metrics(self, step: int) -> dict:
        """A metric hook (called with the logged step): metrics since the last call: audit/disagreement (omitted when nothing was audited), audit/audited, audit/seconds."""
        values = {"audit/audited": self.audited, "audit/seconds": round(self.seconds, 4)}
        if self.audited:
            values["audit/disagreement"] = round(self.disagreed / self.audited, 4)
        self.audited, self.disagreed, self.seconds = 0, 0, 0.0
        return values


def attach_audit(config, run, recorder, callback) -> Auditor:
    """Create the auditor for a run and hook it into the recorder and the metrics callback."""
    auditor = Auditor(config.task_name, recorder.weights, run=run)
    recorder.on_scored.append(auditor.on_scored)
    callback.metric_hooks.append(auditor.metrics)
    run.event("info", f"reward audit on: top {auditor.top_k} completions per batch re-checked by the "
                      f"{auditor.verifier_name} verifier")
    return auditor
