"""Evaluation: did training make the model better? pass@1 (greedy and sampled), pass@k, rewards, format, length.

    local-grpo eval --run RUN_DIR --compare          # base vs trained on the run's held-out prompts
    local-grpo eval --model embedded --task arithmetic --n 40 --k 4 --samples 8
    (the command line is local_grpo/cli/eval.py; this module is library code)

Metrics, per model (see docs/evaluation.md):
    pass@1_greedy      fraction of prompts whose greedy completion is correct
    pass@1_sampled     mean over prompts of c/n (n samples at the temperature, c correct)
    pass@k             mean over prompts of the unbiased estimator 1 - C(n-c, k)/C(n, k)
    rewards/<name>     mean score of each reward on the greedy completions (None scores skipped)
    format_rate        fraction of greedy completions with a parseable final answer: an answer marker
                       ("Answer:", "answer is", "####") followed by a number, a \\boxed{...}, or one
                       non-empty <answer>...</answer> block holding a number
    mean_length        mean greedy completion length in tokens (up to and including the end token; a tool
                       task: the model's own tokens, the tools' results not counted)
    tool_calls         a tool task: mean tool calls per greedy completion (TRL's tools/call_frequency)
A completion is correct when the run's success reward scores it >= 0.999 x that reward's maximum, the
rule training's `success` uses (tasks.RewardSet.is_success). Rewards are keyed like training's
(format_soft, format_soft#2).

This module generates and scores; it never trains. The only file it writes into a run directory is
eval_compare.json (and the per-prompt jsonl), which the app shows.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from . import rundir
from .config import Config
from .errors import UserError
from .generation import Completion, GenerationSettings, generate_turns
from .tasks import RewardSet, build_reward_set
from .tasks.tools import max_tool_rounds, tools_for



# --- the estimator ------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms the huge binomials
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


# --- settings -----------------------------------------------------------------------------

@dataclass
class EvalSettings(GenerationSettings):
    """What to evaluate and how (everything but the model)."""

    n: int | None = None  # prompts (None = the whole split)
    k: int = 4
    samples: int = 8  # sampled completions per prompt (0 = greedy only)
    batch_size: int = 8
    split: str = "held-out"

    def check(self) -> "EvalSettings":
        if self.n is not None and self.n < 1:
            raise UserError(f"--n: must be >= 1, got {self.n}")
        if self.samples < 0:
            raise UserError(f"--samples: must be >= 0, got {self.samples}")
        if self.samples and not 1 <= self.k <= self.samples:
            raise UserError(f"--k: must be between 1 and --samples ({self.samples}), got {self.k}")
        if self.samples and self.temperature <= 0:
            raise UserError(f"--temperature: must be > 0 for sampling, got {self.temperature}")
        for flag, value in (("--max-new-tokens", self.max_new_tokens), ("--batch-size", self.batch_size)):
            if value < 1:
                raise UserError(f"{flag}: must be >= 1, got {value}")
        if self.split not in ("held-out", "train"):
            raise UserError(f"--split: {self.split!r} is not one of held-out, train")
        return self


def eval_rows(config: Config, settings: EvalSettings) -> list[dict]:
    """The prompts to evaluate: the config's held-out (or train) split, first `n` of them."""
    from . import data

    train_rows, held_out = data.load_examples(config)
    rows = held_out if settings.split == "held-out" else train_rows
    return rows[: settings.n] if settings.n else rows


def reward_set(config: Config) -> RewardSet:
    """The config's rewards as training builds them: unique keys, weights and the success reward."""
    return build_reward_set(config.rewards, config.success_reward)


# --- scoring ------------------------------------------------------------------------------

def score(reward_fns: list, rows: list[dict], texts: list) -> dict[str, list]:
    """Every reward's scores for completions `texts[i]` of prompt `rows[i]` (TRL's calling convention): a text,
    or a tool task's turns (chat messages), which the rewards see whole, as in training."""
    columns = {key: [row.get(key) for row in rows] for key in rows[0] if key != "prompt"}
    completions = [t if isinstance(t, list) else [{"role": "assistant", "content": t}] for t in texts]
    prompts = [row["prompt"] for row in rows]
    return {fn.__name__: fn(completions, prompts=prompts, **columns) for fn in reward_fns}


def has_final_answer(text: str) -> bool:
    """The format check: an answer marker followed by a number, or a \\boxed{} (answer tags respected)."""
    from rewards.extract import answer_region, final_answer, first_number

    region = answer_region(text)
    if region is None:
        return False
    if "<answer>" in text:  # the answer block is the final answer
        return first_number(region) is not None
    return final_answer(region)[1] in ("marker", "boxed")


def evaluate(model, tokenizer, rows: list[dict], rewards: RewardSet, settings: EvalSettings,
             progress: bool = True, label: str = "eval", tools: list | None = None,
             max_tool_rounds: int | None = None) -> tuple[dict, list[dict]]:
    """Generate and score on `rows` with every reward of the set; returns (metrics, per-prompt records).

    A tool task's `tools` (tasks.tools.tools_for) are called as in training (generation.tool_loop), and
    each completion of the records carries its `turns` (rundir.completion_turns).
    """
    from tqdm.auto import tqdm

    started = time.time()
    reward_fns, success_name = rewards.scored, rewards.success_key
    records = []
    bar = tqdm(total=len(rows), desc=label, unit="prompt", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    for batch_index, start in enumerate(range(0, len(rows), settings.batch_size)):
        batch = rows[start:start + settings.batch_size]
        prompts = [row["prompt"] for row in batch]
        greedy = [g[0] for g in generate_turns(model, tokenizer, prompts, settings, sample=False, tools=tools,
                                               max_tool_rounds=max_tool_rounds)]
        greedy_scores = score(reward_fns, batch, [g.turns or g.text for g in greedy])
        sampled = generate_turns(model, tokenizer, prompts, settings, sample=True, batch_index=batch_index, tools=tools,
                                 max_tool_rounds=max_tool_rounds) if settings.samples else None
        for i, row in enumerate(batch):
            text = greedy[i].text
            rewards_i = {name: scores[i] for name, scores in greedy_scores.items()}
            record = {
                "index": start + i,
                "question": row.get("question"),
                "answer": row.get("answer"),
                "greedy": {"completion": text, "tokens": greedy[i].tokens, "rewards": rewards_i,
                           "correct": rewards.is_success(rewards_i[success_name]), "format": has_final_answer(text),
                           **turns_field(greedy[i])},
            }
            if sampled is not None:
                sample_scores = score([rewards.success], [row] * len(sampled[i]),
                                      [c.turns or c.text for c in sampled[i]])[success_name]
                correct = [rewards.is_success(s) for s in sample_scores]
                record["samples"] = [{"completion": c.text, "tokens": c.tokens, "correct": ok, **turns_field(c)}
                                     for c, ok in zip(sampled[i], correct)]
                record["n"], record["c"] = len(correct), sum(correct)
                record[f"pass@{settings.k}"] = pass_at_k(len(correct), sum(correct), settings.k)
            records.append(record)
        bar.update(len(batch))
    bar.close()
    return summarize(records, [f.__name__ for f in reward_fns], settings, time.time() - started), records


def turns_field(completion: Completion) -> dict:
    """{"turns": [...]} (rundir.completion_turns) for a tool task's completion, else {}."""
    return {"turns": rundir.completion_turns(completion.turns)} if completion.turns is not None else {}


def summarize(records: list[dict], reward_names: list[str], settings: EvalSettings, seconds: float) -> dict:
    """Aggregate metrics of per-prompt records (keys documented at the top of this module)."""

    def mean(values):
        values = [v for v in values if v is not None]
        return round(sum(values) / len(values), 4) if values else None

    greedy = [r["greedy"] for r in records]
    metrics = {
        "n_prompts": len(records),
        "pass@1_greedy": mean([float(g["correct"]) for g in greedy]),
        "pass@1_sampled": None,
        f"pass@{settings.k}": None,
        "format_rate": mean([float(g["format"]) for g in greedy]),
        "mean_length": mean([g["tokens"] for g in greedy]),
    }
    for name in reward_names:
        metrics[f"rewards/{name}"] = mean([g["rewards"].get(name) for g in greedy])
    if any("turns" in g for g in greedy):
        metrics["tool_calls"] = mean([float(sum(len(t.get("tool_calls") or []) for t in g["turns"])) for g in greedy])
    if settings.samples:
        metrics["pass@1_sampled"] = mean([r["c"] / r["n"] for r in records])
        metrics[f"pass@{settings.k}"] = mean([r[f"pass@{settings.k}"] for r in records])
        metrics["mean_length_sampled"] = mean([s["tokens"] for r in records for s in r["samples"]])
    metrics["seconds"] = round(seconds, 1)
    return metrics


# --- running from a run directory or flags --------------------------------------------------

def gpu_batch_size(config: Config, settings: EvalSettings) -> int:
    """Prompts per batch on a GPU: --batch-size, lowered so that one `generate` holds no more sequences
    (prompts x samples) than the run's training generation batch, which its memory plan sized."""
    from .output import notice
    from .plan import prompts_per_generate, sampling_batch_limit

    size = prompts_per_generate(sampling_batch_limit(config), max(settings.samples, 1), settings.batch_size)
    if size < settings.batch_size:
        notice(f"eval: --batch-size {settings.batch_size} lowered to {size} on the GPU (at most "
               f"{sampling_batch_limit(config)} sequences per generate, the run's training generation batch)")
    return size


def run_eval(config: Config, adapter_dir: str | None, settings: EvalSettings, compare: bool = False,
             progress: bool = True, base: dict | None = None) -> dict:
    """Load the model(s) once and evaluate. Returns {"base"?, "trained"? or "model", settings..., "records"}.

    `base`: the run's base-model record (RunDir.base_model()), so the base loads as training loaded it
    (the same files, 4-bit when it was) through backends.load_for_inference, as export does.
    """
    from . import backends

    settings.check()
    rows = eval_rows(config, settings)
    if not rows:
        raise UserError(f"--split: the {settings.split} split of this config is empty")
    rewards = reward_set(config)
    loaded = backends.load_for_inference(config, adapter_dir, base=base)
    if loaded.device == "cuda":
        settings.batch_size = gpu_batch_size(config, settings)
    result = {"n_prompts": len(rows), "k": settings.k, "samples": settings.samples, "temperature": settings.temperature,
              "seed": settings.seed, "max_new_tokens": settings.max_new_tokens, "split": settings.split,
              "model": config.model.name, "adapter": adapter_dir, "backend": loaded.backend}
    records: list[dict] = []
    tool_use = {"tools": tools_for(config), "max_tool_rounds": max_tool_rounds(config)}  # a tool task's tools
    if compare:
        if adapter_dir is None:
            raise UserError("--compare: needs --run RUN_DIR or --adapter DIR (the trained adapter)")
        with loaded.model.disable_adapter():
            result["base"], base_records = evaluate(loaded.model, loaded.tokenizer, rows, rewards, settings,
                                                    progress, label="base", **tool_use)
        result["trained"], trained_records = evaluate(loaded.model, loaded.tokenizer, rows, rewards, settings,
                                                      progress, label="trained", **tool_use)
        records = [{"model": "base", **r} for r in base_records] + [{"model": "trained", **r} for r in trained_records]
    else:
        result["metrics"], records = evaluate(loaded.model, loaded.tokenizer, rows, rewards, settings,
                                              progress, label="trained" if adapter_dir else "base", **tool_use)
    result["records"] = records
    return result


def write_results(result: dict, run_path: str | None, out: str | None, compare: bool) -> list[str]:
    """Per-prompt jsonl (--out, else into the run directory) and, for --compare, RUN_DIR/eval_compare.json."""
    written = []
    if out is None and run_path:
        out = os.path.join(run_path, rundir.EVAL_COMPARE_PROMPTS if compare else rundir.EVAL_PROMPTS)
    if out:
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder):
            raise UserError(f"--out: folder {folder} does not exist")
        with open(out, "w", encoding="utf-8") as fh:
            for record in result["records"]:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        written.append(out)
    if compare and run_path:
        run = rundir.RunDir(run_path)
        run.write_json(rundir.EVAL_COMPARE, compare_summary(result))
        written.append(run.file(rundir.EVAL_COMPARE))
    return written


def compare_summary(result: dict) -> dict:
    """The eval_compare.json schema: {"base": metrics, "trained": metrics, "n_prompts", "k", "samples", ...}."""
    keys = ("n_prompts", "k", "samples", "temperature", "seed", "max_new_tokens", "split", "model")
    return {"base": result["base"], "trained": result["trained"], **{k: result[k] for k in keys},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
