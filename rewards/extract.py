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
    """The rest of the line after the last "Answer:" / "answer is" / "####" marker, or None without a marker."""
    matches = list(ANSWER_MARKER.finditer(text))
    if not matches:
        return None
    return text[matches[-1].end():].split("\n", 1)[0]


def final_answer(text: str) -> tuple[str | None, str]:
    """The final answer string of a region and where it came from: "marker", "boxed", "last_number" or "none".

    Priority: the number after the last answer marker; else the last \\boxed{}; else the last number.
    """
    tail = after_last_marker(text)
    if tail is not None and first_number(tail) is not None:
        return tail.strip(), "marker"
    boxes = boxed_contents(text)
    if boxes:
        return boxes[-1].strip(), "boxed"
    numbers = list(NUMBER.finditer(text))
    fractions = list(LATEX_FRAC.finditer(text))
    if fractions and (not numbers or fractions[-1].end() >= numbers[-1].end()):
        return fractions[-1].group(0), "last_number"  # \frac{1}{2}, not its denominator
    if numbers:
        last = numbers[-1]
        if OPERAND_BEFORE.search(text[: last.start()]):
            return None, "none"
        return last.group(0).strip(), "last_number"
    return None, "none"


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
    latex = LATEX_FRAC.search(text)
    match = NUMBER.search(text)
    if latex and (match is None or latex.start() <= match.start()):
        denominator = int(latex.group(2))
        return int(latex.group(1)) / denominator if denominator else None
    for match in NUMBER.finditer(text):
        try:
            return number_from_match(match)
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
    return None


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
    """The numeric gold answer (GSM8K "#### n", \\boxed{}, plain numbers), or None when there is none."""
    text = gold_text(gold)
    boxes = boxed_contents(text)
    if boxes:
        text = boxes[-1]
    answer, _ = final_answer(text)
    return first_number(answer) if answer is not None else None


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
    if source == "last_number" and prompt_text and echoes_prompt(region, prompt_text):
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
