"""Hints from worked solutions (grpo.hints): a prompt whose whole group failed sees the start of its solution.

A group whose completions all fail has equal rewards and gives GRPO no gradient. When the task's rows
carry a worked solution (Task.solutions: a `solution` column, one step a line), a prompt whose group is
more likely than not to fail as a whole (prompt_stats.PromptStats.chance_all_fail >= HINT_WHEN: its
beta posterior, which starts at the measured p_ref, so at a p_ref near 0 an unseen prompt is hinted
too) is drawn with its user turn ending in the solution's first steps, so that some completions can
succeed and the group has signal again; once its successes make a whole-group failure unlikely, the
prompt goes back to its plain form. The idea is "Learning to Hint for Reinforcement Learning" (2025),
with a fixed share of the solution instead of a learned hinter.

The first rule hinted only prompts whose own last group had failed: with 2 prompts a step drawn from
about 2000, no prompt came back within a 25-step run, and it hinted nothing (bench/remedies.py,
word_problems).

The loss covers only completion tokens: TRL never trains on prompt tokens, so the hint conditions the
model's own tokens and is not itself learned. The recorder keeps the prompt's last user turn, so
completions.jsonl shows the hinted prompt; its `row` keeps the prompt's identity.
"""

from __future__ import annotations

from ..config import Config
from ..errors import UserError
from ..tasks import builtin_names, get_task, task_for

HINT_FRACTION = 0.5  # share of a solution's words a hint shows, in whole steps (lines)
HINT_WHEN = 0.5  # hint a prompt when its group of num_generations fails as a whole with at least this chance
HINT_PREFIX = "\n\nHint: the solution begins: "


def check_config(config: Config) -> None:
    """grpo.hints on a task whose rows carry no worked solution: one UserError line, before anything loads."""
    if not config.grpo.hints or (task := task_for(config)).solutions:
        return
    with_solutions = [name for name in builtin_names() if get_task(name).solutions]
    raise UserError(f"grpo.hints: task {task.name!r} has no worked solutions to hint from; the tasks that have "
                    f"them: {', '.join(with_solutions)}, or a Task(solutions=True) whose rows carry a `solution` "
                    "column; turn grpo.hints off")


def hint_text(solution: str) -> str:
    """The start of a worked solution: its first steps (lines) up to HINT_FRACTION of its words, at least
    one, never the last step (the one that reaches the answer). A one-step solution gives its first
    HINT_FRACTION of words. Empty when there is nothing to show."""
    steps = [line.strip() for line in (solution or "").splitlines() if line.strip()]
    if not steps:
        return ""
    if len(steps) == 1:
        words = steps[0].split()
        return " ".join(words[:int(len(words) * HINT_FRACTION)])
    budget = HINT_FRACTION * sum(len(step.split()) for step in steps)
    shown, used = [steps[0]], len(steps[0].split())
    for step in steps[1:-1]:
        used += len(step.split())
        if used > budget:
            break
        shown.append(step)
    return " ".join(shown)


def hinted_prompt(prompt, hint: str):
    """A copy of a chat prompt (or a plain-text prompt) whose last user turn ends with the hint."""
    if isinstance(prompt, str):
        return prompt + HINT_PREFIX + hint
    messages = [dict(message) for message in prompt]
    last_user = max(i for i, message in enumerate(messages) if message.get("role") == "user")
    messages[last_user]["content"] = f"{messages[last_user]['content']}{HINT_PREFIX}{hint}"
    return messages


def hinted_row(row: dict) -> dict | None:
    """A copy of a row whose prompt ends with its solution's hint; None when the row has no solution to hint from."""
    hint = hint_text(row.get("solution") or "")
    return {**row, "prompt": hinted_prompt(row["prompt"], hint)} if hint else None


def longest_prompts(rows: list[dict]) -> list[dict]:
    """Each row as its prompt is at its longest: hinted where it has a solution. The prompt-length check
    (data.check_prompt_lengths) measures these when grpo.hints is on, since any prompt may be hinted."""
    return [hinted_row(row) or row for row in rows]


def with_hints(inputs: list[dict], prompt_stats, num_generations: int) -> tuple[list[dict], int]:
    """(the generation batch's rows, how many distinct prompts were hinted).

    A row whose group of `num_generations` is likely to fail as a whole (prompt_stats.chance_all_fail of
    its `row` column >= HINT_WHEN) and that has a non-empty `solution` becomes a hinted copy
    (`hinted_row`); every other row is the same object. The rows given are never changed.
    """
    rows, hinted, chance = [], set(), {}
    for row in inputs:
        index = row.get("row")
        if index is not None and int(index) not in chance:
            chance[int(index)] = prompt_stats.chance_all_fail(int(index), num_generations)
        likely_to_fail = index is not None and chance[int(index)] >= HINT_WHEN
        hinted_copy = hinted_row(row) if likely_to_fail else None
        rows.append(hinted_copy or row)
        if hinted_copy is not None:
            hinted.add(int(index))
    return rows, len(hinted)
