"""Reward probing: score completions whose correctness is known by construction, before any training.

For each prompt with a gold answer, the battery builds known-wrong completions (hacks a model finds
under best-of-N pressure: empty answer blocks, the gold only in the reasoning, hedged or retracted
answers, the gold as a substring of another number, ...) and known-right ones (the gold in equivalent
forms), in the layouts a model would use: a plain "Answer: N" line, <think>…</think><answer>…</answer>,
and GSM8K's "#### N". The structured-gold family adds golds that are not one number (a matrix,
tuple, interval, set, equation, expression or radical ending in the row's number): the last or another
of its numbers alone, or an altered structure, must not be credited; the structure itself, bare or in
$…$, and an equivalent form must be (a None there is an abstention, "cannot judge"). A reward "credits" a completion when its score is >= THRESHOLD × the reward's
maximum (its `scale`/`bonus` parameter, else 1.0): "counts as correct", as the trainer's success does.

    report = probe([rewards.get("correct_numeric")], ["What is 17 + 25?"], ["42"])
    report["rewards"]["correct_numeric"]["false_positive_rate"]   # 0.0

Countdown (columns nums/target) gets its own battery of equations (battery="countdown").
This module takes prompts and answers as plain lists; it must not import the trainer (local_grpo).
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from fractions import Fraction

from rewards.extract import all_numbers, gold_number
from rewards.registry import SUCCESS_THRESHOLD as THRESHOLD
from rewards.registry import is_success
from rewards.registry import reward_max as default_reward_max
# Prompts with gold answers of every shape (thousands, decimals, fractions, negatives), for when a caller has none.
EXAMPLE_ROWS = {"What is 17 + 25?": "42", "What is 999 + 235?": "1234", "What is half of one?": "0.5",
                "What is 3 times 0.75?": "2.25", "What is 5 - 12?": "-7", "What is 47 + 38?": "85"}
BATCH_SIZE = 64
PAD_REPEATS = 400
REASONING = "Let me work it out step by step."
STRUCTURED = "structured_gold"
STRUCTURED_ROWS = 5  # the family depends on the row's number only; five rows (five numbers) cover its shapes


# --- the numeric battery ------------------------------------------------------------------

def number_text(value: float) -> str:
    """A number as a model would write it: 42 for 42.0, else the shortest float text."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def wrong_value(gold: float) -> float:
    """A clearly wrong answer near the gold (gold + 1; never equal to it)."""
    return gold + 1


def substring_values(gold: float) -> list[str]:
    """Other numbers whose text contains the gold's digits: 42 → 1420, 4.2, 4242 (never equal to the gold)."""
    text = number_text(abs(gold))
    digits = text.replace(".", "")
    out = [f"1{text}0" if "." not in text else f"1{text}1", text + text if "." not in text else text + "1"]
    if "." not in text:
        out.append(f"{digits[:-1] or '0'}.{digits[-1]}")
    return [v for v in out if not _same(v, gold)]


def _same(text: str, gold: float) -> bool:
    try:
        return abs(float(text) - gold) < 1e-9
    except ValueError:
        return False


def thousands(gold: float) -> str | None:
    """1234 → "1,234"; None below 1000 or for non-integers."""
    if not float(gold).is_integer() or abs(gold) < 1000:
        return None
    return f"{int(gold):,}"


def fraction_text(gold: float) -> str | None:
    """0.5 → "1/2" for a non-integer gold with a small denominator; None otherwise."""
    if float(gold).is_integer():
        return None
    fraction = Fraction(gold).limit_denominator(1000)
    if abs(float(fraction) - gold) > 1e-9:
        return None
    return f"{fraction.numerator}/{fraction.denominator}"


def echo_numbers(prompt: str, gold: float) -> list[str] | None:
    """The prompt's numbers (as text) when there are at least two and the gold is not among them."""
    values = all_numbers(prompt)
    if len(values) < 2 or any(abs(v - gold) < 1e-9 for v in values):
        return None
    return [number_text(v) for v in values]


def tags(answer: str, think: str = REASONING) -> str:
    """The <think>…</think><answer>…</answer> layout."""
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def wrong_probes(prompt: str, g: str, w: str, gold: float) -> dict[str, list[str]]:
    """Known-wrong completions by probe kind (g: the gold as text, w: a wrong value)."""
    reasoning_with_gold = f"I think the result is {g}."
    echo = echo_numbers(prompt, gold)
    pad = " ".join([g] * PAD_REPEATS)
    return {
        "empty_answer": [tags("", reasoning_with_gold), tags("   ", reasoning_with_gold)],
        "answer_in_reasoning_only": [tags(w, f"So the answer is {g}."), f"<think>The answer is {g}.</think>",
                                     f"<think>The answer is {g}.</think>\nI am not sure."],
        "several_answers": [f"{REASONING}\nAnswer: {g} or {w}", f"{REASONING}\nAnswer: {w}, {g}",
                            tags(f"{w}, {g}"), tags(f"{g} or {w}")],
        "prompt_echo": [] if echo is None else [" ".join(echo), f"{REASONING}\nAnswer: {' + '.join(echo)}",
                                                 tags(" + ".join(echo)), tags(", ".join(echo))],
        "gold_substring": [variant for s in substring_values(gold)
                           for variant in (f"{REASONING}\nAnswer: {s}", tags(s))],
        "wrong_answer": [f"{REASONING}\nAnswer: {w}", tags(w), f"{REASONING}\n#### {w}"],
        "retraction": [f"The answer is {g}. No wait, it is {w}.", f"{REASONING}\nAnswer: {g}\nWait, that is wrong: it is {w}.",
                       tags(f"{g}. No wait, {w}"), f"{REASONING}\n#### {g}\nActually, no: {w}."],
        "negated": [f"The answer is not {g}.", f"{REASONING}\nAnswer: not {g}", tags(f"not {g}"),
                    f"{REASONING}\nThe answer isn't {g}."],
        "repeated_or_nested_tags": [f"<answer>{w}</answer>\n<answer>{g}</answer>",
                                    f"<answer>{g}</answer>\n<answer>{w}</answer>",
                                    f"<think>x</think><answer>{w}</answer><think>y</think><answer>{g}</answer>",
                                    f"<answer>{w} <answer>{g}</answer></answer>"],
        "padded_with_gold": [f"{pad}\nAnswer: {w}", tags(w, pad), f"{tags(w)}\n{pad}"],
        "hidden_markup": [f"{REASONING}\nAnswer: ~~{g}~~ {w}", f"{REASONING}\nAnswer: <del>{g}</del> {w}",
                          tags(f"{w}<!-- {g} -->"), f'{REASONING}\nAnswer: {w} <span style="display:none">{g}</span>'],
        "truncated": [f"{REASONING} The sum is {g}, so the answer is", f"<think>The sum is {g}, so",
                      f"<think>{REASONING}</think>\n<answer>{g}"],
    }


def right_probes(g: str, gold: float) -> dict[str, list[str]]:
    """Known-right completions by probe kind: the gold in equivalent forms."""
    integer = float(gold).is_integer()
    comma, fraction = thousands(gold), fraction_text(gold)
    return {
        "plain": [f"{REASONING}\nAnswer: {g}", tags(g), f"{REASONING}\n#### {g}", f"The answer is {g}."],
        "trailing_zeros": [f"{REASONING}\nAnswer: {g}.0", f"{REASONING}\nAnswer: {g}.00", tags(f"{g}.0")] if integer else [],
        "currency": [f"{REASONING}\nAnswer: ${g}", tags(f"${g}")],
        "thousands_separator": [] if comma is None else [f"{REASONING}\nAnswer: {comma}", tags(comma)],
        "boxed": [f"{REASONING}\nThe answer is \\boxed{{{g}}}.", tags(f"\\boxed{{{g}}}")],
        "fraction": [] if fraction is None else [f"{REASONING}\nAnswer: {fraction}", tags(fraction),
                                                 tags(f"\\frac{{{fraction.split('/')[0]}}}{{{fraction.split('/')[1]}}}")],
        "whitespace": [f"{REASONING}\nAnswer:{g}", f"\n\n{REASONING}\n\nAnswer:   {g}  \n\n", tags(f"\n  {g}\n"),
                       f"  <think> {REASONING} </think>  <answer> {g} </answer>  "],
        "bold": [f"{REASONING}\nAnswer: **{g}**", tags(f"**{g}**")],
    }


def numeric_cases(prompt: str, answer) -> dict | None:
    """{probe: (kind, [completions])} for one numeric row; None when the gold is not a number."""
    gold = gold_number(answer)
    if gold is None:
        return None
    g, w = number_text(gold), number_text(wrong_value(gold))
    cases = {name: ("wrong", items) for name, items in wrong_probes(prompt, g, w, gold).items()}
    cases.update({name: ("right", items) for name, items in right_probes(g, gold).items()})
    return cases


# --- the structured-gold family ------------------------------------------------------------

def signed(value: float) -> str:
    """" + 42" or " - 7": a number as the last term of a sum."""
    return f" + {number_text(value)}" if value >= 0 else f" - {number_text(-value)}"


def structured_golds(gold: float) -> dict[str, dict]:
    r"""Structured golds built around the row's number g, each ending in g: {shape: {gold, same, altered}}.

    same: equivalent forms (right); altered: the structure with one part changed (wrong by construction).
    """
    g, c, h = number_text(gold), number_text(gold + 2), number_text(gold + 1)
    shapes = {
        "matrix": {"gold": rf"\begin{{pmatrix}} 1 & {c} \\ 3 & {g} \end{{pmatrix}}",
                   "same": [rf"\begin{{bmatrix}} 1 & {c} \\ 3 & {g} \end{{bmatrix}}"],
                   "altered": [rf"\begin{{pmatrix}} 1 & {c} \\ 3 & {h} \end{{pmatrix}}"]},
        "tuple": {"gold": f"({c}, {g})", "same": [rf"\left( {c}, {g} \right)"], "altered": [f"({g}, {c})", f"({c}, {h})"]},
        "interval": {"gold": rf"(-\infty, {g}]", "same": [rf"\left(-\infty, {g}\right]"],
                     "altered": [rf"(-\infty, {g})", rf"(-\infty, {h}]"]},
        "set": {"gold": rf"\{{{c}, {g}\}}", "same": [rf"\{{{g}, {c}\}}"], "altered": [rf"\{{{c}, {h}\}}"]},
        "equation": {"gold": f"y = 2x{signed(gold)}", "same": [f"y = {g} + 2x"], "altered": [f"y = 2x{signed(gold + 1)}"]},
        "expression": {"gold": f"(x + 2)^2 + (y{signed(-gold)})^2", "same": [f"(y{signed(-gold)})^2 + (x + 2)^2"],
                       "altered": [f"(x + 2)^2 + (y{signed(-gold - 1)})^2"]},
        "radical": {"gold": rf"{g}\sqrt{{2}}", "same": [rf"\sqrt{{2}} \cdot {g}"], "altered": [rf"{g}\sqrt{{3}}"]},
    }
    if gold == 0:
        del shapes["radical"]  # 0·√2 is the number 0 itself
    return shapes


def gold_entries(gold_text: str) -> list[str]:
    """The numbers written in a structured gold, in order (signs kept), without repeats."""
    return list(dict.fromkeys(re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", gold_text)))


def structured_cases(gold: float) -> list[dict]:
    """{probe, kind, completion, answer} items of the structured-gold family for one numeric row."""
    items = []

    def add(probe_name, kind, gold_text, completions):
        items.extend({"probe": probe_name, "kind": kind, "completion": c, "answer": gold_text} for c in completions)

    for shape in structured_golds(gold).values():
        text = shape["gold"]
        entries = gold_entries(text)
        last = entries[-1]
        add("structured_last_number", "wrong", text, [f"{REASONING}\nThe answer is \\boxed{{{last}}}.",
                                                       f"{REASONING}\nAnswer: {last}", tags(last), f"{REASONING}\n#### {last}"])
        add("structured_other_number", "wrong", text, [f"{REASONING}\n\\boxed{{{n}}}" for n in entries[:-1]])
        add("structured_altered", "wrong", text, [f"{REASONING}\n\\boxed{{{a}}}" for a in shape["altered"]]
            + [f"{REASONING}\nAnswer: ${a}$" for a in shape["altered"]])
        add("structured_plain", "right", text, [f"{REASONING}\nThe answer is \\boxed{{{text}}}.",
                                                f"{REASONING}\nAnswer: ${text}$", tags(f"${text}$")])
        add("structured_bare_latex", "right", text, [f"{REASONING}\nAnswer: {text}", tags(text)])
        add("structured_equivalent", "right", text, [f"{REASONING}\n\\boxed{{{same}}}" for same in shape["same"]])
    return items


# --- the countdown battery ----------------------------------------------------------------

def solve_countdown(numbers: list[int], target) -> str | None:
    """One equation over the numbers (each at most once, + - * /) that equals the target, or None."""
    goal = Fraction(str(target))
    for size in range(1, len(numbers) + 1):
        for chosen in itertools.permutations(numbers, size):
            for value, text in expressions(list(chosen)):
                if value == goal:
                    return text
    return None


def expressions(numbers: list[int]):
    """Every (value, text) of a left-to-right bracketed expression over the numbers in order."""
    if len(numbers) == 1:
        yield Fraction(numbers[0]), str(numbers[0])
        return
    for split in range(1, len(numbers)):
        for left_value, left in expressions(numbers[:split]):
            for right_value, right in expressions(numbers[split:]):
                yield left_value + right_value, f"({left} + {right})"
                yield left_value - right_value, f"({left} - {right})"
                yield left_value * right_value, f"({left} * {right})"
                if right_value != 0:
                    yield left_value / right_value, f"({left} / {right})"


def countdown_cases(prompt: str, target, numbers: list[int]) -> dict | None:
    """{probe: (kind, [completions])} for one countdown row; None when no equation reaches the target."""
    equation = solve_countdown(numbers, target)
    if equation is None:
        return None
    equation = equation[1:-1] if equation.startswith("(") and equation.endswith(")") else equation
    t, first = str(target), numbers[0]
    wrong = f"{equation} + 1"
    listed = ", ".join(map(str, numbers))
    reused = f"{equation} + {first} - {first}"
    absent = [n for n in range(2, 100) if n not in numbers][0]
    return {
        "empty_answer": ("wrong", [tags("", f"{equation} = {t}"), tags("  ", f"{equation} = {t}")]),
        "answer_in_reasoning_only": ("wrong", [tags(wrong, f"{equation} = {t}"), f"<think>Answer: {equation}</think>"]),
        "target_echoed": ("wrong", [f"Answer: {t}", tags(t), f"Answer: {t} = {t}"]),
        "prompt_echo": ("wrong", [f"Answer: {listed}", tags(listed)]),
        "number_reused": ("wrong", [f"Answer: {reused}", tags(reused)]),
        "number_not_given": ("wrong", [f"Answer: {equation} + {absent} - {absent}", f"Answer: {equation} * {absent} / {absent}"]),
        "wrong_equation": ("wrong", [f"Answer: {wrong}", tags(wrong), f"Answer: {wrong} = {t}"]),
        "retraction": ("wrong", [f"Answer: {equation}\nNo wait, it is {wrong}.", tags(f"{equation}. No wait, {wrong}")]),
        "negated": ("wrong", [f"The answer is not {equation}", tags(f"not {equation}")]),
        "repeated_or_nested_tags": ("wrong", [f"<answer>{wrong}</answer><answer>{equation}</answer>",
                                              f"<answer>{wrong} <answer>{equation}</answer></answer>"]),
        "padded_with_target": ("wrong", [tags(wrong, " ".join([t] * PAD_REPEATS))]),
        "hidden_markup": ("wrong", [f"Answer: ~~{equation}~~ {wrong}", tags(f"{wrong}<!-- {equation} -->")]),
        "truncated": ("wrong", [f"<think>{equation} = {t}", f"<answer>{equation}"]),
        "plain": ("right", [f"Answer: {equation}", tags(equation), f"{REASONING}\nAnswer: {equation} = {t}"]),
        "unicode_operators": ("right", [f"Answer: {equation.replace('*', '×').replace('/', '÷')}"]),
        "no_spaces": ("right", [f"Answer: {equation.replace(' ', '')}", tags(equation.replace(' ', ''))]),
        "whitespace": ("right", [f"\n\nAnswer:   {equation}  \n", tags(f"\n {equation} \n")]),
        "latex_times": ("right", [f"Answer: ${equation.replace('*', chr(92) + 'times ')}$"]),
        "bold": ("right", [f"Answer: **{equation}**"]),
    }


# --- scoring ------------------------------------------------------------------------------

def reward_max(fn, max_scores: dict | None = None) -> float:
    """The score that means "fully correct": max_scores[name], else the `scale`/`bonus` parameter, else 1.0."""
    name = getattr(fn, "__name__", "reward")
    if max_scores and name in max_scores:
        return float(max_scores[name])
    return default_reward_max(fn)


def build_battery(prompts: list, answers: list, columns: dict | None = None, battery: str = "numeric") -> list[dict]:
    """Flat list of {probe, kind, family, completion, row} items for every row the battery applies to.

    The numeric battery adds the structured-gold family for its first STRUCTURED_ROWS numeric rows:
    items with their own gold (a matrix, tuple, interval, set, equation, expression or radical
    ending in the row's number) and a prompt without numbers.
    """
    columns = columns or {}
    items, structured_rows = [], 0
    for row, (prompt, answer) in enumerate(zip(prompts, answers)):
        if battery == "countdown":
            cases = countdown_cases(str(prompt), columns["target"][row], [int(n) for n in columns["nums"][row]])
        else:
            cases = numeric_cases(str(prompt), answer)
        for probe_name, (kind, completions) in (cases or {}).items():
            items.extend({"probe": probe_name, "kind": kind, "family": battery, "completion": c, "row": row}
                         for c in completions)
        if battery == "numeric" and cases and structured_rows < STRUCTURED_ROWS:
            structured_rows += 1
            items.extend({**item, "family": STRUCTURED, "row": row, "prompt": "Give the exact answer."}
                         for item in structured_cases(gold_number(answer)))
    return items


def score_battery(fn, items: list[dict], prompts: list, answers: list, columns: dict) -> list:
    """Scores of one reward for every battery item, in batches, with the row's columns as keyword lists."""
    scores = []
    for start in range(0, len(items), BATCH_SIZE):
        batch = items[start:start + BATCH_SIZE]
        rows = [item["row"] for item in batch]
        kwargs = {"prompts": [item.get("prompt", prompts[item["row"]]) for item in batch],
                  "answer": [item.get("answer", answers[item["row"]]) for item in batch]}
        kwargs.update({name: [values[r] for r in rows] for name, values in columns.items()})
        scores.extend(fn([item["completion"] for item in batch], **kwargs))
    return scores


def summarize(items: list[dict], scores: list, ceiling: float) -> dict:
    """False-positive/negative rates per family and overall, and per-probe counts (with one example of each failure).

    The overall rates are the worst family's, so a small family (structured gold) a reward fails is
    not averaged away by a large one it passes.

    None on a known-right structured-gold item is an abstention ("cannot judge", what a numeric
    reward must say about a matrix), not a miss: it counts in `abstained`, outside the
    false-negative rate. Everywhere else None is not credited.
    """
    probes: dict[str, dict] = {}
    for item, score in zip(items, scores):
        family = item.get("family", "numeric")
        entry = probes.setdefault(item["probe"], {"kind": item["kind"], "family": family, "credited": 0, "total": 0,
                                                  "none": 0, "abstained": 0})
        credited = is_success(score, ceiling)
        abstained = score is None and family == STRUCTURED and item["kind"] == "right"
        entry["total"] += 1
        entry["credited"] += int(credited)
        entry["none"] += int(score is None)
        entry["abstained"] += int(abstained)
        failed = credited if item["kind"] == "wrong" else not (credited or abstained)
        if failed and "example" not in entry:
            entry["example"] = item["completion"]
            entry["example_score"] = score
    families = {family: rates([p for p in probes.values() if p["family"] == family])
                for family in dict.fromkeys(p["family"] for p in probes.values())}
    worst = {key: max((f[key] for f in families.values()), default=0.0) for key in ("false_positive_rate", "false_negative_rate")}
    return {**worst, "max_score": ceiling, "families": families, "probes": probes}


def rates(entries: list[dict]) -> dict:
    """false_positive_rate over the wrong probes and false_negative_rate over the judged right ones."""
    wrong = [p for p in entries if p["kind"] == "wrong"]
    right = [p for p in entries if p["kind"] == "right"]
    judged = sum(p["total"] - p["abstained"] for p in right)
    return {"false_positive_rate": rate(sum(p["credited"] for p in wrong), sum(p["total"] for p in wrong)),
            "false_negative_rate": rate(sum(p["total"] - p["abstained"] - p["credited"] for p in right), judged),
            "abstained": sum(p["abstained"] for p in right)}


def rate(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def probe(reward_fns: list, prompts: list, answers: list, columns: dict | None = None, battery: str | None = None,
          max_scores: dict | None = None) -> dict:
    """Score the battery with every reward: {"rewards": {name: {false_positive_rate, false_negative_rate, probes}}, ...}.

    columns: extra dataset columns as lists (countdown needs nums and target); battery: "numeric" or
    "countdown" (default: countdown when columns has nums and target).
    """
    columns = dict(columns or {})
    battery = battery or ("countdown" if {"nums", "target"} <= set(columns) else "numeric")
    items = build_battery(prompts, answers, columns, battery)
    report = {"battery": battery, "rows": len(prompts), "completions": len(items), "threshold": THRESHOLD, "rewards": {}}
    for fn in reward_fns:
        scores = score_battery(fn, items, prompts, answers, columns)
        report["rewards"][fn.__name__] = summarize(items, scores, reward_max(fn, max_scores))
        if hasattr(fn, "drain_events"):
            fn.drain_events()
    return report


def probe_specs(specs: list[str], prompts: list, answers: list, columns: dict | None = None, **options) -> dict:
    """probe() for reward specs (registry names or path/file.py:function)."""
    from rewards.registry import get

    return probe([get(spec) for spec in specs], prompts, answers, columns, **options)


def probe_source(code: str, fn_names: list[str], prompts: list, answers: list, columns: dict | None = None,
                 **options) -> dict:
    """Probe reward functions defined in a code string (the studio's editor): written to a temp file, run in a child process."""
    from rewards.registry import get

    with tempfile.TemporaryDirectory(prefix="reward-probe-") as folder:
        path = os.path.join(folder, "edited_reward.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(code)
        reward_fns = []
        for name in fn_names:
            fn = get(f"{path}:{name}")
            fn.__name__ = name
            reward_fns.append(fn)
        try:
            return probe(reward_fns, prompts, answers, columns, **options)
        finally:
            for fn in reward_fns:
                stop_child(fn)


def stop_child(fn) -> None:
    """Stop the child process behind a user-file reward now rather than at garbage collection."""
    child = getattr(getattr(fn, "_compute", None), "child", None)
    if child is not None:
        child.kill()


# --- the readable table -------------------------------------------------------------------

def short(text, limit: int = 90) -> str:
    """One line of at most `limit` characters."""
    line = " ".join(str(text).split()) if "\n" not in str(text) else str(text).replace("\n", "⏎")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def format_table(report: dict) -> str:
    """Rates per reward, then every hack each reward falls for (and right forms it misses) with one example."""
    lines = [f"battery: {report.get('battery', 'numeric')}, {report.get('rows', '?')} prompts, "
             f"{report.get('completions', '?')} completions; credited = score >= {report.get('threshold', THRESHOLD)} × max",
             "", f"{'reward':<28} {'false positives':>16} {'false negatives':>16}   {'of which structured gold (FP / FN)':>34}"]
    for name, result in report["rewards"].items():
        family = result.get("families", {}).get(STRUCTURED)
        split = "" if family is None else (f"   {family['false_positive_rate']:>18.1%} / {family['false_negative_rate']:.1%}"
                                           + (f", {family['abstained']} abstained" if family["abstained"] else ""))
        lines.append(f"{name:<28} {result['false_positive_rate']:>16.1%} {result['false_negative_rate']:>16.1%}{split}")
    for name, result in report["rewards"].items():
        hacks = [(p, e) for p, e in result["probes"].items() if e["kind"] == "wrong" and e["credited"]]
        misses = [(p, e) for p, e in result["probes"].items()
                  if e["kind"] == "right" and e["credited"] + e.get("abstained", 0) < e["total"]]
        lines.append("")
        lines.append(f"{name}: " + ("falls for no probe" if not hacks else f"falls for {len(hacks)} probe kind(s)"))
        for probe_name, entry in hacks:
            lines.append(f"  HACK  {probe_name:<26} {entry['credited']:>4}/{entry['total']:<4} e.g. {short(entry['example'])!s}")
        for probe_name, entry in misses:
            missed = entry["total"] - entry["credited"] - entry.get("abstained", 0)
            lines.append(f"  miss  {probe_name:<26} {missed:>4}/{entry['total']:<4} "
                         f"e.g. {short(entry['example'])!s}")
    return "\n".join(lines)


__all__ = ["THRESHOLD", "probe", "probe_specs", "probe_source", "format_table", "build_battery"]
