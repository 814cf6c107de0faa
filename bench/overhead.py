"""Overhead of `local-grpo train` over a bare TRL GRPOTrainer script, same tiny model and settings.

Each round runs, in turn, the bare script, ours with grpo.fast_cpu_generation off (TRL's own
generation: the overhead of our hooks, recorder, callbacks and the success forecast), the same
without p_ref and its forecast (--p-ref-prompts 0: what every step pays), and ours as shipped (fast
CPU generation on); with --order abba (the default) it then runs them again in reverse, so that a
steady drift in the machine's load falls equally on every variant. Two numbers per
step, medians over the steps after a warm-up:

    step_time  TRL's own (training_step: generation, rewards, loss forward/backward)
    wall       the whole step, from one step's end to the next: step_time + optimizer + every callback
               (ours: consecutive `time` stamps of metrics.jsonl; bare: a callback's stamps)

Both sides generate every completion to the cap (EOS suppressed), so that lengths learned from the two
sides' different rewards do not count as overhead.

The ratio is ours / bare of the pooled medians (and of the means, where a rare slow step, such as
a forecast refit, counts in full); its 95 % interval comes from resampling the rounds (bootstrap,
2,000 draws, seed 0), so round-to-round drift in load shows up in it.

    python bench/overhead.py [--rounds 8] [--steps 12] [--variants ours_trl_generation,ours] [--order abba]
                             [--out bench/results/overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SETTINGS = dict(num_generations=8, per_device_train_batch_size=16, max_completion_length=32, learning_rate=1e-3)

BARE = r'''
import json, os, re, sys, time
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from local_grpo.train.trainer import install_cpu_logprob  # the CPU log-prob path our trainer installs
from local_grpo.tasks import arithmetic_examples, ANSWER_LINE_PROMPT
install_cpu_logprob()
model_dir, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
S = json.loads(sys.argv[4])
tok = AutoTokenizer.from_pretrained(model_dir); tok.padding_side = "left"
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
rows = [{"prompt": [{"role": "system", "content": ANSWER_LINE_PROMPT}, {"role": "user", "content": r["question"]}],
         "answer": r["answer"]} for r in arithmetic_examples(200, 0, {})]
def text(c): return c[0]["content"] if isinstance(c, list) else c
def correct(completions, answer, **kw):
    out = []
    for c, a in zip(completions, answer):
        nums = re.findall(r"-?\d+", text(c)); out.append(1.0 if nums and nums[-1] == a else 0.0)
    return out
def fmt(completions, **kw): return [0.2 if re.search(r"Answer:\s*-?\d+", text(c)) else 0.0 for c in completions]
args = GRPOConfig(output_dir=os.path.join(out, "ckpt"), use_cpu=True, bf16=False, report_to="none", logging_steps=1,
                  max_steps=steps, save_strategy="no", per_device_train_batch_size=S["per_device_train_batch_size"],
                  num_generations=S["num_generations"], max_completion_length=S["max_completion_length"],
                  learning_rate=S["learning_rate"], beta=0.0, gradient_checkpointing=False, seed=42,
                  lr_scheduler_type="constant", disable_tqdm=True,
                  generation_kwargs={"min_new_tokens": S["max_completion_length"]})
trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[correct, fmt], args=args,
                      train_dataset=Dataset.from_list(rows),
                      peft_config=LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj"], task_type="CAUSAL_LM"))
class Stamps(TrainerCallback):
    stamps = []
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs: self.stamps.append(time.time())  # step rows, not the end-of-training summary
trainer.add_callback(Stamps())
t = time.time(); trainer.train(); wall = time.time() - t
walls = [b - a for a, b in zip(Stamps.stamps, Stamps.stamps[1:])]
json.dump({"wall": wall, "step_wall": walls,
           "step_time": [h["step_time"] for h in trainer.state.log_history if "step_time" in h]},
          open(os.path.join(out, "bare.json"), "w"))
'''


def run_bare(model_dir: str, steps: int, workdir: str) -> dict:
    subprocess.run([sys.executable, "-c", BARE, model_dir, str(steps), workdir, json.dumps(SETTINGS)],
                   check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True)
    return json.load(open(os.path.join(workdir, "bare.json")))


def run_ours(model_dir: str, steps: int, workdir: str, flags: list[str]) -> dict:
    out = os.path.join(workdir, "run")
    cmd = [sys.executable, "-m", "local_grpo.cli", "train", "--model", model_dir, "--backend", "hf",
           "--task", "arithmetic", "--num-train", "160", "--num-heldout", "40", "--max-steps", str(steps),
           "--save-steps", str(steps), "--lora-r", "16", "--lora-alpha", "32", "--dtype", "float32",
           "--cpu-autocast", "off",  # fp32 like the bare script (bf16=False), on any CPU
           # every completion runs to the cap (EOS suppressed, as in the bare script), so both sides generate
           # the same number of tokens whatever the rewards teach
           "--trl", f"generation_kwargs={{min_new_tokens: {SETTINGS['max_completion_length']}}}",
           "--output", out, "--json", "--rewards", "correct_numeric,format_soft:0.2", *flags]
    for key, value in SETTINGS.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    t = time.time()
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True)
    wall = time.time() - t
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    stamps = [m["time"] for m in metrics if "step_time" in m]
    return {"wall_process": wall, "step_time": [m["step_time"] for m in metrics if "step_time" in m],
            "step_wall": [b - a for a, b in zip(stamps, stamps[1:])]}


def pooled_ratio(rounds: list[dict], variant: str, key: str, centre=statistics.median) -> float:
    """centre(variant's `key` steps) / centre(bare's), steps pooled over the rounds."""
    ours = centre([x for r in rounds for x in r[variant][key]])
    bare = centre([x for r in rounds for x in r["bare"][key]])
    return ours / bare


def bootstrap_interval(rounds: list[dict], variant: str, key: str, centre=statistics.median, draws: int = 2000,
                       seed: int = 0) -> list[float]:
    """95 % interval of `pooled_ratio`, resampling whole rounds with replacement."""
    import random

    rng = random.Random(seed)
    ratios = sorted(pooled_ratio([rng.choice(rounds) for _ in rounds], variant, key, centre) for _ in range(draws))
    return [round(ratios[int(0.025 * draws)], 3), round(ratios[int(0.975 * draws) - 1], 3)]


def ratio_entry(rounds: list[dict], variant: str, key: str) -> dict:
    """The median ratio with its interval and per-round values, and the mean ratio (a rare slow step counts in full)."""
    return {"ratio": round(pooled_ratio(rounds, variant, key), 3), "ci95": bootstrap_interval(rounds, variant, key),
            "per_round": [round(statistics.median(r[variant][key]) / statistics.median(r["bare"][key]), 3)
                          for r in rounds],
            "mean_ratio": round(pooled_ratio(rounds, variant, key, statistics.fmean), 3),
            "mean_ci95": bootstrap_interval(rounds, variant, key, statistics.fmean)}


VARIANTS = {"bare": None, "ours_trl_generation": ["--no-fast-cpu-generation"],
            "ours_no_forecast": ["--no-fast-cpu-generation", "--p-ref-prompts", "0"], "ours": ["--fast-cpu-generation"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2, help="steps ignored at the start of each run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list; bare is always run")
    parser.add_argument("--order", choices=("forward", "abba"), default="abba",
                        help="abba: each round runs the variants, then again in reverse, so a steady drift in load "
                             "falls equally on every variant")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "overhead.json"))
    args = parser.parse_args()
    chosen = ["bare"] + [v for v in args.variants.split(",") if v and v != "bare"]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    sequence = chosen + chosen[::-1] if args.order == "abba" else chosen
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from tiny_model import build_tiny_model

    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(os.path.join(tmp, "tiny"), hidden=256, layers=4)
        for i in range(args.rounds):
            entry = {v: {"step_time": [], "step_wall": [], "run_medians": []} for v in chosen}
            for variant in sequence:
                flags, workdir = VARIANTS[variant], tempfile.mkdtemp(dir=tmp)
                got = run_bare(model_dir, args.steps, workdir) if flags is None else run_ours(model_dir, args.steps, workdir, flags)
                for key in ("step_time", "step_wall"):
                    entry[variant][key] += got[key][args.warmup:]
                entry[variant]["run_medians"].append(round(statistics.median(got["step_wall"][args.warmup:]), 4))
            rounds.append(entry)
            print(f"round {i + 1}: " + ", ".join(f"{v} {statistics.median(e['step_wall']):.3f} s/step"
                                                  for v, e in entry.items()), flush=True)
    result = {
        "model": "tiny random Llama (hidden 256, 4 layers) + BPE tokenizer",
        "settings": SETTINGS, "steps_per_run": args.steps, "warmup_ignored": args.warmup, "rounds": len(rounds),
        "order": sequence,
        "median_step_s": {v: {k: round(statistics.median([x for r in rounds for x in r[v][k]]), 4)
                              for k in ("step_time", "step_wall")} for v in chosen},
        "run_medians_step_wall": {v: [r[v]["run_medians"] for r in rounds] for v in chosen},
        "ratios": {v: {k: ratio_entry(rounds, v, k) for k in ("step_time", "step_wall")} for v in chosen if v != "bare"},
        "goal": "ours_trl_generation step_wall ratio <= 1.03",
        "load_average_at_end": os.getloadavg()[0],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    json.dump(result, open(args.out, "w"), indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
