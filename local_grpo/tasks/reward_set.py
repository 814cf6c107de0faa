"""The one reward-set builder: specs → reward functions under unique keys, their weights, and the success rule.

Train (the recorder), eval, `rewards check`, `rewards score` and the studio build their rewards here, so
a reward named twice is `format_soft` and `format_soft#2` everywhere (rewards.unique_keys), and success
is judged by one rule everywhere: the success reward's score >= 0.999 x its maximum (rewards.is_success).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RewardSpec
from ..errors import UserError


@dataclass
class RewardSet:
    """A run's rewards: `functions` (SafeRewards named by unique key) with `weights`, and the `success` reward.

    `success` is one of `functions` when the config trains on it, else an extra reward (weight 0) scored
    beside them; None when no success reward was asked for (`rewards score`).
    """

    functions: list
    weights: list[float]
    success: object | None = None

    @property
    def keys(self) -> list[str]:
        """The unique keys (metrics.jsonl, completions.jsonl, control.json, eval records, the studio)."""
        return [fn.__name__ for fn in self.functions]

    @property
    def scored(self) -> list:
        """Every function to score with: the weighted ones, then the success reward if it is an extra."""
        extra = self.success is not None and self.success not in self.functions
        return [*self.functions, self.success] if extra else list(self.functions)

    @property
    def success_key(self) -> str | None:
        return None if self.success is None else self.success.__name__

    def is_success(self, score) -> bool:
        """The success rule: the success reward's score >= 0.999 x its maximum."""
        import rewards

        return rewards.is_success(score, rewards.reward_max(self.success))

    def total(self, scores: dict) -> float:
        """sum of weight x score over the weighted rewards that scored (None counts 0, like TRL's nansum)."""
        return sum(w * scores[key] for key, w in zip(self.keys, self.weights) if scores.get(key) is not None)


def build_reward_set(specs: list[RewardSpec], success_reward: str | None = None, expand_files: bool = False,
                     field: str = "rewards") -> RewardSet:
    """Build each spec's reward once; a bad spec is a UserError naming its entry (`rewards[1]: ...`).

    success_reward: the spec (or unique key) of the reward that judges success; when no spec of the list
    is it, it is built apart (weight 0). expand_files: a bare `path/to/file.py` stands for each of its
    public functions at the spec's weight (`rewards score`).
    """
    import rewards

    functions, weights, names = [], [], []
    for i, spec in enumerate(specs):
        try:
            built = (rewards.load(spec.name, **spec.params) if expand_files
                     else [rewards.get(spec.name, **spec.params)])
        except rewards.RewardSpecError as exc:
            raise UserError(f"{field}[{i}]: {exc}") from None
        functions += built
        weights += [float(spec.weight)] * len(built)
        names += [spec.name] * len(built)
    success = None
    if success_reward:
        success = next((fn for fn, name in zip(functions, names) if name == success_reward), None)
    rewards.name_uniquely(functions)
    if success_reward and success is None:
        success = next((fn for fn in functions if fn.__name__ == success_reward), None)
    if success_reward and success is None:
        try:
            success = rewards.get(success_reward)
        except rewards.RewardSpecError as exc:
            raise UserError(f"success_reward: {exc}") from None
        rewards.name_uniquely([*functions, success])
    return RewardSet(functions, weights, success)
