"""Live success measurement: p_ref of the starting model and the predictor's success per step.

At the start of a run, `measure_p_ref` samples k completions for each of a few held-out prompts with
the loaded model (generation.generate: batched, left padding) and judges them with the run's success reward (score >=
0.999 is a success); `ensure_p_ref` pools the counts across prompts (forecast.pool_p_ref: 0 of k on
a prompt is a small positive p_ref, not a certain 0) and writes RUN_DIR/p_ref.json, or reads it back
on --resume. `attach_prediction` adds the metric hook that writes `success_predicted`:
`PredictedSuccess` (the paper's recurrence at the run's β, per prompt, then averaged) for a KL run,
`SuccessForecast` (β fitted to the run's first FIT_STEPS steps, with a band) for `kl: none`; either one
behind `ShownForecast`, which adds `forecast_shown` (forecast.judge_logged: may the forecast be shown?).
`forecast_summary` gives the train summary the same verdict from the run's files.

Step mapping: one trainer step is one iteration of the recurrence (sample from π_{n−1}, update to
π_n). The `success` logged at step n is measured on completions sampled by π_{n−1}, so it is
compared with the predicted p_{n−1} (step 1 ↔ p_0 = mean p_ref).

This module does not train and does not write metrics itself; torch is imported inside functions.
"""

from __future__ import annotations

import time

from .. import dynamics, forecast, rundir
from ..config import Config
from ..tasks.tools import max_tool_rounds, tools_for

GENERATION_BATCH = 32  # completions generated at once
NONE_STEP_BETA = 1.0  # kl none with beta 0: the predictor's nominal step size (see predictor_params)
FIT_STEPS = 10  # kl none: the step size is fitted to the measured success of steps 1..FIT_STEPS
FORECAST_NORM = "mean"  # the forecast's shape: a constant log-odds gain 1/β per step (see forecast_params)


def predictor_params(config: Config) -> dict:
    """The predictor's {kl, beta, eps, norm, alpha} for a run's GRPO settings.

    ref/both/mirror: TRL's β through dynamics.mapping_from_trl (std scaling → β·sqrt(G/(G−1)));
    `mirror` reads β as the strength of our KL to the previous policy. `none` has no KL: its steps
    are bounded by the learning rate and PPO clipping, which act like a KL to the previous policy,
    so it runs the mirror dynamics with β as an inverse step size — grpo.beta when set, else
    NONE_STEP_BETA (a nominal shape, not a calibrated speed).
    """
    g = config.grpo
    kl = config.kl_mode
    beta = g.beta if g.beta > 0 else NONE_STEP_BETA
    mapped = dynamics.mapping_from_trl(beta, g.scale_rewards, g.num_generations)
    return {"kl": kl, "alpha": g.kl_alpha, **mapped}


def generation_limit(config: Config, device: str) -> int:
    """Sequences p_ref samples in one `generate`: GENERATION_BATCH, and on a GPU at most the training
    generation batch, which the memory plan sized (plan.sampling_batch_limit)."""
    if device != "cuda":
        return GENERATION_BATCH
    from ..plan import sampling_batch_limit

    return min(GENERATION_BATCH, sampling_batch_limit(config))


def measure_p_ref(model, tokenizer, rows: list[dict], success_fn, samples: int, max_new_tokens: int,
                  temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
                  max_sequences: int = GENERATION_BATCH, tools: list | None = None,
                  max_tool_rounds: int | None = None) -> dict:
    """Per-prompt success of `model` on `rows` from `samples` sampled completions each.

    At most `max_sequences` completions are generated at once (one prompt's samples always together).
    A tool task's completions call its `tools` as in training (generation.generate).
    Returns {"k", "per_prompt": [{"prompt", "p_ref", "successes", "samples", "cut", "cut_failed"}], "mean",
    "seconds"}; p_ref here is the raw fraction (ensure_p_ref pools it); "cut" counts the completions that
    reached max_new_tokens, "cut_failed" those of them that failed (the learnability gate reads both).
    """
    import torch

    import rewards

    from ..generation import GenerationSettings, generate

    started = time.time()
    settings = GenerationSettings(samples=samples, max_new_tokens=max_new_tokens, temperature=temperature,
                                  top_p=top_p, seed=seed)
    prompts_per_batch = max(1, max_sequences // samples)
    jobs = [i for i in range(len(rows)) for _ in range(samples)]
    was_training = model.training
    model.eval()
    generator_state = torch.random.get_rng_state()  # leave the training RNG stream as it was
    completions, lengths = [], []  # lengths in tokens: a completion of max_new_tokens reached the cap (the gate)
    try:
        for batch_index, start in enumerate(range(0, len(rows), prompts_per_batch)):
            prompts = [row["prompt"] for row in rows[start:start + prompts_per_batch]]
            sampled = generate(model, tokenizer, prompts, settings, sample=True, batch_index=batch_index,
                               tools=tools, max_tool_rounds=max_tool_rounds)
            completions += [text for per_prompt in sampled for text, _ in per_prompt]
            lengths += [tokens for per_prompt in sampled for _, tokens in per_prompt]
    finally:
        torch.random.set_rng_state(generator_state)
        model.train(was_training)

    columns = {key: [rows[i][key] for i in jobs] for key in rows[0] if key != "prompt"}
    chat = [[{"role": "assistant", "content": text}] for text in completions]
    scores = success_fn(chat, prompts=[rows[i]["prompt"] for i in jobs], **columns)
    drain = getattr(success_fn, "drain_events", None)
    if drain:
        drain()
    success = [rewards.is_success(s, rewards.reward_max(success_fn)) for s in scores]
    per_prompt = []
    for i, row in enumerate(rows):
        hits = [float(ok) for ok, j in zip(success, jobs) if j == i]
        cut = [ok for ok, tokens, j in zip(success, lengths, jobs) if j == i and tokens >= max_new_tokens]
        per_prompt.append({"prompt": row.get("question") or str(row["prompt"]), "p_ref": sum(hits) / len(hits),
                           "successes": int(sum(hits)), "samples": len(hits),
                           "cut": len(cut), "cut_failed": cut.count(False)})
    mean = sum(p["p_ref"] for p in per_prompt) / len(per_prompt)
    return {"k": samples, "per_prompt": per_prompt, "mean": mean, "seconds": round(time.time() - started, 1)}


def ensure_p_ref(run, config: Config, loaded, held_out: list[dict], success_fn) -> dict | None:
    """RUN_DIR/p_ref.json: read it back when it exists (resume), else measure and write it.

    None when measurement is off (grpo.p_ref_samples or grpo.p_ref_prompts 0, or no held-out rows).
    """
    existing = run.read_json(rundir.P_REF)
    if existing and existing.get("per_prompt"):
        return existing
    if getattr(run, "readonly", False):  # ranks > 0 of a multi-process run: rank 0 measures and writes
        return None
    g = config.grpo
    rows = held_out[: g.p_ref_prompts]
    if g.p_ref_samples <= 0 or not rows:
        return None
    result = pool_measurement(measure_on(config, loaded, rows, success_fn, g.p_ref_samples, g.seed))
    params = predictor_params(config)
    prediction = dynamics.predict_dataset([p["p_ref"] for p in result["per_prompt"]], steps=g.max_steps, **params)
    result["predicted"] = {"params": params, "p_star": prediction["p_star"], "trajectory": prediction["trajectory"]}
    run.write_json(rundir.P_REF, result)
    run.event("info", f"p_ref measured: {result['successes']} of {result['samples']} samples right, pooled "
              f"mean {result['mean']:.3f} over {len(rows)} held-out prompts x "
              f"{g.p_ref_samples} samples ({result['seconds']} s); predicted p* {prediction['p_star']:.3f}", step=0)
    return result


def measure_on(config: Config, loaded, rows: list[dict], success_fn, samples: int, seed: int) -> dict:
    """measure_p_ref with the run's sampling settings (p_ref, and the learnability gate's further samples)."""
    g = config.grpo
    return measure_p_ref(loaded.model, loaded.tokenizer, rows, success_fn, samples, g.max_completion_length,
                         g.temperature, g.top_p, seed, max_sequences=generation_limit(config, loaded.device),
                         tools=tools_for(config), max_tool_rounds=max_tool_rounds(config))


def pool_measurement(result: dict) -> dict:
    """p_ref.json with pooled estimates: each prompt's p_ref becomes its posterior mean under a beta
    prior fitted across the prompts (forecast.pool_p_ref); the raw fraction stays as p_ref_raw.

    Adds "successes", "samples" (totals), "mean_raw", "population_mean" (a prompt not measured) and
    "estimator"; "mean" is the mean of the pooled per-prompt values.
    """
    counts = held_out_counts(result)
    pool = forecast.pool_p_ref([k for k, _ in counts], [n for _, n in counts])
    per_prompt = [{**row, "p_ref_raw": row["p_ref"], "p_ref": round(value, 6)}
                  for row, value in zip(result["per_prompt"], pool.per_prompt)]
    pooled = [row["p_ref"] for row in per_prompt]
    return {**result, "per_prompt": per_prompt, "mean": round(sum(pooled) / len(pooled), 6),
            "mean_raw": sum(row["p_ref_raw"] for row in per_prompt) / len(per_prompt),
            "population_mean": pool.mean, "successes": sum(k for k, _ in counts), "samples": sum(n for _, n in counts),
            "estimator": "hierarchical beta-binomial: per-prompt posterior mean under a beta prior fitted across prompts"}


def held_out_counts(p_ref: dict) -> list[tuple[int, int]]:
    """(successes, samples) per measured prompt; files written before counts were kept give them from p_ref × k."""
    counts = []
    for row in p_ref.get("per_prompt") or []:
        n = int(row.get("samples") or p_ref.get("k") or 0)
        k = row.get("successes")
        k = int(round(float(row.get("p_ref_raw", row["p_ref"])) * n)) if k is None else int(k)
        if n > 0:
            counts.append((min(max(k, 0), n), n))
    return counts


def attach_prediction(run, config: Config, p_ref: dict, recorder, callback) -> None:
    """Add the success_predicted hook to the run's callback: a fitted forecast for kl none, else the paper's;
    either way behind `ShownForecast`, which adds the rule's verdict (forecast_shown) to each line."""
    if config.kl_mode == "none":
        predictor = SuccessForecast(p_ref, config, run)
        recorder.on_scored.append(predictor.observe)
    else:
        predictor = PredictedSuccess(p_ref, config)
    hook = ShownForecast(predictor, run)
    recorder.on_scored.append(hook.observe)
    callback.metric_hooks.append(hook)


class ShownForecast:
    """A metric hook around a predictor's: its values plus `forecast_shown`, whether the forecast may be shown.

    The verdict is forecast.judge_logged over the lines logged so far and the success measured on the
    completions of the last of them (forecast.recent_steps; counted as the recorder scores them; on
    --resume read back from metrics.jsonl and completions.jsonl). The train summary and the studio
    reach the same verdict from the same files.
    """

    def __init__(self, predictor, run):
        self.predictor = predictor
        self.lines = [m for m in run.metrics() if forecast.logged_band(m) is not None]
        self.counts = forecast.success_counts(rundir.iter_jsonl(run.file(rundir.COMPLETIONS))) if self.lines else {}

    def observe(self, step: int, records: list[dict]) -> None:
        """RewardRecorder.on_scored hook: count the step's successes."""
        for step_, tally in forecast.success_counts({**r, "step": step} for r in records).items():
            k, n = self.counts.get(step_, (0, 0))
            self.counts[step_] = (k + tally[0], n + tally[1])

    def __call__(self, step: int) -> dict:
        values = self.predictor(step)
        self.lines.append({"step": step, **values})
        return {**values, "forecast_shown": forecast.judge_logged(self.lines, self.counts).shown}


class PredictedSuccess:
    """A RunDirCallback metric hook: {"success_predicted": p_{n−1}} for the logged step n."""

    def __init__(self, p_ref: dict, config: Config):
        # Recomputed rather than read from p_ref.json: a --resume with a larger --max-steps needs a longer trajectory.
        params = predictor_params(config)
        self.trajectory = dynamics.predict_dataset(
            [p["p_ref"] for p in p_ref["per_prompt"]], steps=max(1, config.grpo.max_steps), **params
        )["trajectory"]

    def at_step(self, step: int) -> float:
        """Predicted success of the samples scored at trainer step `step` (>= 1)."""
        return self.trajectory[min(max(step - 1, 0), len(self.trajectory) - 1)]

    def __call__(self, step: int) -> dict:
        return {"success_predicted": round(self.at_step(step), 6)}


def forecast_params(config: Config) -> dict:
    """The recurrence's {kl, norm, eps, alpha} for the fitted forecast (β, the step size, is what gets fitted).

    Always the mean-only shape (Ω = 1: every prompt's log-odds rise by 1/β a step), whatever
    grpo.scale_rewards is. The std normalisation only rescales the advantages, and AdamW's step
    length is set by the learning rate, not by that scale; and at p ≪ 1/G a group of G is all wrong
    and gives no signal, where the paper's Ω(p) = (p(1−p)+ε)^(−1/2) would move fastest. Fitted to a
    whole quickstart run, the mean+std shape missed its last ten steps (docs/dynamics.md).
    """
    mapped = dynamics.mapping_from_trl(1.0, "none", config.grpo.num_generations)
    return {"kl": "none", "norm": FORECAST_NORM, "eps": mapped["eps"], "alpha": config.grpo.kl_alpha}


class SuccessForecast:
    """A metric hook for kl none: success_predicted and its band, from a β fitted to the run's first steps.

    The value logged at step n is the forecast made before step n was scored, from the steps fitted
    so far. The fit is redone, and RUN_DIR/forecast.json (the curve to max_steps) rewritten, after
    steps 1, 2, 4, 8, ... (each time the fitted steps double) and after step FIT_STEPS; then it stays.
    The p_ref population is fitted with β (forecast.fit_step_size). On --resume the groups come back from completions.jsonl.
    """

    def __init__(self, p_ref: dict, config: Config, run, fit_steps: int = FIT_STEPS, params: dict | None = None):
        self.run = run
        self.steps = max(1, config.grpo.max_steps)
        self.fit_steps = fit_steps
        self.params = params or forecast_params(config)
        self.held_out = held_out_counts(p_ref)
        self.prior = forecast.prepare_step_size(self.held_out, steps=self.steps, **self.params)
        self.groups: dict[tuple, list] = {}  # (step, prompt) -> [successes, samples]
        resumed = [r for r in rundir.iter_jsonl(run.file(rundir.COMPLETIONS)) if r.get("step", 0) <= fit_steps]
        if resumed:
            self.observe_records(resumed)
        self.fit_through = -1
        self._refit(min(fit_steps, max((step for step, _ in self.groups), default=0)))

    def observe(self, step: int, records: list[dict]) -> None:
        """RewardRecorder.on_scored hook: count each prompt group's successes at `step`."""
        if step <= self.fit_steps:
            self.observe_records([{**r, "step": step} for r in records])

    def observe_records(self, records) -> None:
        for record in records:
            counts = self.groups.setdefault((int(record["step"]), str(record.get("prompt"))), [0, 0])
            counts[0] += 1 if record.get("success") else 0
            counts[1] += 1

    def at_step(self, step: int) -> dict:
        """{"success_predicted", "_low", "_high"} for trainer step `step` (>= 1) from the current fit."""
        i = min(max(step - 1, 0), self.steps)
        return {"success_predicted": round(self.band["median"][i], 6),
                "success_predicted_low": round(self.band["low"][i], 6),
                "success_predicted_high": round(self.band["high"][i], 6)}

    def __call__(self, step: int) -> dict:
        values = self.at_step(step)
        through = min(step, self.fit_steps)
        if through > self.fit_through and (through >= 2 * self.fit_through or through == self.fit_steps):
            self._refit(through)
        return values

    def _refit(self, through: int) -> None:
        observed = [(s, k, n) for (s, _), (k, n) in self.groups.items() if 1 <= s <= through]
        fit = self.prior.fit(observed)
        self.band, self.fit_through = fit.band(), through
        self.run.write_json(rundir.FORECAST, forecast_record(fit, self.band, through, self.params,
                                                             len(self.held_out), len(observed)))


def forecast_record(fit, band: dict, through: int, params: dict, held_out_prompts: int, groups: int) -> dict:
    """RUN_DIR/forecast.json: the forecast per trainer step (entry j is step j + 1, i.e. p_j) and its fit."""
    steps = fit.mean_paths.shape[1] - 1
    return {
        "fit_steps": through, "level": forecast.BAND_LEVEL, "params": params,
        "beta": {k: round(v, 4) for k, v in fit.beta_quantiles().items()},
        "p_ref": {"population_mean": round(fit.p_ref_mean, 6), "held_out_prompts": held_out_prompts,
                  "fit_groups": groups},
        "steps": list(range(1, steps + 1)),
        **{key: [round(v, 6) for v in band[name][:steps]] for key, name in
           (("success_predicted", "median"), ("success_predicted_low", "low"), ("success_predicted_high", "high"))},
    }


def forecast_summary(run, metrics: list[dict]) -> dict | None:
    """The forecast at the last logged step beside the success measured over the last steps (forecast.recent_steps,
    the summary's window), and whether it may be shown (forecast.judge_logged: the verdict the last metrics
    line carries).

    None when the run logged no forecast (p_ref not measured).
    """
    view = forecast.judge_logged(metrics, forecast.success_counts(rundir.iter_jsonl(run.file(rundir.COMPLETIONS))))
    if view is None:
        return None
    fitted = run.forecast()  # kl none: the fit behind the band; None for a KL run
    low, high = view.at.low, view.at.high
    summary = {"shown": view.shown, "text": view.describe(), "step": view.step,
               "predicted": view.at.predicted, "low": low, "high": high, "level": forecast.BAND_LEVEL,
               "window_steps": view.window_steps, "window_predicted": round(view.beside.predicted, 4),
               "window_low": None if low is None else round(view.beside.bounds[0], 4),
               "window_high": None if high is None else round(view.beside.bounds[1], 4),
               "measured": None if view.measured is None else round(view.measured.mean, 4),
               "measured_samples": None if view.measured is None else view.measured.samples,
               "reason": view.reason}
    if fitted is not None:
        summary.update(model="kl none", fit_steps=fitted["fit_steps"], beta=fitted["beta"].get("median"))
    else:
        summary["model"] = "the paper's recurrence at the run's beta"
    return summary


def forecast_lines(summary: dict | None) -> list[str]:
    """The train summary's line for the forecast (none when there is no forecast): shown, or too early and why."""
    if not summary:
        return []
    if "fit_steps" in summary:
        model = f"kl none, step size fitted on steps 1-{summary['fit_steps']}, beta_eff {summary['beta']:.3g}"
    else:
        model = summary["model"]
    return [f"  success forecast ({model}): {summary['text']}"]
