"""A task of your own in one file: reverse the letters of a word.

    local-grpo train --task examples/custom_task.py:task --max-steps 20
    local-grpo eval --run runs/reverse-...          # the run remembers the task file
    local-grpo rewards check --task examples/custom_task.py:task

docs/tasks.md walks through this file. Everything a task needs is the `task` object at the bottom:
where the rows come from, the prompt, how an answer is read, the rubric (rewards, weights, success)
and a verifier that judges independently of the rubric for the training-time audit.
"""

from __future__ import annotations

import random
import re
import string

from local_grpo.tasks import Rubric, Task, Verifier

# --- the data: n distinct rows from a seed ------------------------------------------------------


def make_examples(n: int, seed: int, options: dict) -> list[dict]:
    """`n` distinct words of random letters; each row has the question, the gold answer and the word.

    options (data.task_options): length, the letters per word (default 4).
    """
    length = int(options.get("length", 4))
    rng = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < n:
        words["".join(rng.choice(string.ascii_lowercase) for _ in range(length))] = None
    return [{"question": f"Reverse the letters of the word '{word}'.", "answer": word[::-1], "word": word}
            for word in words]


# --- the answer parser: what the model's reply states --------------------------------------------

ANSWER_LINE = re.compile(r"answer\s*:\s*(.*)", re.IGNORECASE)


def parse_answer(text: str) -> str | None:
    """The word after the last 'Answer:', without quotes, backticks, bold or a final period; None if there is none."""
    found = ANSWER_LINE.findall(text)
    if not found:
        return None
    answer = found[-1].strip().strip("'\"`*").rstrip(".").strip("'\"`*").strip()
    return answer.lower() if answer.isalpha() else None


# --- the rubric's rewards (they run in a child process with a time limit, like any reward file) ---


def completion_text(completion) -> str:
    """A completion as text (TRL passes chat completions as lists of messages)."""
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def reversal_correct(completions, answer, **kwargs) -> list[float]:
    """1.0 when the stated answer is the reversed word, else 0.0."""
    return [1.0 if parse_answer(completion_text(c)) == gold else 0.0 for c, gold in zip(completions, answer)]


def one_answer_line(completions, **kwargs) -> list[float]:
    """1.0 when the reply ends with exactly one 'Answer: <word>' line, else 0.0."""
    scores = []
    for c in completions:
        text = completion_text(c).strip()
        last = text.splitlines()[-1] if text else ""
        scores.append(1.0 if len(ANSWER_LINE.findall(text)) == 1 and ANSWER_LINE.match(last) and parse_answer(last)
                      else 0.0)
    return scores


# --- the verifier: a second opinion that shares no code with the rubric ---------------------------

PROMPT_WORD = re.compile(r"'([a-z]+)'")


def reversed_from_prompt(record: dict) -> bool | None:
    """Recompute the gold from the prompt's word and compare it with the last word of the reply's last line.

    It neither reads the answer column nor calls parse_answer: a reward that credits the wrong thing
    (a bug in the gold column, in parse_answer or in the rubric) shows up as audit/disagreement.
    """
    word = PROMPT_WORD.search(record.get("prompt") or "")
    if word is None:
        return None
    lines = [line for line in (record.get("completion") or "").splitlines() if line.strip()]
    words = re.findall(r"[A-Za-z]+", lines[-1]) if lines else []
    return bool(words) and words[-1].lower() == word.group(1)[::-1]


# --- the task -------------------------------------------------------------------------------------

task = Task(
    name="reverse",
    description="reverse the letters of a random word (data.task_options: length)",
    system_prompt="Reverse the letters of the word. End your reply with a last line 'Answer: <reversed word>'.",
    examples=make_examples,
    parse_answer=parse_answer,
    rubric=Rubric([(reversal_correct, 1.0), (one_answer_line, 0.2)], success=reversal_correct),
    verifier=Verifier.per_record("reversed-from-prompt", reversed_from_prompt),
)
