"""Training-time reward audit (`grpo.audit: true`): re-check the completions the reward likes best.

Each scored batch, the top-k completions by total reward that the reward "says are right" (total at
least half the sum of the positive reward weights, each reward being in [0, 1]) are re-judged by the
task's verifier (`Task.verifier`), which shares no code with the training rewards:
  arithmetic → the stated integer, parsed by the tasks' own parser, compared exactly with the gold;
  countdown  → the stated equation evaluated with exact fractions (numbers from the prompt);
  gsm8k / dataset → math-verify called directly on the stated answer, in a child process of its own;
  a user task → the verifier its file defines.
A disagreement (reward says right, verifier says wrong) is counted; `audit/disagreement` (fraction of
audited completions), `audit/audited` and `audit/seconds` go into metrics.jsonl, and an `alert` event
goes into events.jsonl (first disagreement, then at most once every ALERT_EVERY steps).
This module only reads records; it never changes rewards or training.
"""

from __future__ import annotations

import time

from ..tasks import Verifier, task_for

TOP_K = 4
CLAIM_FRACTION = 0.5  # "reward says right": total >= this × sum of positive weights
ALERT_EVERY = 10  # steps between repeated alerts


# --- the auditor --------------------------------------------------------------------------

def claimed_right(records: list[dict], weights: list[float], top_k: int = TOP_K) -> list[dict]:
    """The top-k records by total among those whose total says "right" (>= CLAIM_FRACTION × positive weights)."""
    ceiling = sum(w for w in weights if w > 0) or 1.0
    claimed = [r for r in records if (r.get("total") or 0.0) >= CLAIM_FRACTION * ceiling]
    return sorted(claimed, key=lambda r: r.get("total") or 0.0, reverse=True)[:top_k]


class Auditor:
    """An `on_scored` hook (step, records) and a metrics hook () → {"audit/...": value}."""

    def __init__(self, verifier: Verifier, weights: list[float], run=None, top_k: int = TOP_K):
        self.verifier_name, self.verify = verifier.name, verifier
        self.weights = weights  # the recorder's live list: weight changes from the app apply
        self.run = run
        self.top_k = top_k
        self.audited = 0
        self.disagreed = 0
        self.seconds = 0.0
        self.last_alert_step: int | None = None

    def on_scored(self, step: int, records: list[dict]) -> None:
        """Audit one scored batch; accumulate counts until the next metrics line."""
        started = time.perf_counter()
        audited = claimed_right(records, self.weights, self.top_k)
        verdicts = self.verify(audited) if audited else []
        wrong = [r for r, v in zip(audited, verdicts) if v is False]
        self.audited += sum(1 for v in verdicts if v is not None)
        self.disagreed += len(wrong)
        self.seconds += time.perf_counter() - started
        if wrong:
            self.alert(step, wrong, sum(1 for v in verdicts if v is not None))

    def alert(self, step: int, wrong: list[dict], audited: int) -> None:
        """One alert event in events.jsonl (then quiet for ALERT_EVERY steps)."""
        if self.run is None or (self.last_alert_step is not None and step - self.last_alert_step < ALERT_EVERY):
            return
        self.last_alert_step = step
        example = " ".join(str(wrong[0].get("completion", "")).split())[:160]
        self.run.event("alert", f"reward audit: {len(wrong)} of {audited} top-rewarded completions are wrong by "
                                f"the {self.verifier_name} verifier (gold {wrong[0].get('answer')!r}), e.g. {example!r}",
                       step=step, source="audit", disagreed=len(wrong), audited=audited)

    def metrics(self, step: int) -> dict:
        """A metric hook (called with the logged step): metrics since the last call: audit/disagreement (omitted when nothing was audited), audit/audited, audit/seconds."""
        values = {"audit/audited": self.audited, "audit/seconds": round(self.seconds, 4)}
        if self.audited:
            values["audit/disagreement"] = round(self.disagreed / self.audited, 4)
        self.audited, self.disagreed, self.seconds = 0, 0, 0.0
        return values


def attach_audit(config, run, recorder, callback) -> Auditor:
    """Create the auditor for a run and hook it into the recorder and the metrics callback."""
    auditor = Auditor(task_for(config).verifier, recorder.weights, run=run)
    recorder.on_scored.append(auditor.on_scored)
    callback.metric_hooks.append(auditor.metrics)
    run.event("info", f"reward audit on: top {auditor.top_k} completions per batch re-checked by the "
                      f"{auditor.verifier_name} verifier")
    return auditor
