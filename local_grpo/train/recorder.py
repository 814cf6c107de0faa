"""The reward recorder: wraps the reward functions TRL calls so every score lands in completions.jsonl.

Each reward is keyed by its spec's unique key (`rewards.unique_keys`: format_soft, format_soft#2), the
same key in metrics.jsonl (TRL names its columns after the wrapped function), completions.jsonl,
control.json and the app. TRL calls the functions in order on one batch; when the last one has scored,
the recorder judges success, computes the weighted total and appends one CompletionRecord per completion.
For a tool task it also records each completion's turns (rundir.completion_turns) and writes the tools'
failed calls of the batch as tool_fault events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import rundir


@dataclass
class _Batch:
    """Scores of the batch being scored, filled reward by reward."""

    prompts: list = field(default_factory=list)
    completions: list = field(default_factory=list)
    answers: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # each completion's training-row index (the dataset's `row` column)
    scores: dict = field(default_factory=dict)


def prompt_text(prompt) -> str:
    """The user's question from a chat prompt (the last user turn), or the prompt string."""
    from rewards.extract import completion_text

    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users else completion_text(prompt)
    return str(prompt)


class RewardRecorder:
    """The run's reward functions, under their unique keys, with the recorder around each one."""

    def __init__(self, run: rundir.RunDir | None, reward_fns: list, weights: list[float], success_fn,
                 write: bool = True, tools: list | None = None):
        import rewards

        self.run = run
        self.reward_fns = rewards.name_uniquely(reward_fns)
        self.weights = list(weights)
        self.success_fn = success_fn
        self.write = write  # and only once a run directory is set
        self.tools = list(tools or [])  # a tool task's sandboxed tools (tasks.tools.sandboxed_tools)
        self.step = 0
        self.batch = _Batch()
        self.success_window: list[float] = []  # per-completion success since the last log
        self.on_scored = []  # callables(step, records) e.g. the zero-std filter and the audit
        self.on_event = []  # callables(fn, step, event) for each reward event, e.g. the reward-file record

    @property
    def names(self) -> list[str]:
        """The rewards' unique keys, in config order."""
        return [f.__name__ for f in self.reward_fns]

    def wrapped(self) -> list:
        return [self._wrap(i, fn) for i, fn in enumerate(self.reward_fns)]

    def _wrap(self, index: int, fn):
        def reward(completions, **kwargs):
            if index == 0:
                self.batch = _Batch(kwargs.get("prompts") or [], completions, kwargs.get("answer") or [],
                                    kwargs.get("row") or [])
                state = kwargs.get("trainer_state")
                self.step = (state.global_step + 1) if state is not None else self.step + 1
            scores = fn(completions, **kwargs)
            self.batch.scores[fn.__name__] = scores
            self._write_events(fn)
            if index == len(self.reward_fns) - 1:
                self._finish_batch(completions, kwargs)
            return scores

        reward.__name__ = fn.__name__
        return reward

    def _write_events(self, fn, step: int | None = None) -> None:
        step = self.step if step is None else step
        for event in fn.drain_events():
            for hook in self.on_event:
                hook(fn, step, dict(event))
            if self.write and self.run is not None:
                kind = event.pop("type", "reward_fault")
                message = event.pop("message", "")
                self.run.event(kind, message, step=step, **event)

    def judge(self, completions, step: int, **kwargs) -> list[int]:
        """Success (1/0) of completions scored outside a training batch (the periodic eval).

        The success reward's events (a fault, a reloaded file) are recorded at `step`, the first
        training step that will score with the code they report.
        """

        scores = self.success_fn(completions, **kwargs)
        self._write_events(self.success_fn, step)
        return self.successes(scores)

    def successes(self, scores: list) -> list[int]:
        """1/0 per success-reward score, by the one success rule (rewards.is_success: >= 0.999 x its maximum)."""
        import rewards

        maximum = rewards.reward_max(self.success_fn)
        return [int(rewards.is_success(s, maximum)) for s in scores]

    def _finish_batch(self, completions, kwargs) -> None:
        from rewards.extract import completion_text

        success_scores = self.batch.scores.get(self.success_fn.__name__)
        if success_scores is None or self.success_fn not in self.reward_fns:
            success_scores = self.success_fn(completions, **kwargs)
            self._write_events(self.success_fn)
        success = self.successes(success_scores)
        self.success_window.extend(success)
        self._write_tool_faults()
        records = []
        for i, completion in enumerate(completions):
            per_reward = {n: self.batch.scores[n][i] for n in self.names}
            total = sum(w * s for w, s in zip(self.weights, per_reward.values()) if s is not None)
            records.append(rundir.CompletionRecord(
                step=self.step,
                prompt=prompt_text(self.batch.prompts[i]) if i < len(self.batch.prompts) else "",
                completion=completion_text(completion),
                answer=self.batch.answers[i] if i < len(self.batch.answers) else None,
                rewards=per_reward,
                total=round(total, 6),
                success=success[i],
                turns=rundir.completion_turns(completion) if self.tools else None,
                row=int(self.batch.rows[i]) if i < len(self.batch.rows) else None,
            ).to_json())
        if self.write and self.run is not None:
            self.run.append_all(rundir.COMPLETIONS, records)
        for hook in self.on_scored:
            hook(self.step, records)

    def _write_tool_faults(self) -> None:
        """The tools' failed calls while this batch was generated, as tool_fault events at this step."""
        for tool in self.tools:
            for fault in tool.drain_events():
                if self.write and self.run is not None:
                    self.run.event(rundir.TOOL_FAULT, fault.pop("message"), step=self.step, **fault)

    def take_success(self) -> float | None:
        """Mean success since the last call (None when nothing was scored)."""
        window, self.success_window = self.success_window, []
        return sum(window) / len(window) if window else None
