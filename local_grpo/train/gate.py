"""The learnability gate: before step 1, is there anything for GRPO to learn?

GRPO learns from groups whose completions differ in reward. When the starting model solves (almost)
nothing, every group is all wrong: p_ref = 0 is a fixed point of the dynamics (docs/dynamics.md), and
the other reward terms (format) teach only their own target. When it solves (almost) everything, every
group is all right. `check` judges the p_ref measurement train makes before step 1 (RUN_DIR/p_ref.json:
grpo.p_ref_samples sampled completions on each of grpo.p_ref_prompts held-out prompts, judged by the
success reward) and stops the run with NotLearnable, a report of the numbers and the remedies, when

    too hard   the one-sided 95 % upper bound on the success rate is below RATE_FLOOR
    too easy   the one-sided 95 % lower bound is above 1 - RATE_FLOOR

A small rate is not zero: the quickstart learns from a sampled success of about 2 % (7 right in 384
sampled completions over four seeds; none in the first 32 on two of them, docs/dynamics.md). So while
the measurement has no success (or no failure) at all, the gate samples more, about CONFIRM_CHUNK
completions at a time over up to CONFIRM_PROMPTS held-out prompts, until one turns up or
CONFIRM_COMPLETIONS are measured: it stops on "none right in about 300" (the bound is then below 1 %),
which a task at the quickstart's rate gives with probability 0.981^300 = 0.3 %. A measurement under
MIN_COMPLETIONS (the default is 32) is not judged. `--force` trains anyway. `cap_advice` says when the
length cap is the problem; `rewards check` uses it too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import rundir
from ..config import Config
from ..errors import UserError
from ..output import notice

MIN_COMPLETIONS = 32  # the default measurement (8 prompts x 4 samples); fewer are not judged
RATE_FLOOR = 0.01  # "almost none": 95 % sure the success rate is below this (or above 1 - this)
CONFIDENCE = 0.95  # of the one-sided Clopper-Pearson bounds
CONFIRM_COMPLETIONS = 300  # none (or all) right so far: sample until this many in all (0 of 300: bound < 0.01) ...
CONFIRM_PROMPTS = 32  # ... over up to this many held-out prompts ...
CONFIRM_CHUNK = 32  # ... about this many at a time, stopping at the first success (or failure)
CUT_SHARE = 0.25  # the cap is the problem when at least this share of completions reached it ...
CUT_FAILED_SHARE = 0.5  # ... and at least this share of those failed
EVENT_KIND = "not_learnable"  # the alert's kind in events.jsonl (rundir.SIGNAL_KINDS)


class NotLearnable(UserError):
    """The gate stopped the run before step 1. The message is the gate's report: a headline and a few
    indented lines (the numbers, the remedies with their flags, where the evidence is)."""


@dataclass(frozen=True)
class Measured:
    """The p_ref counts the gate judges (from p_ref.json)."""

    successes: int
    completions: int
    prompts: int
    prompts_with_success: int
    cut: int | None  # completions that reached grpo.max_completion_length (None: not recorded)
    cut_failed: int | None  # of those, the ones the success reward did not credit

    @classmethod
    def from_p_ref(cls, *measurements: dict) -> "Measured":
        """The counts of one or more measurements (p_ref.json, measure_p_ref results); a prompt measured in
        several counts once among the prompts."""
        rows = [r for m in measurements for r in m.get("per_prompt") or [] if int(r.get("samples") or 0) > 0]
        recorded = bool(rows) and all("cut" in r for r in rows)
        prompts = {}
        for r in rows:
            prompts[r.get("prompt")] = prompts.get(r.get("prompt"), 0) + int(r.get("successes") or 0)
        return cls(successes=sum(int(r.get("successes") or 0) for r in rows),
                   completions=sum(int(r["samples"]) for r in rows), prompts=len(prompts),
                   prompts_with_success=sum(1 for k in prompts.values() if k > 0),
                   cut=sum(int(r["cut"]) for r in rows) if recorded else None,
                   cut_failed=sum(int(r.get("cut_failed") or 0) for r in rows) if recorded else None)


def binomial_bounds(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds (low, high) on a success rate from k successes in n trials: each
    holds with probability `confidence` (k = 0 gives high = 1 - (1 - confidence)^(1/n))."""
    alpha = 1.0 - confidence
    if n <= 0:
        return 0.0, 1.0
    low = 0.0 if k <= 0 else _solve(lambda p: 1.0 - _binomial_cdf(k - 1, n, p) - alpha)  # P(X >= k) = alpha
    high = 1.0 if k >= n else _solve(lambda p: alpha - _binomial_cdf(k, n, p))  # P(X <= k) = alpha
    return low, high


def _binomial_cdf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                                 + (n - i) * log_q) for i in range(k + 1)))


def _solve(increasing, low: float = 0.0, high: float = 1.0) -> float:
    """The root of an increasing function on [low, high] by bisection (to ~1e-12)."""
    for _ in range(60):
        middle = (low + high) / 2
        if increasing(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def judge(successes: int, completions: int) -> str:
    """too_hard, too_easy, learnable, or too_few (fewer than MIN_COMPLETIONS: not judged)."""
    if completions < MIN_COMPLETIONS:
        return "too_few"
    low, high = binomial_bounds(successes, completions)
    if high < RATE_FLOOR:
        return "too_hard"
    if low > 1.0 - RATE_FLOOR:
        return "too_easy"
    return "learnable"


def more_needed(successes: int, completions: int) -> int:
    """Completions still to sample before judging: while none (or all) are right and `judge` has not
    decided, up to CONFIRM_COMPLETIONS in all; else 0."""
    if 0 < successes < completions or judge(successes, completions) != "learnable":
        return 0
    return max(0, CONFIRM_COMPLETIONS - completions)


def cap_is_the_problem(cut: int | None, cut_failed: int | None, completions: int) -> bool:
    """At least CUT_SHARE of the completions reached the length cap and at least CUT_FAILED_SHARE of those
    failed: the cap cuts answers off."""
    return bool(cut and completions and cut >= CUT_SHARE * completions and (cut_failed or 0) >= CUT_FAILED_SHARE * cut)


def cap_flags(cap: int, max_seq_length: int | None = None) -> str:
    """The flags that double the length cap (and the sequence limit, when the doubled cap would fill it)."""
    flags = f"--max-completion-length {2 * cap}"
    if max_seq_length is not None and 2 * cap >= max_seq_length:
        flags += f" --max-seq-length {max_seq_length + cap}"
    return flags


def cap_advice(cut: int | None, cut_failed: int | None, completions: int, cap: int,
               max_seq_length: int | None = None) -> str | None:
    """One line with the flags to raise the length cap when it is the problem (`cap_is_the_problem`), else None."""
    if not cap_is_the_problem(cut, cut_failed, completions):
        return None
    return (f"{cap_flags(cap, max_seq_length)}: {cut} of {completions} completions ({cut / completions:.0%}) "
            f"reached the {cap}-token cap (grpo.max_completion_length) and {cut_failed} of them failed: "
            "the cap cuts answers off")


def measured_line(m: Measured) -> str:
    low, high = binomial_bounds(m.successes, m.completions)
    return (f"{m.successes} of {m.completions} sampled completions succeed ({m.prompts_with_success} of {m.prompts} "
            f"held-out prompts with any success; 95% bounds on the success rate [{low:.2%}, {high:.2%}])")


def cut_line(m: Measured, cap: int) -> str:
    if m.cut is None:
        return f"cut at the {cap}-token cap: not recorded (p_ref.json from an older run)"
    return (f"cut at the {cap}-token cap (grpo.max_completion_length): {m.cut} of {m.completions} "
            f"({m.cut / max(1, m.completions):.0%}), {m.cut_failed} of them failed")


def remedies(verdict: str, m: Measured, config: Config) -> list[tuple[str, str]]:
    """(flags, why) for each remedy that applies, the cap first when it is the problem, --force last."""
    g = config.grpo
    out = []
    if verdict == "too_hard":
        if cap_is_the_problem(m.cut, m.cut_failed, m.completions):
            out.append((cap_flags(g.max_completion_length, config.model.max_seq_length),
                        "a longer length cap: most completions were cut off before an answer"))
        out += [("--system-prompt TEXT", "ask for the answer in the layout the success reward reads"),
                ("--config FILE | --dataset FILE", "an easier task (data.task_options, e.g. arithmetic {digits: 1})"),
                ("--model NAME", "a stronger starting model (larger, instruction-tuned)"),
                (f"--num-generations {2 * g.num_generations}", "larger groups: more of them hold a success"),
                ("--resample-all-fail 2 --force", "retry groups with no success (DAPO): a rare success becomes a "
                                                  "signal (none at a true 0; docs/dynamics.md)")]
    else:
        out.append(("--config FILE | --dataset FILE",
                    "a harder task (data.task_options): all-right groups teach nothing"))
    out.append(("--force", "train anyway (with --overwrite to reuse this --output)"))
    return out


def report(verdict: str, m: Measured, config: Config, run) -> str:
    """The block NotLearnable carries: the headline, the numbers, the remedies, where the evidence is."""
    what = "none" if m.successes == 0 else "almost none" if verdict == "too_hard" else \
        "all" if m.successes == m.completions else "almost all"
    why = ("GRPO learns from groups with both right and wrong completions: with (almost) none right, (almost) no "
           "group carries a signal for the success reward (p_ref 0 is a fixed point)" if verdict == "too_hard" else
           "GRPO learns from groups with both right and wrong completions: all-right groups carry no signal")
    width = max(len(flags) for flags, _ in remedies(verdict, m, config))
    lines = [f"learnability gate: the starting model succeeds on {what} of the sampled completions; "
             "stopped before step 1, nothing trained",
             f"  measured: {measured_line(m)}",
             f"  {cut_line(m, config.grpo.max_completion_length)}",
             f"  {why}",
             "  try:"]
    lines += [f"    {flags:<{width}}  {reason}" for flags, reason in remedies(verdict, m, config)]
    lines.append(f"  evidence: {run.file(rundir.P_REF)} (per-prompt counts) and {rundir.EVENTS} (the gate's counts); "
                 "no checkpoint, no adapter")
    return "\n".join(lines)


def check(run, config: Config, p_ref: dict | None, held_out: list[dict], force: bool = False,
          measure=None) -> str:
    """Judge the starting model before step 1: raise NotLearnable (unless `force`) when the task is too hard
    or too easy for it; returns the verdict. Every outcome is an events.jsonl line (with the counts); a gate
    that cannot judge, or stops, says so on stderr too.

    `measure(rows, samples, seed)`: `samples` more sampled completions on each of `rows` with that seed (a
    measure_p_ref result, p_ref.measure_on), asked for chunk by chunk while none (or all) are right
    (`more_needed`); None: judge p_ref.json alone.
    """
    if not p_ref:
        message = ("learnability gate: not run: p_ref was not measured (grpo.p_ref_samples or grpo.p_ref_prompts "
                   "0, or no held-out prompts)")
        run.event("info", message, step=0)
        notice(message)
        return "not_measured"
    measurements = [p_ref]
    m = Measured.from_p_ref(p_ref)
    rows = held_out[:CONFIRM_PROMPTS]
    while (extra := more_needed(m.successes, m.completions)) and measure is not None and rows:
        samples = max(1, min(math.ceil(extra / len(rows)), math.ceil(CONFIRM_CHUNK / len(rows))))
        if len(measurements) == 1:
            which = "succeed" if m.successes == 0 else "fail"
            notice(f"learnability gate: none of the {m.completions} p_ref completions {which}; sampling up to "
                   f"{extra} more ({len(rows)} held-out prompts, {samples * len(rows)} at a time) until one does")
        measurements.append(measure(rows, samples, config.grpo.seed + len(measurements)))
        m = Measured.from_p_ref(*measurements)
    verdict = judge(m.successes, m.completions)
    counts = dataclasses.asdict(m)
    cap = config.grpo.max_completion_length
    if verdict == "too_few":
        message = (f"learnability gate: not judged: {m.completions} completions measured, fewer than "
                   f"{MIN_COMPLETIONS} (raise --p-ref-samples or --p-ref-prompts); {measured_line(m)}")
        run.event("info", message, step=0, verdict=verdict, **counts)
        notice(message)
        return verdict
    if verdict == "learnable":
        run.event("info", f"learnability gate: passed: {measured_line(m)}; {cut_line(m, cap)}", step=0,
                  verdict=verdict, **counts)
        return verdict
    if force:
        run.event("warning", f"learnability gate: {verdict.replace('_', ' ')} ({measured_line(m)}); "
                  "training anyway (--force)", step=0, verdict=verdict, **counts)
        notice(f"learnability gate: {verdict.replace('_', ' ')}, training anyway (--force): {measured_line(m)}")
        return verdict
    text = report(verdict, m, config, run)
    run.event("alert", text.splitlines()[0] + f": {measured_line(m)}", step=0, kind=EVENT_KIND, verdict=verdict,
              **counts)
    raise NotLearnable(text)
