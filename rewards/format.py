"""Format rewards: does the completion follow the requested layout? (Not whether the answer is right.)

Each public function here is a factory: it takes the reward's parameters and returns a function
with TRL's signature. Pure Python, in-process, total.
"""

from __future__ import annotations

import re

from rewards.extract import NUMBER, completion_texts


def tag_pair(tags) -> tuple[str, ...]:
    """Tag names from a tuple/list or a comma-separated string ("think,answer"); raises ValueError when empty."""
    names = tuple(t.strip() for t in (tags.split(",") if isinstance(tags, str) else tags))
    if len(names) < 1 or not all(re.fullmatch(r"[A-Za-z_][\w\-]*", n) for n in names):
        raise ValueError(f"tags must be tag names like ('think', 'answer'), got {tags!r}")
    return names


def format_strict(tags=("think", "answer"), scale: float = 1.0):
    """Whole completion is exactly <think>…</think> then <answer>…</answer> (non-empty answer). Range [0, scale]."""
    names = tag_pair(tags)
    blocks = r"\s*".join(rf"<{re.escape(n)}>(.*?)</{re.escape(n)}>" for n in names)
    layout = re.compile(rf"\s*{blocks}\s*", re.DOTALL)

    def score(text: str) -> float:
        match = layout.fullmatch(text)
        if not match or not match.group(len(names)).strip():
            return 0.0
        if any(text.count(f"<{n}>") != 1 or text.count(f"</{n}>") != 1 for n in names):
            return 0.0
        return scale

    def format_strict_reward(completions, **kwargs):
        return [score(t) for t in completion_texts(completions)]

    return format_strict_reward


def format_soft(tags=None, marker: str = "Answer:", scale: float = 1.0, trailing_penalty: float = 0.001):
    """Partial credit for the answer format: "Answer: <number>" last line by default, or tag layouts. Range [0, scale].

    Default (tags=None), four quarters: the text has a number; it has the marker exactly once; a
    number follows that marker; nothing but punctuation follows that number. A repeated marker earns
    only the first quarter: "Answer: 3\nAnswer: 7\n..." is the hack GRPO finds first when a format
    reward credits every marker (seen on the quickstart). With tags=("think", "answer"):
    half for each tag present exactly once, a quarter for the tags in order, a quarter for no text
    after the last closing tag (minus trailing_penalty per extra character).
    """
    if tags is not None:
        return tag_soft_reward(tag_pair(tags), scale, trailing_penalty)
    if not isinstance(marker, str) or not marker.strip():
        raise ValueError("marker must be a non-empty string such as 'Answer:'")
    marker_pattern = re.compile(re.escape(marker.strip()), re.IGNORECASE)

    def score(text: str) -> float:
        credit = 0.25 if NUMBER.search(text) else 0.0
        markers = list(marker_pattern.finditer(text))
        if len(markers) == 1:
            credit += 0.25
            tail = text[markers[0].end():]
            number = re.match(r"\s*" + NUMBER.pattern, tail)
            if number:
                credit += 0.25
                if re.fullmatch(r"[\s.!*]*", tail[number.end():]):
                    credit += 0.25
        return credit * scale

    def format_soft_reward(completions, **kwargs):
        return [score(t) for t in completion_texts(completions)]

    return format_soft_reward


def tag_soft_reward(names: tuple[str, ...], scale: float, trailing_penalty: float):
    """The tag-layout variant of format_soft (open-r1 tag_count + willccbb xmlcount trailing penalty)."""
    tags = [t for n in names for t in (f"<{n}>", f"</{n}>")]

    def score(text: str) -> float:
        credit = sum(0.5 / len(tags) for t in tags if text.count(t) == 1)
        positions = [text.find(t) for t in tags]
        if all(p >= 0 for p in positions) and positions == sorted(positions):
            credit += 0.25
        closing = f"</{names[-1]}>"
        if closing in text:
            trailing = text.rsplit(closing, 1)[1].strip()
            credit += max(0.0, 0.25 - trailing_penalty * len(trailing))
        return credit * scale

    def format_soft_reward(completions, **kwargs):
        return [score(t) for t in completion_texts(completions)]

    return format_soft_reward
