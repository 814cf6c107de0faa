"""Where a GRPO step's time goes: generation, rewards, train (forward, backward, optimizer) and other.

The trainer hooks (trainer.py) and the run-directory callback time the phases as they happen; each
logged metrics.jsonl row gets the mean seconds per optimizer step since the last row:

    time/generation_s  the policy sampling completions (TRL's generation path)
    time/rewards_s     the reward functions, through the recorder and the safe wrapper
    time/train_s       the loss forward and backward, the no-grad log-prob passes, the optimizer step
    time/other_s       the rest of TRL's batch preparation (tokenising, advantages) and our callbacks

The four together are the step's wall time: TRL's `step_time` (which covers `training_step`, the
batch preparation included) plus the optimizer step and the callbacks, which TRL does not time.
The held-out eval hook (grpo.eval_steps) is left out; it reports its own `eval/seconds`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from ..rundir import STEP_TIME_KEYS as METRIC_KEYS  # time/<phase>_s; rundir reads them back (eta, breakdown)

PHASES = ("generation", "rewards", "train", "other")
assert METRIC_KEYS == tuple(f"time/{phase}_s" for phase in PHASES)
# measured spans; `prepare` (TRL's _prepare_inputs) contains generation, rewards and the no-grad log-probs
SPANS = ("training_step", "prepare", "generation", "rewards", "logprobs", "optimizer", "callbacks")


class StepTimer:
    """Accumulates wall time per span; `take(steps)` turns it into the four phases per step and resets."""

    def __init__(self):
        self.seconds = dict.fromkeys(SPANS, 0.0)
        self.depth = dict.fromkeys(SPANS, 0)
        self._open: dict[str, float] = {}

    @contextmanager
    def span(self, name: str):
        """Time the block under `name`; a re-entered span counts once (the outermost entry)."""
        self.start(name)
        try:
            yield
        finally:
            self.stop(name)

    def start(self, name: str) -> None:
        self.depth[name] += 1
        if self.depth[name] == 1:
            self._open[name] = time.perf_counter()

    def stop(self, name: str) -> None:
        if self.depth[name] == 0:
            return  # a stop without its start (e.g. the first optimizer callback after a resume)
        self.depth[name] -= 1
        if self.depth[name] == 0:
            self.seconds[name] += time.perf_counter() - self._open.pop(name)

    def phases(self) -> dict[str, float]:
        """Seconds per phase since the last take (the four sum to the steps' wall time)."""
        s = self.seconds
        return {
            "generation": s["generation"],
            "rewards": s["rewards"],
            "train": max(0.0, s["training_step"] - s["prepare"]) + s["logprobs"] + s["optimizer"],
            "other": max(0.0, s["prepare"] - s["generation"] - s["rewards"] - s["logprobs"]) + s["callbacks"],
        }

    def take(self, steps: int, exclude_other: float = 0.0) -> dict[str, float]:
        """time/<phase>_s per step over the last `steps` steps, then reset; `exclude_other` seconds (the
        held-out eval inside a callback) are taken out of other."""
        phases = self.phases()
        phases["other"] = max(0.0, phases["other"] - exclude_other)
        for name in SPANS:
            self.seconds[name] = 0.0
        steps = max(1, steps)
        return {key: round(phases[phase] / steps, 4) for phase, key in zip(PHASES, METRIC_KEYS)}
