"""How often a merged16 export of a 4-bit run reproduces the 4-bit model it was trained as.

For each tiny architecture of tests/tiny_model.py, in float32 and with a 4-bit nf4 base: train two GRPO
steps, then give the adapter random LoRA B matrices (N(0, --lora-b-std), seeded): GRPO on a random model
mostly sees rewards without spread, so its B stays zero and the adapter would change nothing (the JSON
says how many prompts the adapter changes). Then do what `export --format merged16` does, without
its pass/fail: the reference is the trained model as eval loads it (the run's base + adapter; 4-bit:
bitsandbytes nf4, computed in float32), the export is the adapter merged in float32 into the base (4-bit:
the dequantised nf4 base), stored in f16 and bf16, reloaded in float32. Greedy tokens on the held-out
prompts are compared with export.compare_greedy under the horizon rule. Each row also gives the largest
logit difference between the reference and the merged model before it is stored in 16 bits (teacher-forced
on the reference's tokens), and for each prompt that breaks the rule, the reference's own margin (top
logit minus the second) at the first token that differs.

    .venv/bin/python bench/export_4bit_agreement.py [--prompts 16] [--tokens 64] [--archs smollm2,qwen3]
writes bench/results/export_4bit_agreement.json (one row per architecture x base x store dtype).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def randomise_lora_b(adapter_dir: str, std: float, seed: int = 0) -> None:
    """Replace every lora_B of a saved adapter by N(0, std) values (seeded)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    tensors = load_file(path)
    generator = torch.Generator().manual_seed(seed)
    for name in sorted(tensors):
        if "lora_B" in name:
            tensors[name] = torch.randn(tensors[name].shape, generator=generator) * std
    save_file(tensors, path, metadata={"format": "pt"})


def path_logits(model, tokenizer, messages: list[dict], ids: list[int]):
    """The model's next-token logits along a given completion (teacher-forced), one row per token of `ids`."""
    import torch

    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return model(torch.cat([prompt, torch.tensor([ids])], 1)).logits[0, prompt.shape[1] - 1:-1].float()


def margin(logits_row) -> float:
    top = logits_row.topk(2).values
    return float(top[0] - top[1])


def agreement(run_dir: str, prompts: int) -> list[dict]:
    """The horizon-rule agreement of merged f16 and bf16 exports of `run_dir` with its trained model."""
    import torch
    from transformers import AutoModelForCausalLM

    from local_grpo import backends, export, rundir
    from local_grpo.config import load as load_config

    run = rundir.RunDir.open(run_dir)
    config = export.inference_config(load_config(run.file(rundir.CONFIG)))
    base = backends.load_for_inference(config, None, device="cpu", base=run.base_model())
    untrained = export.reference_ids(base.model, base.tokenizer, config, prompts)
    base = None
    trained = export.load_trained(config, run)
    reference = export.reference_label(trained.model)
    want = export.reference_ids(trained.model, trained.tokenizer, config, prompts)
    tokenizer = trained.tokenizer
    messages = export.verification_prompts(config, prompts)
    reference_logits = [path_logits(trained.model, tokenizer, m, ids) for m, ids in zip(messages, want)]
    merged = export.merged_model(config, run, trained)
    merge_difference = max(float((path_logits(merged, tokenizer, m, ids) - ref).abs().max())
                           for m, ids, ref in zip(messages, want, reference_logits))
    rows = []
    for store in ("float16", "bfloat16"):
        with tempfile.TemporaryDirectory() as folder:
            copy = AutoModelForCausalLM.from_config(merged.config, dtype=torch.float32)
            copy.load_state_dict(merged.state_dict())
            copy.to(getattr(torch, store)).save_pretrained(folder)
            reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        got = export.greedy_ids(reloaded, tokenizer, export.verification_prompts(config, prompts),
                                config.grpo.max_completion_length)
        report = export.compare_greedy(want, got, export.final_answers(tokenizer, want),
                                       export.final_answers(tokenizer, got), "horizon")
        gaps = [round(margin(reference_logits[i][export.matching_prefix(want[i], got[i])]), 7) for i in report["failed"]]
        rows.append({"store": store, "reference": reference, **{k: report[k] for k in (
            "prompts", "identical", "agreement", "token_agreement", "horizon_agreement", "answer_agreement", "failed")},
            "mean_tokens": round(sum(map(len, want)) / len(want), 1),
            "prompts_the_adapter_changes": sum(a != b for a, b in zip(want, untrained)),
            "merge_max_logit_difference": merge_difference, "reference_margin_where_failed": gaps,
            "logit_scale": round(max(float(ref.abs().max()) for ref in reference_logits), 3)})
    return rows


def main() -> None:
    import torch

    from local_grpo import train
    from local_grpo.rundir import RunDir
    from conftest import make_tiny_config
    from tiny_model import ARCHITECTURES, build_architecture, save_smollm2_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="held-out prompts compared (default 16)")
    parser.add_argument("--tokens", type=int, default=64, help="max_completion_length of the runs (default 64)")
    parser.add_argument("--archs", default=",".join(ARCHITECTURES), help="architectures (default: all)")
    parser.add_argument("--lora-b-std", type=float, default=0.1, help="std of the random LoRA B (default 0.1)")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "export_4bit_agreement.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        tokenizer_dir = save_smollm2_tokenizer(os.path.join(work, "tokenizer"))
        for arch in args.archs.split(","):
            model_dir = build_architecture(arch, os.path.join(work, arch), tokenizer_dir)
            for four_bit in (False, True):
                config = make_tiny_config(model_dir, os.path.join(work, f"{arch}-{int(four_bit)}"), steps=2,
                                          save_steps=2, max_completion_length=args.tokens)
                config.model.load_in_4bit = four_bit
                config.model.max_seq_length = 256  # the prompts (~77 tokens) + args.tokens
                config.data.num_heldout = args.prompts
                config.grpo.p_ref_prompts = 0
                started = time.time()
                train.train(config, progress=False)
                randomise_lora_b(RunDir(config.output_dir).adapter_dir, args.lora_b_std)
                for row in agreement(config.output_dir, args.prompts):
                    row.update({"arch": arch, "base": "nf4" if four_bit else "float32",
                                "seconds": round(time.time() - started, 1)})
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"machine": platform.processor() or platform.machine(), "torch_threads": 1,
                   "prompts": args.prompts, "max_completion_length": args.tokens, "lora_b_std": args.lora_b_std,
                   "rule": "horizon", "rows": rows},
                  fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
