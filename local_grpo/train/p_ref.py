"""Live success measurement: p_ref of the starting model and the predictor's success per step.

At the start of a run, `measure_p_ref` samples k completions for each of a few held-out prompts with
the loaded model (generation.generate: batched, left padding) and judges them with the run's success reward (score >=
0.999 is a success); `ensure_p_ref` writes the result to RUN_DIR/p_ref.json, or reads it back on
--resume. `PredictedSuccess` turns it into `success_predicted` for metrics.jsonl with
local_grpo.dynamics (per prompt, then averaged).

Step mapping: one trainer step is one iteration of the recurrence (sample from π_{n−1}, update to
π_n). The `success` logged at step n is measured on completions sampled by π_{n−1}, so it is
compared with the predicted p_{n−1} (step 1 ↔ p_0 = mean p_ref).

This module does not train and does not write metrics itself; torch is imported inside functions.
"""

from __future__ import annotations

import time

from .. import dynamics, rundir
from ..config import Config

GENERATION_BATCH = 32  # completions generated at once
NONE_STEP_BETA = 1.0  # kl none with beta 0: the predictor's nominal step size (see predictor_params)


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
                  max_sequences: int = GENERATION_BATCH) -> dict:
    """Per-prompt success of `model` on `rows` from `samples` sampled completions each.

    At most `max_sequences` completions are generated at once (one prompt's samples always together).
    Returns {"k", "per_prompt": [{"prompt", "p_ref"}], "mean", "seconds"} (p_ref.json's format).
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
    completions = []
    try:
        for batch_index, start in enumerate(range(0, len(rows), prompts_per_batch)):
            prompts = [row["prompt"] for row in rows[start:start + prompts_per_batch]]
            sampled = generate(model, tokenizer, prompts, settings, sample=True, batch_index=batch_index)
            completions += [text for per_prompt in sampled for text, _ in per_prompt]
    finally:
        torch.random.set_rng_state(generator_state)
        model.train(was_training)

    columns = {key: [rows[i][key] for i in jobs] for key in rows[0] if key != "prompt"}
    chat = [[{"role": "assistant", "content": text}] for text in completions]
    scores = success_fn(chat, prompts=[rows[i]["prompt"] for i in jobs], **columns)
    drain = getattr(success_fn, "drain_events", None)
    if drain:
        drain()
    per_prompt = []
    for i, row in enumerate(rows):
        hits = [float(rewards.is_success(s)) for s, j in zip(scores, jobs) if j == i]
        per_prompt.append({"prompt": row.get("question") or str(row["prompt"]), "p_ref": sum(hits) / len(hits)})
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
    result = measure_p_ref(loaded.model, loaded.tokenizer, rows, success_fn, g.p_ref_samples,
                           g.max_completion_length, g.temperature, g.top_p, g.seed,
                           max_sequences=generation_limit(config, loaded.device))
    params = predictor_params(config)
    prediction = dynamics.predict_dataset([p["p_ref"] for p in result["per_prompt"]], steps=g.max_steps, **params)
    result["predicted"] = {"params": params, "p_star": prediction["p_star"], "trajectory": prediction["trajectory"]}
    run.write_json(rundir.P_REF, result)
    run.event("info", f"p_ref measured: mean {result['mean']:.3f} over {len(rows)} held-out prompts x "
              f"{g.p_ref_samples} samples ({result['seconds']} s); predicted p* {prediction['p_star']:.3f}", step=0)
    return result


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
