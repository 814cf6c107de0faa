"""Shared answer extraction: completion text, think/answer tags, final answers and numbers.

Every reward reads completions through these helpers so the extraction traps (empty or repeated
answer blocks, answers only inside the reasoning, the prompt's numbers echoed back) are handled in
one place. Pure functions of strings: total (never raise) and fast. No scoring here.
"""

from __future__ import annotations

import functools
import re

ANSWER_MARKER = re.compile(r"(?:\banswer\s*(?:is|:|=)|\banswer\b\s*\*\*\s*:?|####)\s*:?", re.IGNORECASE)
NUMBER = re.compile(
    r"(?<![\w.)\]])(?P<sign>[-−–]\s?)?(?P<currency>\\?[$€£¥]\s?)?(?P<sign2>[-−–])?"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?P<frac>\.\d+)?"
    r"(?:\s?/\s?(?P<den>\d+)(?![\d.]))?(?P<percent>\s?\\?%)?"
)
LATEX_FRAC = re.compile(r"\\d?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}")
OPERAND_BEFORE = re.compile(r"\d\s*[-+*/×÷x^]\s*$")
# A final answer that hedges: negated, retracted, or a value hidden by markup (strike-through, comments).
HEDGE = re.compile(r"\b(?:not|never|wait|actually|instead|correction|oops|sorry|no)\b|n't\b|~~|<(?:del|s|strike)\b"
                   r"|<!--|\\(?:x?cancel|sout)\b|display\s*:\s*none", re.IGNORECASE)
# Several candidate numbers offered as the answer: "42 or 43", "41, 42".
SEVERAL_NUMBERS = re.compile(r"\d\s*(?:,|;|\bor\b)\s+[-−–]?\\?\$?\s?\d", re.IGNORECASE)
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")
# A LaTeX command right after a number makes it a coefficient (5\pi, 5\sqrt{2}); units and spacing do not.
LATEX_COMMAND_AFTER = re.compile(r"\\(?!(?:text|mbox|mathrm|%|\$|,|;|!|quad|qquad)\b)[A-Za-z]")
# Markup a plain number may carry: \text{…} wrappers, degrees, LaTeX spacing, bold/code marks, $ signs.
TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°")
LATEX_SPACING = re.compile(r"\\(?:[,;:! ]|q?quad\b)")
SIGNED_FRAC = re.compile(r"(?P<sign>[-−–]\s*)?\\[dt]?frac\{\s*(?P<num>-?\d+)\s*\}\{\s*(?P<den>\d+)\s*\}")
# Left around a plain number these mean structure (an expression, a tuple, an equation), not units or prose.
STRUCTURE_CHARS = re.compile(r"[\\{}^_=+*/()\[\]<>|&×÷·\d]|(?<![A-Za-z])[A-Za-z](?![A-Za-z])")
# Words that are math when written bare (sin x, log 2), so they do not make a gold "prose".
MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "lim", "max", "min", "gcd", "lcm", "det", "mod",
              "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sqrt", "frac", "inf", "infty", "and", "or"}


def completion_text(completion) -> str:
    """The assistant text of one completion: a string, or a chat list of {"role", "content"} messages."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return message_text(completion)
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role") == "assistant"]
        return "".join(message_text(m) for m in (assistant or messages))
    return str(completion)


def message_text(message: dict) -> str:
    """The text content of one chat message (string content or a list of text parts)."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(p for p in parts if isinstance(p, str))
    return "" if content is None else str(content)


def completion_texts(completions) -> list[str]:
    """completion_text for every completion of a batch."""
    return [completion_text(c) for c in completions]


def strip_think(text: str, tag: str = "think") -> str:
    """The text outside the reasoning: drops <tag>…</tag> blocks, text before a lone closing tag, and an unclosed block."""
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    text = re.sub(re.escape(open_tag) + r".*?" + re.escape(close_tag), " ", text, flags=re.DOTALL)
    if close_tag in text:
        text = text.rsplit(close_tag, 1)[1]
    if open_tag in text:
        text = text.split(open_tag, 1)[0]
    return text


def tag_blocks(text: str, tag: str) -> list[str]:
    """Contents of every closed <tag>…</tag> block, in order."""
    return re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)


def answer_region(text: str, answer_tag: str = "answer", think_tag: str = "think") -> str | None:
    """Where the final answer may be: the one non-empty answer block if answer tags are used, else the visible text.

    Returns None when the completion uses answer tags but has no single non-empty answer block
    (empty, several, nested or unclosed blocks), when the stated answer hedges (negated, retracted,
    hidden by markup) or when it ends in an answer marker with nothing after it (truncated), so
    such completions never score as correct.
    """
    visible = strip_think(text, think_tag)
    if f"<{answer_tag}>" not in visible and f"</{answer_tag}>" not in visible:
        return None if hedged(final_span(visible)) or dangling_marker(visible) else visible
    blocks = tag_blocks(visible, answer_tag)
    if len(blocks) != 1 or not blocks[0].strip() or visible.count(f"<{answer_tag}>") != 1:
        return None
    return None if hedged(blocks[0]) or dangling_marker(blocks[0]) else blocks[0]


def final_span(region: str) -> str:
    """Where a plain completion states its answer: from the last answer marker to the end, else the sentence of the last number."""
    matches = list(ANSWER_MARKER.finditer(region))
    if matches:
        return region[matches[-1].start():]
    numbers = list(NUMBER.finditer(region))
    if not numbers:
        return ""
    last = numbers[-1]
    starts = [m.end() for m in SENTENCE_END.finditer(region, 0, last.start())]
    end = SENTENCE_END.search(region, last.end())
    return region[starts[-1] if starts else 0: end.end() if end else len(region)]


def hedged(span: str) -> bool:
    """True when the stated answer is negated, retracted ("No wait, …") or hidden by markup."""
    return bool(HEDGE.search(span))


def dangling_marker(region: str) -> bool:
    """True when the region ends in an answer marker with nothing after it (a truncated completion)."""
    matches = list(ANSWER_MARKER.finditer(region))
    return bool(matches) and not region[matches[-1].end():].strip(" \t\n:.*$")


def offers_several_numbers(region: str, tagged: bool = False) -> bool:
    """True when the stated answer (after the last marker, or the whole answer block) offers several numbers ("42 or 43", "41, 42")."""
    matches = list(ANSWER_MARKER.finditer(region))
    if matches:
        return bool(SEVERAL_NUMBERS.search(region[matches[-1].start():]))
    return tagged and bool(SEVERAL_NUMBERS.search(region))


def boxed_contents(text: str) -> list[str]:
    r"""Contents of every \boxed{…} (and \fbox{…}), with nested braces balanced."""
    contents = []
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            if text[index] == "{":
                depth += 1
            elif text[index] == "}":
                depth -= 1
                if depth == 0:
                    contents.append(text[start:index])
                    break
    return contents


def after_last_marker(text: str) -> str | None:
    """The answer after the last "Answer:" / "answer is" / "####" marker (its line, or the next non-blank line), or None without a marker."""
    matches = list(ANSWER_MARKER.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end():]
    stripped = rest.lstrip()
    if not stripped:
        return ""
    first_line = rest.split("\n", 1)[0]
    return first_line if first_line.strip() else stripped.split("\n", 1)[0]


def stated_answer(region: str) -> tuple[str, str]:
    r"""The final answer a region states, by the one multi-answer rule every correctness reward shares.

    The last \boxed{} wins (earlier boxes and any answer marker are ignored); without a box, the
    answer after the last answer marker; without either, the whole region. Returns (text, source)
    with source "boxed", "marker" or "region".
    """
    boxes = boxed_contents(region)
    if boxes:
        return boxes[-1], "boxed"
    tail = after_last_marker(region)
    if tail is not None and tail.strip():
        return tail, "marker"
    return region, "region"


def final_answer(text: str) -> tuple[str | None, str]:
    """The final answer string of a region for numeric rewards, and its source: "boxed", "marker", "last_number" or "none".

    stated_answer's rule (last box, else the marker's answer when it holds a number), else the last
    number of the region, unless that number sits inside LaTeX structure (\\sqrt{2}, x^2).
    """
    answer, source = stated_answer(text)
    if source == "boxed":
        return answer.strip(), "boxed"
    if source == "marker" and first_number(answer) is not None:
        return answer.strip(), "marker"
    numbers = list(NUMBER.finditer(text))
    fractions = list(LATEX_FRAC.finditer(text))
    if fractions and (not numbers or fractions[-1].end() >= numbers[-1].end()):
        return fractions[-1].group(0), "last_number"  # \frac{1}{2}, not its denominator
    if numbers:
        last = numbers[-1]
        if OPERAND_BEFORE.search(text[: last.start()]) or inside_latex_structure(text, last.start(), last.end()):
            return None, "none"
        return last.group(0).strip(), "last_number"
    return None, "none"


def inside_latex_structure(text: str, start: int, end: int) -> bool:
    r"""True when text[start:end] is part of a LaTeX structure: in braces or an exponent (\sqrt{2}, x^2, 2^{10}) or before a command (5\pi)."""
    before, after = text[:start].rstrip()[-1:], text[end:].lstrip()
    return before in ("{", "^", "_") or after[:1] in ("^", "_") or bool(LATEX_COMMAND_AFTER.match(after))


def number_from_match(match: re.Match) -> float:
    """The value of one NUMBER match: commas, currency, percent sign and a/b fractions handled."""
    value = float(match.group("int").replace(",", "") + (match.group("frac") or ""))
    if match.group("den"):
        denominator = int(match.group("den"))
        if denominator == 0:
            raise ValueError("zero denominator")
        value = value / denominator
    if match.group("sign") or match.group("sign2"):
        value = -value
    return value


def first_number(text: str) -> float | None:
    r"""The first number in text (also \frac{a}{b}), or None."""
    latex = SIGNED_FRAC.search(text)
    match = NUMBER.search(text)
    if latex and (match is None or latex.start() <= match.start()):
        return fraction_value(latex)
    for match in NUMBER.finditer(text):
        try:
            return number_from_match(match)
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
    return None


def fraction_value(match: re.Match) -> float | None:
    """The value of one SIGNED_FRAC match (-\\frac{1}{2} → -0.5), None for a zero denominator."""
    denominator = int(match.group("den"))
    if denominator == 0:
        return None
    value = int(match.group("num")) / denominator
    return -value if match.group("sign") else value


def plain_number(text: str) -> float | None:
    r"""The value when text states exactly one plain number, else None.

    A plain number may carry a sign, currency, thousands separators, a/b or \frac{a}{b}, a percent
    or degree sign, bold or $ marks and unit words ("12 dollars", "$1,234.50", "90^\circ"). Anything
    structured is not one number: a second number, an operator, a bracket, a variable, a LaTeX
    command ("5\sqrt{2}", "(1, 19)", "x = 5", "\begin{pmatrix}…"), so it is never read as its
    first or last number.
    """
    token = plain_number_match(text)
    if token is None:
        return None
    if "den" in token.groupdict() and "num" in token.groupdict():
        return fraction_value(token)
    try:
        return number_from_match(token)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def plain_number_latex(text: str) -> str | None:
    r"""plain_number's number as bare LaTeX ("$1,234.50" → "1234.50", "−\dfrac{1}{2}" → "-\frac{1}{2}", "50%" → "50\%"), or None."""
    token = plain_number_match(text)
    if token is None or plain_number(text) is None:
        return None
    groups = token.groupdict()
    sign = "-" if groups.get("sign") or groups.get("sign2") else ""
    if "num" in groups:
        return f"{sign}\\frac{{{groups['num']}}}{{{groups['den']}}}"
    number = groups["int"].replace(",", "") + (groups["frac"] or "")
    if groups["den"]:
        number = f"\\frac{{{number}}}{{{groups['den']}}}"
    return sign + number + ("\\%" if groups["percent"] else "")


def plain_number_match(text: str) -> re.Match | None:
    """The one SIGNED_FRAC or NUMBER match of a plain number (see plain_number), or None."""
    flat = TEXT_WRAPPER.sub(r" \1 ", str(text))
    flat = LATEX_SPACING.sub(" ", DEGREES.sub("", flat)).replace("\\$", "$").replace("\\%", "%")
    flat = re.sub(r"\*\*|`|\$", " ", flat)
    fractions = list(SIGNED_FRAC.finditer(flat))
    numbers = [m for m in NUMBER.finditer(flat) if not any(f.start() <= m.start() < f.end() for f in fractions)]
    if len(fractions) + len(numbers) != 1:
        return None
    token = (fractions or numbers)[0]
    rest = flat[: token.start()] + " " + flat[token.end():]
    if STRUCTURE_CHARS.search(rest) or re.match(r"[A-Za-z]", flat[token.end():]):
        return None
    return token


def has_words(text: str) -> bool:
    r"""True when text has words outside LaTeX commands and \text{…} ("forty two", "12 dollars"): prose, not a formula."""
    bare = re.sub(r"\\(?:begin|end|operatorname|mathbb|mathcal|mathfrak)\s*\{[^{}]*\}", " ", TEXT_WRAPPER.sub(" ", str(text)))
    bare = re.sub(r"\\[A-Za-z]+", " ", bare)
    return any(word.lower() not in MATH_WORDS for word in re.findall(r"[A-Za-z]{3,}", bare))


def has_math_delimiters(text: str) -> bool:
    r"""True when text marks its own math ($…$, \(…\), \[…\]); an escaped \$ is a currency sign, not a delimiter."""
    return bool(re.search(r"(?<!\\)\$|\\\(|\\\[", text))


def answer_phrase(tail: str) -> str:
    """The answer part of the text after a marker: up to the first sentence end, " (" or ", " ("85. (I first thought 84)" → "85")."""
    match = re.search(r"[.!?;](?=\s|$)|\s\(|,\s|\n", tail)
    return tail[: match.start()] if match else tail


def all_numbers(text: str) -> list[float]:
    """Every number in text, in order."""
    values = []
    for match in NUMBER.finditer(text):
        try:
            values.append(number_from_match(match))
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
    return values


def last_number(text: str) -> float | None:
    """The last number in text, or None."""
    values = all_numbers(text)
    return values[-1] if values else None


def gold_text(gold) -> str:
    """The gold answer as text: the part after "####" for GSM8K-style solutions, else the value as a string."""
    text = "" if gold is None else str(gold)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return text.strip()


def gold_number(gold) -> float | None:
    """The numeric gold answer (GSM8K "#### n", the last \\boxed{}, a plain number), or None when it is not one number.

    A structured gold (matrix, tuple, interval, expression, "5\\sqrt{2}") is None: numeric rewards
    cannot judge it, and it is never reduced to one of its numbers.
    """
    text = gold_text(gold)
    boxes = boxed_contents(text)
    return plain_number(boxes[-1] if boxes else text)


def echoes_prompt(text: str, prompt_text: str) -> bool:
    """True when the text has at least two numbers and every one of them appears in the prompt."""
    numbers = all_numbers(text)
    if len(numbers) < 2:
        return False
    prompt_numbers = prompt_number_set(prompt_text)
    return all(n in prompt_numbers for n in numbers)


@functools.lru_cache(maxsize=1024)
def prompt_number_set(prompt_text: str) -> frozenset[float]:
    """The numbers of a prompt (cached: a GRPO group shares its prompt)."""
    return frozenset(all_numbers(prompt_text))


def predicted_number(completion_text_: str, prompt_text: str = "", answer_tag: str = "answer") -> float | None:
    """The completion's final numeric answer, or None (no answer, empty/several answer blocks, echoed prompt)."""
    region = answer_region(completion_text_, answer_tag)
    if region is None or offers_several_numbers(region, tagged=f"<{answer_tag}>" in completion_text_):
        return None
    answer, source = final_answer(region)
    if answer is None:
        return None
    if source == "boxed":
        return plain_number(answer)
    if source == "marker":
        return plain_number(answer_phrase(answer))
    if prompt_text and echoes_prompt(region, prompt_text):
        return None
    return first_number(answer)


def prompt_texts(prompts, count: int) -> list[str]:
    """The prompt text for each completion (strings or chat lists), or empty strings when absent."""
    if not prompts or len(prompts) != count:
        return [""] * count
    return [prompt_as_text(p) for p in prompts]


def prompt_as_text(prompt) -> str:
    """All message contents of a prompt joined (a string prompt is returned as is)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        return "\n".join(message_text(m) for m in prompt if isinstance(m, dict))
    return "" if prompt is None else str(prompt)


def numbers_match(predicted: float | None, gold: float | None, tolerance: float = 1e-6) -> bool:
    """True when both are numbers and agree within a relative tolerance (absolute near zero)."""
    if predicted is None or gold is None:
        return False
    return abs(predicted - gold) <= tolerance * max(1.0, abs(gold))
