"""Will this reward set teach? Sample the base model, score the samples, and say so before training.

    result = check_rewards(config, CheckSettings(prompts=8), progress=callback)
    result.verdict.text, result.to_dict()          # what `local-grpo rewards check --json` prints

`check_rewards` samples G = grpo.num_generations completions for each of the first K held-out
prompts from the *base* model (no adapter) through generation.generate, caches them as JSON lines
under runs/.reward-check-cache/ (keyed by a hash of model, prompts, G, seed and sampling settings;
a second check with the same key reads them back and loads no model), scores them with every
reward of the config, runs the soundness probe on the correctness rewards, and reports the numbers
and a verdict (docs/reward-check.md documents every key).

The numbers are pure functions over a list of ScoredSample (one per completion, `group` = prompt
index), so they can be checked on hand-made samples:

    zero_std_fraction   fraction of groups whose weighted totals are all equal
    variance_shares     each term's share of the advantage variance (formula at the function)
    agreement_tables    2x2 counts of where two rewards agree on "success", with examples
    pass_rates          per-prompt p_ref by the success reward (the success rule: score >= 0.999 x its maximum)
    truncation          completions that reached the length cap, and whether the cap is the problem
    decide_verdict      learnable / no signal (too hard, too easy) / a term dominates / unsound

This module never prints and has no argparse (the CLI is reward_check_cli.py); torch and the model
are imported only when samples must be generated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from . import dynamics
from .config import Config
from .errors import UserError
from .tasks import build_reward_set, task_for

DEFAULT_CACHE_DIR = os.path.join("runs", ".reward-check-cache")
CACHE_VERSION = 1
GENERATION_BATCH = 32  # completions generated at once
EQUAL_TOLERANCE = 1e-6  # totals closer than this count as equal (TRL: std ~ 0)

# Verdict thresholds (docs/reward-check.md explains each).
NO_SIGNAL_ZERO_STD = 0.85  # at least this fraction of groups with a constant total: no signal
DOMINANT_SHARE = 0.75  # a term other than the success reward with this share of the variance dominates
UNSOUND_FALSE_POSITIVE = 0.05  # a trained-on correctness reward crediting more known-wrong answers is unsound
MISSES_FALSE_NEGATIVE = 0.5  # above this the verdict warns that right answers go uncredited

Progress = Callable[[str, int, int], None]  # (stage, done, total)


# --- inputs and results -------------------------------------------------------------------

@dataclass(frozen=True)
class ScoredSample:
    """One completion of prompt `group` with every reward's score (None: the reward could not judge)."""

    group: int
    completion: str
    scores: dict
    tokens: int | None = None  # the completion's length in tokens (None: not known)


@dataclass
class CheckSettings:
    """How much to sample; everything else (G, seed, temperature, lengths) comes from the config."""

    prompts: int = 8  # held-out prompts (K)
    cache_dir: str = DEFAULT_CACHE_DIR
    use_cache: bool = True
    bins: int = 10  # histogram bins per reward
    examples: int = 3  # example completions per disagreement cell

    def check(self) -> "CheckSettings":
        if self.prompts < 1:
            raise UserError(f"--prompts: must be >= 1, got {self.prompts}")
        if self.bins < 1:
            raise UserError(f"--bins: must be >= 1, got {self.bins}")
        return self


@dataclass
class RewardStats:
    name: str
    weight: float
    success_threshold: float  # a score >= this counts as "success" (0.999 x the reward's maximum)
    mean: float | None
    std: float | None
    fraction_none: float
    histogram: dict  # {"edges": [bins + 1 floats], "counts": [bins ints]} over the non-None scores
    faults: dict = field(default_factory=dict)


@dataclass
class Agreement:
    """Where rewards `a` and `b` agree and disagree on success, over every sample."""

    a: str
    b: str
    both: int
    a_only: int
    b_only: int
    neither: int
    examples: dict  # {"a_only": [...], "b_only": [...]}: {"group", "completion", "scores"} each


@dataclass
class Verdict:
    kind: str  # learnable | no_signal_too_hard | no_signal_too_easy | term_dominates | unsound
    text: str  # the kind in plain words, e.g. "no signal (too hard at G=8)"
    reason: str
    warnings: list = field(default_factory=list)


@dataclass
class RewardCheck:
    """Everything `rewards check` reports (to_dict() is the --json object)."""

    model: str
    task: str
    num_generations: int
    prompts: int
    samples: int
    seed: int
    max_new_tokens: int
    temperature: float
    cache: dict
    seconds: dict
    rewards: list
    zero_std_fraction: float | None
    per_prompt: list
    p_ref: dict
    forecast: dict
    variance_scale: str
    variance_shares: dict
    agreement: list
    probe: dict
    truncation: dict
    verdict: Verdict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --- the pure numbers ---------------------------------------------------------------------

def weighted_total(scores: dict, weights: dict) -> float:
    """sum of weight x score over the rewards that scored (None counts 0, like TRL's nansum)."""
    return sum(w * scores[name] for name, w in weights.items() if scores.get(name) is not None)


def groups_of(samples: list[ScoredSample]) -> dict[int, list[ScoredSample]]:
    """Samples by group, in group order."""
    out: dict[int, list[ScoredSample]] = {}
    for sample in sorted(samples, key=lambda s: s.group):
        out.setdefault(sample.group, []).append(sample)
    return out


def zero_std_fraction(samples: list[ScoredSample], weights: dict, tolerance: float = EQUAL_TOLERANCE) -> float | None:
    """Fraction of groups whose weighted totals are all equal (GRPO gets no signal from those); None without samples."""
    groups = groups_of(samples)
    if not groups:
        return None
    flat = 0
    for members in groups.values():
        totals = [weighted_total(s.scores, weights) for s in members]
        flat += int(max(totals) - min(totals) <= tolerance)
    return flat / len(groups)


def variance_shares(samples: list[ScoredSample], weights: dict, scale: str = "group") -> dict:
    """Each term's share of the advantage variance; the shares sum to 1 (None when the total never varies).

    Within group g, c_ig = w_i·r_i − mean_g(w_i·r_i) is term i's centred contribution (None scores count
    0) and T_g = Σ_i c_ig the centred total, i.e. the advantage before scaling. Then

        share_i = Σ_g s_g⁻² Σ_j c_ijg·T_jg  /  Σ_g s_g⁻² Σ_j T_jg²

    with s_g the std of group g's totals when scale = "group" (GRPO divides each group's advantages by
    it, so every varying group weighs the same) and s_g = 1 for "batch" and "none". Since Σ_i c_ig = T_g
    the shares add up to 1; a term anti-correlated with the total gets a negative share.
    """
    numerators = {name: 0.0 for name in weights}
    denominator = 0.0
    for members in groups_of(samples).values():
        parts = {name: [w * (s.scores.get(name) or 0.0) for s in members] for name, w in weights.items()}
        centred = {name: [v - statistics.fmean(values) for v in values] for name, values in parts.items()}
        totals = [sum(centred[name][j] for name in weights) for j in range(len(members))]
        spread = sum(t * t for t in totals)
        if spread <= EQUAL_TOLERANCE ** 2 * len(members):
            continue
        factor = len(members) / spread if scale == "group" else 1.0  # 1 / s_g², s_g² = spread / n
        for name in weights:
            numerators[name] += factor * sum(c * t for c, t in zip(centred[name], totals))
        denominator += factor * spread
    if denominator == 0.0:
        return {name: None for name in weights}
    return {name: value / denominator for name, value in numerators.items()}


def pass_rates(samples: list[ScoredSample], success_name: str, maximum: float = 1.0) -> list[float]:
    """Per group (in group order): the fraction of its samples the success reward credits (rewards.is_success)."""
    from rewards import is_success

    return [statistics.fmean(float(is_success(s.scores.get(success_name), maximum)) for s in members)
            for members in groups_of(samples).values()]


def truncation(samples: list[ScoredSample], success_name: str, cap: int, maximum: float = 1.0,
               max_seq_length: int | None = None) -> dict:
    """Samples that reached the `cap` tokens: {"cap", "cut", "cut_failed" (of them, the success reward's
    failures), "samples", "advice"}; advice is the flag to raise the cap when it is the problem (the
    learnability gate's rule, train/gate.py cap_advice), else None."""
    from rewards import is_success

    from .train.gate import cap_advice

    cut = [s for s in samples if s.tokens is not None and s.tokens >= cap]
    failed = sum(1 for s in cut if not is_success(s.scores.get(success_name), maximum))
    return {"cap": cap, "cut": len(cut), "cut_failed": failed, "samples": len(samples),
            "advice": cap_advice(len(cut), failed, len(samples), cap, max_seq_length)}


def agreement_tables(samples: list[ScoredSample], maxima: dict, examples: int = 3) -> list[Agreement]:
    """For every pair of rewards (in `maxima` order): counts of both / a only / b only / neither succeeding.

    A reward "succeeds" on a sample by the success rule (rewards.is_success: score >= 0.999 x its
    maximum; None never succeeds). Each disagreement cell keeps up to `examples` samples.
    """
    from rewards import is_success

    names = list(maxima)
    tables = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            cells = {"both": 0, "a_only": 0, "b_only": 0, "neither": 0}
            kept: dict[str, list] = {"a_only": [], "b_only": []}
            for sample in samples:
                ok_a, ok_b = is_success(sample.scores.get(a), maxima[a]), is_success(sample.scores.get(b), maxima[b])
                cell = "both" if ok_a and ok_b else "a_only" if ok_a else "b_only" if ok_b else "neither"
                cells[cell] += 1
                if cell in kept and len(kept[cell]) < examples:
                    kept[cell].append({"group": sample.group, "completion": sample.completion,
                                       "scores": {a: sample.scores.get(a), b: sample.scores.get(b)}})
            tables.append(Agreement(a=a, b=b, examples=kept, **cells))
    return tables


def reward_stats(values: list, bins: int = 10) -> dict:
    """mean, population std, fraction None and a histogram ({"edges", "counts"}) of one reward's scores."""
    import numpy as np

    present = [float(v) for v in values if v is not None]
    histogram = {"edges": [], "counts": []}
    if present:
        counts, edges = np.histogram(present, bins=bins)
        histogram = {"edges": [round(float(e), 6) for e in edges], "counts": [int(c) for c in counts]}
    return {"mean": statistics.fmean(present) if present else None,
            "std": statistics.pstdev(present) if present else None,
            "fraction_none": 1 - len(present) / len(values) if values else 0.0,
            "histogram": histogram}


def decide_verdict(zero_std: float | None, p_refs: list[float], shares: dict, success_name: str,
                   probe_rates: dict, weights: dict, num_generations: int) -> Verdict:
    """The plain-words verdict, in order: unsound, then no signal, then a term dominates, else learnable.

    probe_rates: {reward: {"false_positive_rate", "false_negative_rate"}} of the probed correctness rewards.
    """
    warnings = [f"{name} misses {rates['false_negative_rate']:.0%} of the probe's right answers "
                "(it may not credit a correct completion written in another layout)"
                for name, rates in probe_rates.items() if rates["false_negative_rate"] > MISSES_FALSE_NEGATIVE]
    unsound = [name for name, rates in probe_rates.items()
               if rates["false_positive_rate"] > UNSOUND_FALSE_POSITIVE and (weights.get(name) or name == success_name)]
    if unsound:
        rates = ", ".join(f"{name} credits {probe_rates[name]['false_positive_rate']:.0%}" for name in unsound)
        return Verdict("unsound", "unsound", f"the soundness probe's known-wrong completions: {rates}; GRPO will "
                       "amplify the wrong answers it credits (see `local-grpo rewards probe`)", warnings)
    no_signal = no_signal_verdict(zero_std, p_refs, success_name, num_generations)
    if no_signal is not None:
        no_signal.warnings = warnings
        return no_signal
    varying = {name: share for name, share in shares.items() if share is not None}
    top = max(varying, key=lambda name: varying[name]) if varying else None
    if top is not None and top != success_name and varying[top] >= DOMINANT_SHARE:
        return Verdict("term_dominates", f"a term dominates ({top})",
                       f"{top} carries {varying[top]:.0%} of the advantage variance and the success reward "
                       f"{success_name} {varying.get(success_name, 0.0):.0%}: GRPO would mostly learn {top}", warnings)
    learning = sum(1 for p in p_refs if 0.0 < p < 1.0)
    return Verdict("learnable", "learnable",
                   f"{learning} of {len(p_refs)} prompts have both right and wrong completions at G={num_generations} "
                   f"(mean p_ref {statistics.fmean(p_refs):.2f}); {success_name} carries "
                   f"{varying.get(success_name, 0.0):.0%} of the advantage variance", warnings)


def no_signal_verdict(zero_std: float | None, p_refs: list[float], success_name: str,
                      num_generations: int) -> Verdict | None:
    """'no signal' when the success reward never (or always) passes, or most groups have a constant total."""
    at = f"at G={num_generations}"
    if not p_refs or all(p == 0.0 for p in p_refs):
        return Verdict("no_signal_too_hard", f"no signal (too hard {at})",
                       f"no completion of {len(p_refs)} prompts x {num_generations} passes {success_name}; other "
                       "terms can only teach their own target. Try more generations, an easier task or a stronger model")
    if all(p == 1.0 for p in p_refs):
        return Verdict("no_signal_too_easy", f"no signal (too easy {at})",
                       f"every completion passes {success_name}: there is nothing left to learn on these prompts")
    if zero_std is not None and zero_std >= NO_SIGNAL_ZERO_STD:
        failing, passing = sum(p == 0.0 for p in p_refs), sum(p == 1.0 for p in p_refs)
        kind = "too_hard" if failing >= passing else "too_easy"
        return Verdict(f"no_signal_{kind}", f"no signal ({kind.replace('_', ' ')} {at})",
                       f"{zero_std:.0%} of the groups have the same total for all {num_generations} completions "
                       f"({failing} prompts all wrong, {passing} all right)")
    return None


# --- the forecast -------------------------------------------------------------------------

def forecast(p_refs: list[float], config: Config) -> dict:
    """The dynamics module's success forecast from the per-prompt p_ref, with the run's KL settings."""
    from .train.p_ref import predictor_params

    params = predictor_params(config)
    steps = config.grpo.max_steps
    prediction = dynamics.predict_dataset(p_refs, steps=steps, **params)
    calibrated = config.kl_mode != "none"
    note = ("beta > 0: the step size comes from the run's KL coefficient" if calibrated else
            f"no KL (beta {config.grpo.beta:g}): the forecast uses a nominal step size (beta {params['beta']:.3g}), "
            "so it shows where success heads, not how many steps it takes (no calibrated speed)")
    # p_ref 0 or 1 is absorbing in the recurrence: such a prompt is forecast to stay where it is
    absorbing = sum(1 for p in p_refs if p in (0.0, 1.0))
    return {"params": params, "steps": steps, "p_ref_mean": prediction["p_ref_mean"], "p_star": prediction["p_star"],
            "success_at_max_steps": prediction["trajectory"][-1], "trajectory": prediction["trajectory"],
            "speed_calibrated": calibrated, "absorbing_prompts": absorbing, "note": note}


# --- sampling and the cache ---------------------------------------------------------------

def cache_key(config: Config, rows: list[dict]) -> dict:
    """What the samples depend on: model, prompts, G, seed and the sampling settings (and a tool task's tools,
    chat template and tool rounds)."""
    g = config.grpo
    model = os.path.abspath(config.model.name) if os.path.isdir(config.model.name) else config.model.name
    key = {"version": CACHE_VERSION, "model": model, "gguf_file": config.model.gguf_file, "dtype": config.model.dtype,
           "prompts": [row["prompt"] for row in rows], "num_generations": g.num_generations, "seed": g.seed,
           "max_new_tokens": g.max_completion_length, "temperature": g.temperature, "top_p": g.top_p}
    tools = task_for(config).tools
    if tools or config.model.chat_template:  # only then, so that the other tasks' cached samples stay valid
        key.update(chat_template=config.model.chat_template, tools=[fn.__name__ for fn in tools or []],
                   max_tool_rounds=(g.trl or {}).get("max_tool_calling_iterations"))
    return key


def cache_path(cache_dir: str, key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:20]
    return os.path.join(cache_dir, f"{digest}.jsonl")


def read_cache(path: str, key: dict, expected: int) -> list[dict] | None:
    """The cached sample lines when the file holds exactly this key's samples, else None."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not lines or lines[0].get("key") != key or len(lines) - 1 != expected:
        return None
    return lines[1:]


def write_cache(path: str, key: dict, samples: list[dict], seconds: float) -> None:
    """Header line {"key", "created", "seconds"}, then one {"group", "prompt", "answer", "completion", "tokens"} per sample."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "seconds": round(seconds, 1)},
                            ensure_ascii=False) + "\n")
        for sample in samples:
            fh.write(json.dumps(sample, ensure_ascii=False) + "\n")
    os.replace(partial, path)


def generate_samples(config: Config, rows: list[dict], progress: Progress | None = None) -> list[dict]:
    """G sampled completions per row from the base model (no adapter), through generation.generate (a tool task's
    completions call its tools, as in training)."""
    from . import backends, data
    from .generation import GenerationSettings, generate
    from .tasks.tools import max_tool_rounds, tools_for

    g = config.grpo
    settings = GenerationSettings(samples=g.num_generations, max_new_tokens=g.max_completion_length,
                                  temperature=g.temperature, top_p=g.top_p, seed=g.seed)
    loaded = backends.load_for_inference(config, None)
    data.check_prompt_lengths(config, loaded.tokenizer, [], rows)  # the rule train holds its prompts to
    per_batch = max(1, GENERATION_BATCH // g.num_generations)
    samples: list[dict] = []
    for batch_index, start in enumerate(range(0, len(rows), per_batch)):
        batch = rows[start:start + per_batch]
        sampled = generate(loaded.model, loaded.tokenizer, [row["prompt"] for row in batch], settings, sample=True,
                           batch_index=batch_index, tools=tools_for(config), max_tool_rounds=max_tool_rounds(config))
        for offset, (row, completions) in enumerate(zip(batch, sampled)):
            samples += [{"group": start + offset, "prompt": row.get("question"), "answer": row.get("answer"),
                         "completion": text, "tokens": tokens} for text, tokens in completions]
        if progress:
            progress("generate", len(samples), len(rows) * g.num_generations)
    return samples


def cached_samples(config: Config, rows: list[dict], settings: CheckSettings,
                   progress: Progress | None = None) -> tuple[list[dict], dict]:
    """The samples for these rows (from the cache when it has them) and {"path", "hit", "seconds"}."""
    key = cache_key(config, rows)
    path = cache_path(settings.cache_dir, key)
    expected = len(rows) * config.grpo.num_generations
    if settings.use_cache:
        found = read_cache(path, key, expected)
        if found is not None:
            if progress:
                progress("generate", expected, expected)
            return found, {"path": path, "hit": True, "seconds": 0.0}
    started = time.time()
    samples = generate_samples(config, rows, progress)
    seconds = time.time() - started
    write_cache(path, key, samples, seconds)
    return samples, {"path": path, "hit": False, "seconds": round(seconds, 1)}


# --- scoring and probing ------------------------------------------------------------------

def reward_entries(reward_set) -> list[tuple[str, float, object]]:
    """(unique key, weight, SafeReward) for each reward of the set, plus the success reward (weight 0) if apart."""
    weights = dict(zip(reward_set.keys, reward_set.weights))
    return [(fn.__name__, weights.get(fn.__name__, 0.0), fn) for fn in reward_set.scored]


def score_samples(entries: list, rows: list[dict], raw: list[dict]) -> list[ScoredSample]:
    """Every reward's score on every sample (TRL's calling convention: chat completions, dataset columns)."""
    from .evaluate import score

    sample_rows = [rows[item["group"]] for item in raw]
    texts = [item["completion"] for item in raw]
    columns = score([fn for _, _, fn in entries], sample_rows, texts) if raw else {}
    by_name = {name: columns.get(fn.__name__, []) for name, _, fn in entries}
    for _, _, fn in entries:
        drain = getattr(fn, "drain_events", None)
        if drain:
            drain()
    return [ScoredSample(group=item["group"], completion=item["completion"],
                         scores={name: values[i] for name, values in by_name.items()}, tokens=item.get("tokens"))
            for i, item in enumerate(raw)]


def probe_correctness(entries: list, rows: list[dict], success_name: str) -> dict:
    """The soundness probe (rewards.probe) on the success reward and the built-in correctness rewards."""
    from rewards.probe import probe
    from rewards.registry import CORRECTNESS

    chosen = [(name, fn) for name, _, fn in entries
              if name == success_name or getattr(fn, "name", name) in CORRECTNESS]
    if not chosen:
        return {}
    columns = {}
    if all("numbers" in row and "target" in row for row in rows):
        columns = {"nums": [row["numbers"] for row in rows], "target": [row["target"] for row in rows]}
    report = probe([fn for _, fn in chosen], [row["question"] for row in rows], [row["answer"] for row in rows], columns)
    out = {}
    for name, fn in chosen:
        entry = report["rewards"][fn.__name__]
        out[name] = {"false_positive_rate": entry["false_positive_rate"],
                     "false_negative_rate": entry["false_negative_rate"],
                     "battery": report["battery"], "completions": report["completions"]}
    return out


# --- the whole check ----------------------------------------------------------------------

def check_rewards(config: Config, settings: CheckSettings | None = None, progress: Progress | None = None) -> RewardCheck:
    """Sample the base model on K held-out prompts, score, probe and judge the config's reward set.

    `config` should be filled and validated (tasks.fill_defaults, config.validate); progress(stage,
    done, total) is called as samples are generated ("generate"), scored ("score") and probed ("probe").
    """
    import rewards

    from . import data

    settings = (settings or CheckSettings()).check()
    started = time.time()
    _, held_out = data.load_examples(config)
    if not held_out:
        raise UserError("data.num_heldout: the check samples held-out prompts, and this config has none")
    rows = held_out[: settings.prompts]
    reward_set = build_reward_set(config.rewards, config.success_reward)
    entries = reward_entries(reward_set)
    raw, cache = cached_samples(config, rows, settings, progress)
    scored_at = time.time()
    samples = score_samples(entries, rows, raw)
    if progress:
        progress("score", len(samples), len(samples))
    probed_at = time.time()
    probe_rates = probe_correctness(entries, rows, reward_set.success_key)
    if progress:
        progress("probe", 1, 1)
    finished = time.time()
    maxima = {name: rewards.reward_max(fn) for name, _, fn in entries}
    seconds = {"generate": cache.pop("seconds"), "score": round(probed_at - scored_at, 2),
               "probe": round(finished - probed_at, 2), "total": round(finished - started, 1)}
    return summarize(config, rows, samples, entries, reward_set.success_key, maxima, probe_rates, cache, seconds,
                     settings)


def summarize(config: Config, rows: list[dict], samples: list[ScoredSample], entries: list, success_name: str,
              maxima: dict, probe_rates: dict, cache: dict, seconds: dict, settings: CheckSettings) -> RewardCheck:
    """Assemble the RewardCheck from the scored samples (all numbers come from the pure functions above)."""
    g = config.grpo
    weights = {name: weight for name, weight, _ in entries}
    from rewards import SUCCESS_THRESHOLD

    stats = [RewardStats(name=name, weight=weight, success_threshold=SUCCESS_THRESHOLD * maxima[name],
                         faults=dict(getattr(fn, "fault_counts", {})),
                         **reward_stats([s.scores[name] for s in samples], settings.bins)) for name, weight, fn in entries]
    p_refs = pass_rates(samples, success_name, maxima[success_name])
    groups = groups_of(samples)
    per_prompt = []
    for index, row in enumerate(rows):
        totals = [weighted_total(s.scores, weights) for s in groups.get(index, [])]
        per_prompt.append({"index": index, "question": row.get("question"), "answer": row.get("answer"),
                           "p_ref": p_refs[index], "total_mean": statistics.fmean(totals) if totals else None,
                           "total_std": statistics.pstdev(totals) if totals else None,
                           "zero_std": bool(totals) and max(totals) - min(totals) <= EQUAL_TOLERANCE})
    zero_std = zero_std_fraction(samples, weights)
    shares = variance_shares(samples, weights, g.scale_rewards)
    verdict = decide_verdict(zero_std, p_refs, shares, success_name, probe_rates, weights, g.num_generations)
    cut = truncation(samples, success_name, g.max_completion_length, maxima[success_name], config.model.max_seq_length)
    if cut["advice"] and verdict.kind == "no_signal_too_hard":  # a learnable task learns to be brief (the quickstart)
        verdict.warnings.append(f"the length cap is the problem: try {cut['advice']}")
    return RewardCheck(
        model=config.model.name, task=config.data.dataset or config.task_name, num_generations=g.num_generations,
        prompts=len(rows), samples=len(samples), seed=g.seed, max_new_tokens=g.max_completion_length,
        temperature=g.temperature, cache=cache, seconds=seconds, rewards=stats, zero_std_fraction=zero_std,
        per_prompt=per_prompt, p_ref={"reward": success_name, "threshold": SUCCESS_THRESHOLD * maxima[success_name],
                                      "mean": statistics.fmean(p_refs) if p_refs else None},
        forecast=forecast(p_refs, config), variance_scale=g.scale_rewards, variance_shares=shares,
        agreement=agreement_tables(samples, maxima, settings.examples), probe=probe_rates, truncation=cut,
        verdict=verdict)
