"""Generation speed on the quickstart's shapes: decode ms per step against this CPU's bounds.

The quickstart samples 8 completions for each of 2 prompts per step (16 rows, ~47 prompt tokens) with
SmolLM2-135M in fp32, up to 48 new tokens. This script generates exactly that batch (EOS suppressed, so
every run decodes the same number of steps), alternating the variants for --rounds rounds:

    plain      model.generate as TRL 1.15 calls it (what training did before)
    prefill    the same with the shared prefill alone (cpu_sampling_speedups with the other two off)
    fast       inside generation.cpu_sampling_speedups as training runs it: the shared prefill, the output
               head pre-packed for oneDNN (logits equal to float rounding) and tokens drawn by inverse
               CDF (same distribution, another random stream: so the tokens differ from plain's)
    bf16       plain under torch.autocast("cpu", bfloat16) (what bf16 autocast would do to generation)
    fast_bf16  fast with bf16 weights (`bf16_weights=True`, what training with bf16 autocast runs; only
               on CPUs with native bf16)

and reports per variant the median seconds for 1 new token (the prefill) and for --new-tokens, the
decode ms per step ((t_N - t_1) / (N - 1)), and whether the tokens match plain's. The bounds:

    bandwidth bound = bytes of the weights read per decode step / measured read bandwidth
                      (sum over a 1 GiB fp32 tensor that has been written, so it is really in memory)
    compute bound   = 2 * parameters * rows FLOPs per decode step / measured fp32 matmul rate (2048^3)
    linear pass     = the time of one decode step's matrix products alone with torch's own kernel
                      (`linear_pass_ms`): what the bounds become with the CPU's skinny-product speed

    python bench/generation_speed.py [--rounds 3] [--new-tokens 48] [--no-bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)


def read_bandwidth_gbs() -> float:
    import torch

    x = torch.ones(2**28)  # 1 GiB, written
    x.sum()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t)
    return x.numel() * 4 / min(times) / 1e9


def matmul_gflops(dtype_name: str = "float32", n: int = 2048) -> float:
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(3):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times) / 1e9


def linear_pass_ms(model, rows: int) -> float:
    """One decode step's matrix products alone: `rows` rows times every nn.Linear weight of the model
    (LoRA's included), each weight visited once as a forward does, so it comes from memory, not cache.
    Best of 3 passes; the floor for a decode step with torch's own CPU kernel."""
    import torch

    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
    times = []
    with torch.no_grad():
        for _ in range(3):
            t = time.perf_counter()
            for w in weights:
                torch.nn.functional.linear(inputs[w.shape[1]], w)
            times.append(time.perf_counter() - t)
    return min(times) * 1e3


def quickstart_batch(tokenizer, config):
    from local_grpo import data

    rows, _ = data.load_examples(config)
    g = config.grpo
    prompts = [r["prompt"] for r in rows[: g.per_device_train_batch_size // g.num_generations]]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    texts = [t for t in texts for _ in range(g.num_generations)]  # as TRL's sampler repeats each prompt
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def timed_generate(model, batch, tokenizer, new_tokens: int, variant: str, seed: int):
    import contextlib

    import torch
    from transformers import GenerationConfig

    from local_grpo.generation import cpu_sampling_speedups

    gen = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, temperature=1.0,
                           top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id, disable_compile=True)
    context = {"fast": lambda: cpu_sampling_speedups(model),
               "prefill": lambda: cpu_sampling_speedups(model, pack_output_head=False, inverse_cdf_sampling=False),
               "bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
               "fast_bf16": lambda: cpu_sampling_speedups(model, bf16_weights=True)}.get(variant, contextlib.nullcontext)
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad(), context():
        out = model.generate(**batch, generation_config=gen)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "cpu-quickstart.yaml"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 autocast variant")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "generation_speed.json"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from local_grpo import backends, tasks
    from local_grpo import config as config_mod

    config = tasks.fill_defaults(config_mod.load(args.config))
    loaded = backends.load(config)
    model, tokenizer = loaded.model, loaded.tokenizer
    model.eval()
    batch = quickstart_batch(tokenizer, config)
    rows, prompt_tokens = batch["input_ids"].shape
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    variants = ["plain", "prefill", "fast"] + ([] if args.no_bf16 else ["bf16"])
    variants += ["fast_bf16"] if backends.cpu_bf16_flags() and not args.no_bf16 else []
    times: dict = {v: {"1": [], "n": []} for v in variants}
    same_tokens = {v: True for v in variants}
    for round_ in range(args.rounds):
        for variant in variants:  # alternating, so drifts in machine load hit every variant alike
            t1, _ = timed_generate(model, batch, tokenizer, 1, variant, seed=round_)
            tn, out = timed_generate(model, batch, tokenizer, args.new_tokens, variant, seed=round_)
            times[variant]["1"].append(t1)
            times[variant]["n"].append(tn)
            if variant == "plain":
                reference = out
            else:
                same_tokens[variant] &= bool(torch.equal(out, reference))
            print(f"round {round_ + 1} {variant:7s}: 1 token {t1:.2f} s, {args.new_tokens} tokens {tn:.2f} s",
                  file=sys.stderr, flush=True)

    bandwidth, gflops, linear_ms = read_bandwidth_gbs(), matmul_gflops(), linear_pass_ms(model, rows)
    bound_bw_ms = weight_bytes / (bandwidth * 1e9) * 1e3
    bound_flops_ms = 2 * params * rows / (gflops * 1e9) * 1e3
    result = {
        "config": os.path.relpath(args.config, REPO), "rows": rows, "prompt_tokens": prompt_tokens,
        "new_tokens": args.new_tokens, "rounds": args.rounds, "threads": torch.get_num_threads(),
        "cpu_bf16_flags": backends.cpu_bf16_flags(),
        "params": params, "weight_bytes": weight_bytes,
        "bounds": {"read_bandwidth_gbs": round(bandwidth, 2), "matmul_fp32_gflops": round(gflops, 1),
                   "bandwidth_bound_ms_per_step": round(bound_bw_ms, 1), "compute_bound_ms_per_step": round(bound_flops_ms, 1),
                   "bound_ms_per_step": round(max(bound_bw_ms, bound_flops_ms), 1),
                   "linear_pass_ms": round(linear_ms, 1)},
        "variants": {},
    }
    for variant in variants:
        t1, tn = times[variant]["1"], times[variant]["n"]
        decode = [(b - a) / (args.new_tokens - 1) * 1e3 for a, b in zip(t1, tn)]
        result["variants"][variant] = {
            "prefill_s_median": round(statistics.median(t1), 3),
            "generate_s_median": round(statistics.median(tn), 3), "generate_s_range": [round(min(tn), 3), round(max(tn), 3)],
            "decode_ms_per_step_median": round(statistics.median(decode), 1),
            "decode_ms_per_step_range": [round(min(decode), 1), round(max(decode), 1)],
            "same_tokens_as_plain": same_tokens[variant],
        }
    plain = result["variants"]["plain"]
    for variant in variants:
        v = result["variants"][variant]
        v["speedup_vs_plain"] = round(plain["generate_s_median"] / v["generate_s_median"], 3)
        v["times_bound"] = round(v["decode_ms_per_step_median"] / result["bounds"]["bound_ms_per_step"], 2)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
