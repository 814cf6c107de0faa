"""AdamW's step on CPU over LoRA parameters: `adamw_torch` (torch's foreach kernels) vs `adamw_torch_fused`.

transformers maps `optim: adamw_torch` to `torch.optim.AdamW(foreach=None)` (foreach on CPU) and
`adamw_torch_fused` to `AdamW(fused=True)`; TRL's GRPOConfig defaults to the fused one. The parameters are
the LoRA A/B matrices (r=16, the seven projections of every layer) of SmolLM2-135M (30 layers, hidden 576,
MLP 1536) and of the overhead bench's tiny Llama (4 layers, hidden 256), with random gradients. The two
optimizers alternate in rounds; each round times `steps` optimizer steps (zero_grad not included).

    python bench/optimizer_step.py [--rounds 7] [--steps 50] [--out bench/results/optimizer_step.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {  # name: (layers, hidden, intermediate, kv width)
    "smollm2-135m": (30, 576, 1536, 192),
    "tiny-llama": (4, 256, 512, 128),
}


def lora_params(layers: int, hidden: int, intermediate: int, kv: int, r: int = 16):
    """LoRA A (r x in) and B (out x r) for q, k, v, o, gate, up, down of every layer, with gradients."""
    import torch

    projections = [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden),
                   (hidden, intermediate), (hidden, intermediate), (intermediate, hidden)]
    params = []
    for _ in range(layers):
        for fan_in, fan_out in projections:
            for shape in ((r, fan_in), (fan_out, r)):
                p = torch.nn.Parameter(torch.randn(shape) * 0.01)
                p.grad = torch.randn(shape) * 1e-3
                params.append(p)
    return params


def time_steps(optimizer, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - started) / steps


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "optimizer_step.json"))
    args = parser.parse_args()
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": args.rounds,
              "steps_per_round": args.steps, "models": {}}
    for name, shape in SHAPES.items():
        params = lora_params(*shape)
        optimizers = {"adamw_torch": torch.optim.AdamW(params, lr=3e-4, foreach=True),
                      "adamw_torch_fused": torch.optim.AdamW(params, lr=3e-4, fused=True)}
        for optimizer in optimizers.values():  # warm up: allocate the state
            time_steps(optimizer, 3)
        times = {k: [] for k in optimizers}
        for i in range(args.rounds):
            order = list(optimizers) if i % 2 == 0 else list(optimizers)[::-1]
            for key in order:
                times[key].append(time_steps(optimizers[key], args.steps))
        ratios = [f / p for f, p in zip(times["adamw_torch_fused"], times["adamw_torch"])]
        result["models"][name] = {
            "lora_params": sum(p.numel() for p in params), "tensors": len(params),
            "ms_per_step": {k: [round(1e3 * t, 3) for t in v] for k, v in times.items()},
            "median_ms": {k: round(1e3 * statistics.median(v), 3) for k, v in times.items()},
            "fused_over_foreach": {"median": round(statistics.median(ratios), 3),
                                   "min": round(min(ratios), 3), "max": round(max(ratios), 3)},
        }
        print(name, result["models"][name]["median_ms"], result["models"][name]["fused_over_foreach"], flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
