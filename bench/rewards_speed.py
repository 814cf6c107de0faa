"""Reward scoring speed: the default set (format_soft + correct_math + length_target) vs a sequential baseline.

The baseline scores each completion the way common open-source reward files do (TRL's
accuracy_reward, open-r1): math-verify parse(gold), parse(completion), verify() one completion at
a time in the main thread, plus the same format and length functions. Ours is `rewards.get(...)`
called on trainer-sized batches (math-verify in a child-process pool with a result cache and a
plain-integer fast path). Scores must be identical. Writes bench/results/rewards_speed.json.

    python bench/rewards_speed.py [--count 2000] [--batch 16]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import sys
import time
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rewards  # noqa: E402
from rewards import format as format_rewards  # noqa: E402
from rewards import length, mathcheck  # noqa: E402

RESULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "rewards_speed.json")
GENERATIONS_PER_PROMPT = 8


def gsm8k_style_problem(rng: random.Random) -> tuple[str, int, list[str]]:
    """A word problem, its integer answer, and reasoning lines with intermediate numbers."""
    price, count, extra = rng.randint(2, 60), rng.randint(2, 40), rng.randint(1, 500)
    subtotal = price * count
    answer = subtotal + extra
    prompt = (f"A shop sells pens at ${price} each. Maria buys {count} pens and pays a ${extra} delivery fee. "
              f"How much does she pay in total?")
    steps = [f"Each pen costs ${price}, so {count} pens cost {price} * {count} = {subtotal} dollars.",
             f"Adding the delivery fee: {subtotal} + {extra} = {answer}."]
    return prompt, answer, steps


def completion_for(rng: random.Random, answer: int, steps: list[str]) -> str:
    """One sampled completion: reasoning plus a final answer in one of the styles models produce."""
    final = answer if rng.random() < 0.6 else answer + rng.choice([-10, -1, 1, 2, 100])
    reasoning = " ".join(steps[: rng.randint(0, len(steps))])
    style = rng.random()
    if style < 0.55:
        ending = f"The answer is \\boxed{{{final}}}."
    elif style < 0.70:
        ending = f"So she pays $\\boxed{{{final:,}}}$ dollars in total."
    elif style < 0.82:
        ending = f"Therefore, the final answer is ${final}$."
    elif style < 0.92:
        ending = f"\\boxed{{\\frac{{{final * 2}}}{{2}}}}"
    else:
        ending = f"#### {final}"
    return f"{reasoning}\n{ending}".strip()


def dataset(count: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """count completions (8 per prompt, like a GRPO group) with their prompts and gold answers."""
    rng = random.Random(seed)
    prompts, golds, completions = [], [], []
    while len(completions) < count:
        prompt, answer, steps = gsm8k_style_problem(rng)
        for _ in range(GENERATIONS_PER_PROMPT):
            prompts.append(prompt)
            golds.append(str(answer))
            completions.append(completion_for(rng, answer, steps))
    return prompts[:count], golds[:count], completions[:count]


def baseline_scores(completions: list[str], golds: list[str]) -> list[tuple]:
    """Sequential scoring, one completion at a time, math-verify with its default (signal) timeouts."""
    from math_verify import parse, verify

    format_fn = format_rewards.format_soft()
    length_fn = length.length_target()
    config = mathcheck.prediction_config()
    scores = []
    for completion, gold in zip(completions, golds):
        gold_parsed = parse(gold)
        if gold_parsed:
            correct = float(verify(gold_parsed, parse(completion, extraction_config=config,
                                                      extraction_mode="first_match")))
        else:
            correct = None
        scores.append((format_fn([completion])[0], correct, length_fn([completion])[0]))
    return scores


def our_scores(completions: list[str], golds: list[str], prompts: list[str], batch: int) -> list[tuple]:
    """The library's SafeRewards on trainer-sized batches."""
    reward_fns = [rewards.get("format_soft"), rewards.get("correct_math"), rewards.get("length_target")]
    scores = []
    for start in range(0, len(completions), batch):
        part = slice(start, start + batch)
        columns = [fn(completions[part], answer=golds[part], prompts=prompts[part]) for fn in reward_fns]
        scores.extend(zip(*columns))
    for fn in reward_fns:
        assert not fn.drain_events(), f"{fn.__name__} recorded faults"
    return scores


def pool_only_seconds(completions: list[str], golds: list[str], batch: int) -> float:
    """Time for correctness alone through the child pool with the fast path off (no cache carried over)."""
    mathcheck.CACHE.clear()
    start = time.perf_counter()
    for offset in range(0, len(completions), batch):
        pairs = list(zip(golds[offset:offset + batch], completions[offset:offset + batch]))
        mathcheck.judge_pairs(pairs, use_fast_path=False)
    return time.perf_counter() - start


def timed(function, *args):
    """(result, seconds) of one call."""
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=16, help="completions per reward call (a GRPO step's batch)")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    prompts, golds, completions = dataset(args.count)

    start = time.perf_counter()
    mathcheck.pool().warm()  # start the math-verify children (a trainer does this once per run)
    startup_s = time.perf_counter() - start
    mathcheck.CACHE.clear()

    baseline_scores(completions[:8], golds[:8])  # math-verify's one-off start-up cost stays out of the baseline too
    baseline, baseline_s = timed(baseline_scores, completions, golds)
    ours, ours_s = timed(our_scores, completions, golds, prompts, args.batch)
    pool_s = pool_only_seconds(completions, golds, args.batch)
    mismatches = [i for i, (a, b) in enumerate(zip(baseline, ours)) if a != b]
    fast = sum(mathcheck.fast_judgement(g, c) is not None for g, c in zip(golds, completions))
    result = {
        "completions": args.count,
        "batch_size": args.batch,
        "reward_set": ["format_soft", "correct_math", "length_target"],
        "baseline_completions_per_s": round(args.count / baseline_s, 1),
        "ours_completions_per_s": round(args.count / ours_s, 1),
        "speedup": round(baseline_s / ours_s, 2),
        "ours_without_fast_path_correctness_per_s": round(args.count / pool_s, 1),
        "speedup_without_fast_path": round(baseline_s / pool_s, 2),
        "fast_path_fraction": round(fast / args.count, 3),
        "pool_startup_s": round(startup_s, 2),
        "identical_scores": not mismatches,
        "mismatches": len(mismatches),
        "fraction_correct": round(sum(s[1] == 1.0 for s in ours) / args.count, 3),
        "machine": {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(),
                    "math_verify": version("math-verify"), "platform": platform.platform()},
    }
    os.makedirs(os.path.dirname(RESULT_PATH), exist_ok=True)
    with open(RESULT_PATH, "w") as handle:
        json.dump(result, handle, indent=2)
        handle.write("\n")
    print(json.dumps(result, indent=2))
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
