"""Signal diagnostics: is the run getting a learning signal, and does reward still mean success?

Checks over the per-step metrics (metrics.jsonl records), used live (events.jsonl, once per kind
and level; a no-signal streak once per streak) and at the end (`signal_summary`, printed by `train`).
Each finding is an "alert" (something to act on) or an "info" line (worth knowing, not a fault):

    zero-std groups   mean frac_reward_zero_std: groups where every completion got the same reward
                      carry no GRPO gradient
    no-signal streak  >= NO_SIGNAL_STREAK consecutive steps with frac_reward_zero_std == 1
    length drift      mean completion length of the last WINDOW steps vs the first, outside
                      [1/LENGTH_DRIFT, LENGTH_DRIFT]: an alert while success is flat or falling,
                      info while success rises by >= SUCCESS_FLAT (the model learning to be brief
                      or thorough is the point of training)
    reward w/o success  reward up by >= REWARD_RISE while success moved < SUCCESS_FLAT (hacking sign)
    format w/o correctness  a format reward's mean >= FORMAT_SATURATED over the last WINDOW steps
                      while success there is 0
    held-out falling  (grpo.eval_steps) the latest eval/pass@1 is HELD_OUT_DROP or more below the best
                      earlier one while the mean reward of the WINDOW steps up to it rose by >= REWARD_RISE
                      over those up to the best: the onset of reward hacking (or over-fitting)

Learning-signal findings are kept apart from reward faults (a reward that raised, timed out or
returned bad values; the audit's verifier disagreeing): `rundir.event_category` sorts events.jsonl lines.

This module reads metrics and writes events; it does not change training.
"""

from __future__ import annotations

from .. import forecast
from ..rundir import BEST_ADAPTER, event_category

NO_SIGNAL_STREAK = 3
WINDOW = 5
LENGTH_DRIFT = 1.5
REWARD_RISE = 0.1
SUCCESS_FLAT = 0.02
FORMAT_SATURATED = 0.9
HELD_OUT_DROP = 0.1  # eval/pass@1 below its best by this much (2 of the default 16 eval prompts)


def _values(rows, key):
    return [r[key] for r in rows if isinstance(r.get(key), (int, float))]


def _mean(values):
    return sum(values) / len(values) if values else None


def _window(rows):
    """First and last window of steps: forecast.recent_steps of them (a quarter of the run, at least 1, at
    most 5), the window the train summary's reward and success lines use too."""
    w = forecast.recent_steps(len(rows))
    return rows[:w], rows[-w:]


def no_signal_streaks(rows) -> list[tuple[int, int]]:
    """(first_step, length) of each run of consecutive steps with frac_reward_zero_std == 1."""
    streaks, start, length = [], None, 0
    for r in rows:
        if r.get("frac_reward_zero_std") == 1:
            start, length = (r["step"] if length == 0 else start), length + 1
        else:
            if length:
                streaks.append((start, length))
            length = 0
    if length:
        streaks.append((start, length))
    return streaks


def findings(rows, format_rewards=()) -> list[dict]:
    """Every finding the metrics so far support: [{"kind", "level" ("alert" or "info"), "message", "step"}]."""
    out = []
    for start, length in no_signal_streaks(rows):
        if length >= NO_SIGNAL_STREAK:
            out.append({"kind": "no_signal_streak", "level": "alert", "step": start + NO_SIGNAL_STREAK - 1,
                        "message": f"no learning signal: every group had zero reward std for {length} steps "
                                   f"from step {start} (all right or all wrong; make tasks easier/harder or raise num_generations)"})
    falling = held_out_falling(rows)
    if falling:
        out.append(falling)
    if len(rows) < 2 * WINDOW:
        return out
    first, last = _window(rows)
    step = rows[-1]["step"]
    r0, r1 = _mean(_values(first, "reward")), _mean(_values(last, "reward"))
    s0, s1 = _mean(_values(first, "success")), _mean(_values(last, "success"))
    drift = length_drift(first, last, s0, s1)
    if drift:
        out.append({**drift, "step": step})
    if None not in (r0, r1, s0, s1) and r1 - r0 >= REWARD_RISE and abs(s1 - s0) < SUCCESS_FLAT:
        out.append({"kind": "reward_without_success", "level": "alert", "step": step,
                    "message": f"reward rose {r0:.3f} -> {r1:.3f} while success stayed at {s0:.3f} -> {s1:.3f}: "
                               "a reward-hacking sign (check completions.jsonl)"})
    for name in format_rewards:
        f1 = _mean(_values(last, f"rewards/{name}/mean"))
        if f1 is not None and s1 is not None and f1 >= FORMAT_SATURATED and s1 == 0:
            out.append({"kind": "format_without_correctness", "level": "alert", "step": step,
                        "message": f"format reward {name} saturated ({f1:.2f}) while success is 0 over the last {len(last)} steps"})
    return out


def held_out_falling(rows) -> dict | None:
    """The held-out-falling alert: the latest held-out eval well below the best earlier one while reward rose."""
    evals = [i for i, r in enumerate(rows) if isinstance(r.get("eval/pass@1"), (int, float))]
    if len(evals) < 2:
        return None
    latest = evals[-1]
    best = max(evals[:-1], key=lambda i: rows[i]["eval/pass@1"])  # the first of equal bests
    was, now = rows[best]["eval/pass@1"], rows[latest]["eval/pass@1"]
    r_best = _mean(_values(rows[max(0, best - WINDOW + 1): best + 1], "reward"))
    r_now = _mean(_values(rows[max(0, latest - WINDOW + 1): latest + 1], "reward"))
    if was - now < HELD_OUT_DROP or r_best is None or r_now is None or r_now - r_best < REWARD_RISE:
        return None
    return {"kind": "held_out_falling", "level": "alert", "step": rows[latest]["step"],
            "message": f"reward rose {r_best:.3f} -> {r_now:.3f} while held-out success fell from {was:.3f} "
                       f"(step {rows[best]['step']}) to {now:.3f} (step {rows[latest]['step']}): the onset of reward "
                       f"hacking or over-fitting; the best step's adapter is kept in {BEST_ADAPTER}/ (check completions.jsonl)"}


def alerts(rows, format_rewards=()) -> list[dict]:
    """The findings at alert level."""
    return [f for f in findings(rows, format_rewards) if f["level"] == "alert"]


def length_drift(first, last, s0, s1) -> dict | None:
    """The length-drift finding for the first/last windows (None when length stayed within bounds).

    An alert only while success is flat or falling (or unmeasured); with success rising it is info.
    """
    a, b = _mean(_values(first, "completions/mean_length")), _mean(_values(last, "completions/mean_length"))
    if not a or not b or 1 / LENGTH_DRIFT <= b / a <= LENGTH_DRIFT:
        return None
    moved, window = f"completion length moved from {a:.0f} to {b:.0f} tokens", f"(means of the first/last {len(last)} steps)"
    if s0 is not None and s1 is not None and s1 - s0 >= SUCCESS_FLAT:
        return {"kind": "length_drift", "level": "info",
                "message": f"{moved} while success rose {s0:.2f} -> {s1:.2f} {window}: learning, not a fault"}
    trend = "no success measured" if s0 is None or s1 is None else f"success {s0:.2f} -> {s1:.2f}"
    return {"kind": "length_drift", "level": "alert",
            "message": f"{moved} while success did not rise ({trend}) {window}: check completions.jsonl "
                       "for rambling or truncation"}


def signal_summary(rows, format_rewards=()) -> dict:
    """The end-of-run numbers: zero-std fraction, longest no-signal streak, length drift, alert kinds."""
    rows = [r for r in rows if "reward" in r]
    streaks = no_signal_streaks(rows)
    first, last = _window(rows) if rows else ([], [])
    zero_std = _mean(_values(rows, "frac_reward_zero_std"))
    found = findings(rows, format_rewards)
    return {
        "frac_zero_std": round(zero_std, 4) if zero_std is not None else None,
        "longest_no_signal_streak": max((n for _, n in streaks), default=0),
        "length_start": _round(_mean(_values(first, "completions/mean_length"))),
        "length_end": _round(_mean(_values(last, "completions/mean_length"))),
        "alerts": sorted({f["kind"] for f in found if f["level"] == "alert"}),
        "info": [f["message"] for f in found if f["level"] == "info"],
    }


def _round(value):
    return round(value, 4) if value is not None else None


def summary_lines(signal: dict | None) -> list[str]:
    """Lines for train.format_summary."""
    if not signal:
        return []
    lines = []
    if signal.get("frac_zero_std") is not None:
        lines.append(f"  zero-std groups: {signal['frac_zero_std']:.0%} of groups; longest no-signal streak "
                     f"{signal['longest_no_signal_streak']} steps")
    if signal.get("length_start") is not None:
        lines.append(f"  completion length: {signal['length_start']:.0f} -> {signal['length_end']:.0f} tokens")
    if signal.get("alerts"):
        lines.append(f"  signal alerts: {', '.join(signal['alerts'])} (see events.jsonl)")
    for message in signal.get("info") or []:
        lines.append(f"  signal info: {message}")
    return lines


def format_reward_names(reward_names: list[str]) -> list[str]:
    """The run's format rewards (by key), watched for saturating while success stays 0."""
    return [name for name in reward_names if "format" in name]


class AlertLog:
    """Writes each new finding the metrics support to events.jsonl once, as an `alert` or `info` event
    (RunDirCallback calls `update` with its in-memory rows after writing each metrics line). Findings
    already in events.jsonl (a resumed run) are not repeated."""

    def __init__(self, run, format_rewards=()):
        self.run = run
        self.format_rewards = list(format_rewards)
        self.reported = set()  # see _key
        for event in run.events():
            if event_category(event) in ("signal_alert", "signal_info"):
                self.reported.add(self._key(event["kind"], event["type"], event.get("step")))

    @staticmethod
    def _key(kind: str, level: str, step):
        """A streak once per streak; any other kind once per level (an info can later become an alert)."""
        return (kind, step) if kind == "no_signal_streak" else (kind, level)

    def update(self, rows: list[dict]) -> None:
        for found in findings(rows, self.format_rewards):
            key = self._key(found["kind"], found["level"], found["step"])
            if key in self.reported:
                continue
            self.reported.add(key)
            self.run.event(found["level"], found["message"], step=found["step"], kind=found["kind"])


def warn_inert_kl(run, config) -> None:
    """Warn up front about settings that make a KL term inert."""
    if config.kl_mode in ("mirror", "both") and config.grpo.num_iterations == 1:
        run.event("warning", f"grpo.kl {config.kl_mode}: with num_iterations 1 the policy never moves away from "
                  "the one that generated the batch, so the KL to it is zero; use num_iterations >= 2", step=0)
