"""What a task is: one `Task` object holding its data, prompt, answer parser, rubric, verifier and tools.

    from local_grpo.tasks import Rubric, Task, Verifier

    task = Task(name="reverse", system_prompt="...", examples=make_examples, parse_answer=parse_answer,
                rubric=Rubric([reversal_correct, ("format_soft", 0.2)], success=reversal_correct),
                verifier=Verifier.per_record("reversed-word", check))

In the spirit of verifiers' `Environment(dataset, parser, rubric)`. The built-in tasks are defined this
way, one module each in local_grpo/tasks/builtin/; a user task is the same object in a Python file of
their own (`--task path/to/file.py:NAME`, docs/tasks.md). No torch or transformers here.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Callable

from ..config import DataConfig, RewardSpec
from ..errors import UserError


@dataclass(frozen=True)
class Source:
    """A table of rows to read (data.py reads it): a file, a folder or a hub id, and how to read its columns."""

    path: str
    question_column: str = "question"
    answer_column: str = "answer"
    answer_format: str = "plain"  # plain (the column as is) or gsm8k (the number after '####')
    field: str = "--dataset"  # the flag or config field that named `path`, for error messages


def _spec(item, where: str) -> RewardSpec:
    """A RewardSpec from a RewardSpec, a name, (name, weight), a dict, or a top-level function of a task file.

    A function becomes the spec `its/file.py:function`: like any user reward file it then runs in a
    child process with a time and memory limit (rewards/userfile.py).
    """
    if isinstance(item, RewardSpec):
        return item
    if isinstance(item, dict):
        return RewardSpec(**item)
    if isinstance(item, tuple) and len(item) == 2:
        spec = _spec(item[0], where)
        return RewardSpec(name=spec.name, weight=float(item[1]), params=spec.params)
    if isinstance(item, str):
        return RewardSpec(name=item)
    if callable(item):
        path = inspect.getsourcefile(item)
        if path is None or getattr(item, "__qualname__", "") != item.__name__:
            raise UserError(f"{where}: {item!r} is not a top-level function of a .py file")
        return RewardSpec(name=f"{os.path.abspath(path)}:{item.__name__}")
    raise UserError(f"{where}: expected a reward name, (name, weight), a RewardSpec or a function, got {item!r:.80}")


@dataclass(frozen=True)
class Rubric:
    """The rewards a run trains with when the config names none (with weights), and the one that judges success.

    `rewards` items: a RewardSpec, a registry name, (name or function, weight), or a top-level function of
    the task's file. `success`: the reward whose score decides success (the one rule: score >= 0.999 x its
    maximum, rewards.is_success); by default the first reward.
    """

    rewards: list = field(default_factory=list)
    success: object = None

    def specs(self) -> list[RewardSpec]:
        """The default rewards as RewardSpecs (fresh copies: a config may change them)."""
        specs = [_spec(item, f"rubric.rewards[{i}]") for i, item in enumerate(self.rewards)]
        return [RewardSpec(name=s.name, weight=float(s.weight), params=dict(s.params)) for s in specs]

    def success_reward(self) -> str:
        """The spec name of the reward that judges success."""
        if self.success is not None:
            return _spec(self.success, "rubric.success").name
        specs = self.specs()
        if not specs:
            raise UserError("rubric: names no reward (give rewards=[...] or success=...)")
        return specs[0].name


@dataclass(frozen=True)
class Verifier:
    """The audit's judge, independent of the rubric: records ({prompt, completion, answer, ...}) → True/False/None each.

    `function` takes the list of records (batch=True) or one record (Verifier.per_record). None means
    "cannot judge" (e.g. a gold that is not maths). It must share no code with the rubric's rewards: it
    is what catches a reward that credits wrong answers (local_grpo/train/audit.py; tests/test_tasks.py
    fails when a task's verifier is one of its rubric's rewards or imports the reward library).
    """

    name: str
    function: Callable
    batch: bool = True

    @classmethod
    def per_record(cls, name: str, check: Callable[[dict], bool | None]) -> "Verifier":
        """A verifier from a one-record check."""
        return cls(name, check, batch=False)

    def __call__(self, records: list[dict]) -> list:
        return list(self.function(records)) if self.batch else [self.function(r) for r in records]


def question_turn(row: dict) -> str:
    """The default user turn: the row's question."""
    return row["question"]


@dataclass(frozen=True)
class Task:
    """A whole task: where its rows come from, how a row becomes a prompt, the answer parser, rubric, verifier, tools.

    Rows are dicts with at least `question` and `answer` (the gold); other columns (countdown's
    `numbers`) reach the rewards as keyword arguments. Give exactly one of:
      examples(n, seed, options) -> n distinct rows (a generator; options = data.task_options), or
      source(data_config) -> Source (a table that data.py reads, shuffles with data.seed and truncates).
    tools: plain Python functions the model may call (a later change hands them to TRL's
    `GRPOTrainer(tools=...)`); None for a single-turn task.
    solutions: whether its rows carry a worked solution, as text in a `solution` column (grpo.hints shows
    a prompt whose group all failed the solution's start; train/hints.py).
    """

    name: str
    system_prompt: str
    rubric: Rubric
    verifier: Verifier
    parse_answer: Callable[[str], str | None]
    examples: Callable[[int, int, dict], list[dict]] | None = None
    source: Callable[[DataConfig], Source] | None = None
    user_turn: Callable[[dict], str] = question_turn
    description: str = ""
    tools: list[Callable] | None = None
    solutions: bool = False

    def __post_init__(self):
        if (self.examples is None) == (self.source is None):
            raise UserError(f"task {self.name!r}: give exactly one of examples=(n, seed, options) -> rows or "
                            "source=(data config) -> Source")

    def prompt(self, row: dict, system_prompt: str | None = None) -> list[dict]:
        """The chat prompt for a row: the system prompt (the task's, or `system_prompt` when given) and the user turn."""
        system = self.system_prompt if system_prompt is None else system_prompt
        messages = [{"role": "user", "content": self.user_turn(row)}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        return messages
