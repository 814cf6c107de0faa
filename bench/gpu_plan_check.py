"""GPU check of the memory plan: peak VRAM and step time of real GRPO steps vs `local_grpo.plan`.

Builds Qwen3-4B-shaped and Llama-3.1-8B-shaped models with random weights from configs (no
downloads; speed and memory do not depend on the weight values) and a word-level tokenizer with
one token per id, trains `--steps` GRPO steps (TRL GRPOTrainer, 4-bit nf4 + LoRA r 16, gradient
checkpointing, 8-bit AdamW, completions forced to their full length) with both backends — plain
HF + bitsandbytes + peft, and Unsloth — at two completion lengths, and records
torch.cuda.max_memory_allocated / max_memory_reserved, the second step's time, and the plan's
estimate for the same settings (goal: within +-15 %; Unsloth vs HF goal: <= 0.5x peak VRAM,
<= 0.6x step time). Every (model, backend) pair runs in its own subprocess (Unsloth patches
transformers/trl at import, and each pair needs a clean CUDA peak counter).

Writes $OUT/gpu_plan_check.json (or the path given with --out); copy it to
bench/results/gpu_plan_check.json and its table into docs/performance.md.

Device setup (the H200 image has torch 2.11, transformers 5.17, peft, accelerate; no trl,
datasets, bitsandbytes, unsloth). Here, once, in the repo root (wheels for cp312 manylinux):
    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl trl==1.15.0 datasets==4.8.5 bitsandbytes==0.50.2 \
      unsloth==2026.10.9 unsloth-zoo==2026.10.9 xxhash multiprocess dill pyarrow tyro
    (together > 64 MiB: split into .whl (bitsandbytes, trl, datasets + deps) and .whl2 (unsloth,
    unsloth-zoo, tyro ...); check `unzip -p .whl/NAME*.whl '*/METADATA' | grep ^Requires-Dist`
    for anything else missing on the device, e.g. pyarrow is usually present with datasets' users.)
Then two `run` calls on the same warm machine (a folder outside the repo survives between them):
    run(carry=[".whl"], timeout_s=120, command="python3 -m pip install -q --no-index --no-deps
        --no-compile --target /tmp/site .whl/*.whl && echo ok")
    run(carry=[".whl2"], timeout_s=540, command="python3 -m pip install -q --no-index --no-deps
        --no-compile --target /tmp/site .whl2/*.whl && export PYTHONPATH=/tmp/site:$PWD
        UNSLOTH_DISABLE_STATISTICS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 &&
        python3 bench/gpu_plan_check.py --out $OUT/gpu_plan_check.json 2>&1 | tee $OUT/log.txt")
Budget: ~8 minutes on an H200 (4 subprocesses; the 8B pair builds a 16 GB random checkpoint once).
`--models qwen3-4b` or `--backends hf` shorten it for a rerun.

Dry run on CPU (no GPU needed; a tiny shape, the HF backend, fp32, TRL's CPU fallback):
    python bench/gpu_plan_check.py --dry-run --out /tmp/gpu_plan_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

MODELS = {"qwen3-4b": "Qwen/Qwen3-4B", "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct"}
PROMPT_TOKENS = 128
NUM_GENERATIONS = 4
MICRO_BATCH = 4
LORA_R = 16
GIB = 1024**3


def build_model_folder(key: str, out_dir: str, dry_run: bool) -> str:
    """A random-weight checkpoint of the model's published shape + a one-token-per-id tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen3Config

    from local_grpo import plan

    if os.path.isfile(os.path.join(out_dir, "config.json")):
        return out_dir
    shape = plan.model_shape(MODELS[key])
    if dry_run:  # tiny stand-in with the same family
        shape = plan.Shape(shape.name, 64, 2, 4, 2, 16, 128, 512, shape.tie_embeddings)
    common = dict(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                  num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
                  num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                  tie_word_embeddings=shape.tie_embeddings, max_position_embeddings=4096,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config = Qwen3Config(**common) if key.startswith("qwen") else LlamaConfig(**common)
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{f"t{i}": i for i in range(3, shape.vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.save_pretrained(out_dir, max_shard_size="5GB")
    tokenizer.save_pretrained(out_dir)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out_dir


def worker(key: str, backend: str, lengths: list[int], steps: int, folder: str, dry_run: bool) -> list[dict]:
    """Load once with `backend`, train `steps` GRPO steps at each completion length; one row per length."""
    if backend == "unsloth":
        os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")
        import unsloth  # noqa: F401  (before trl/transformers)
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from local_grpo import backends, plan
    from local_grpo.config import Config

    on_cuda = torch.cuda.is_available()
    rows = []
    config = Config()
    config.model.name = folder
    config.model.load_in_4bit = True
    config.model.dtype = "auto" if on_cuda else "float32"
    config.model.max_seq_length = PROMPT_TOKENS + max(lengths)
    config.backend = backend
    config.lora.r, config.lora.alpha = LORA_R, 2 * LORA_R
    config.grpo.num_generations = NUM_GENERATIONS
    config.grpo.per_device_train_batch_size = MICRO_BATCH
    config.grpo.gradient_checkpointing = True
    config.grpo.optim = "adamw_8bit" if on_cuda else "adamw_torch"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    loaded = backends.load(config)
    load_seconds = time.time() - t0
    weights_allocated = torch.cuda.memory_allocated() / GIB if on_cuda else None
    rng = random.Random(0)
    prompts = [" ".join(f"t{rng.randrange(3, 500)}" for _ in range(PROMPT_TOKENS)) for _ in range(64)]
    dataset = Dataset.from_dict({"prompt": prompts})

    def reward(completions, **kw):
        return [rng.random() for _ in completions]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self._t = [], None

        def on_step_begin(self, args, state, control, **kw):
            self._t = time.time()

        def on_step_end(self, args, state, control, **kw):
            if on_cuda:
                torch.cuda.synchronize()
            self.times.append(time.time() - self._t)

    from trl import GRPOConfig

    for length in lengths:
        config.grpo.max_completion_length = length
        if on_cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        args = GRPOConfig(
            output_dir=tempfile.mkdtemp(), max_steps=steps, per_device_train_batch_size=MICRO_BATCH,
            num_generations=NUM_GENERATIONS, max_completion_length=length, learning_rate=1e-5,
            gradient_checkpointing=True, optim=config.grpo.optim, logging_steps=1, save_strategy="no",
            report_to=[], bf16=on_cuda, use_cpu=not on_cuda, beta=0.0,
            generation_kwargs={"min_new_tokens": length}, temperature=1.0,
        )
        timer = StepTimer()
        trainer = loaded.trainer_class(model=loaded.model, processing_class=loaded.tokenizer, args=args,
                                       reward_funcs=[reward], train_dataset=dataset, callbacks=[timer])
        trainer.train()
        est = plan.estimate(config, device="cuda")
        b = est["breakdown"]
        row = {
            "model": key, "backend": backend, "completion_tokens": length, "prompt_tokens": PROMPT_TOKENS,
            "micro_batch": MICRO_BATCH, "num_generations": NUM_GENERATIONS, "lora_r": LORA_R, "steps": steps,
            "step_seconds": timer.times[-1] if timer.times else None, "step_seconds_all": timer.times,
            "load_seconds": load_seconds, "weights_allocated_gb": weights_allocated,
            "plan_total_gb": est["total_gb"], "plan_breakdown": {k: v for k, v in b.items() if k.endswith("_gb")},
            "plan_peak_phase": b["peak_phase"],
        }
        if on_cuda:
            allocated = torch.cuda.max_memory_allocated() / GIB
            reserved = torch.cuda.max_memory_reserved() / GIB
            # torch's counters exclude the CUDA context: compare like with like.
            plan_torch = est["total_gb"] - plan.CUDA_CONTEXT_GB
            row.update(peak_allocated_gb=allocated, peak_reserved_gb=reserved, plan_torch_gb=plan_torch,
                       plan_over_reserved=plan_torch / reserved, within_15pct=abs(plan_torch / reserved - 1) <= 0.15)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        del trainer
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default="hf,unsloth")
    parser.add_argument("--lengths", default="256,768", help="completion lengths (tokens)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_plan_check.json"))
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpu_plan_check"))
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on CPU, HF backend only")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.dry_run:
        lengths, args.steps = [16, 32], 1
    if args.worker:
        key, backend = args.worker
        folder = build_model_folder(key, os.path.join(args.workdir, key), args.dry_run)
        rows = worker(key, backend, lengths, args.steps, folder, args.dry_run)
        print("ROWS " + json.dumps(rows), flush=True)
        return 0
    backends_wanted = ["hf"] if args.dry_run else args.backends.split(",")
    results, failures = [], []
    t_start = time.time()
    for key in args.models.split(","):
        for backend in backends_wanted:
            cmd = [sys.executable, __file__, "--worker", key, backend, "--lengths", ",".join(map(str, lengths)),
                   "--steps", str(args.steps), "--workdir", args.workdir] + (["--dry-run"] if args.dry_run else [])
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), REPO]))})
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("ROWS ")), None)
            if proc.returncode or line is None:
                failures.append({"model": key, "backend": backend, "rc": proc.returncode, "tail": proc.stderr[-3000:]})
                print(f"{key} {backend}: FAILED rc={proc.returncode}\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            results.extend(json.loads(line[5:]))
            print(f"{key} {backend}: done in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    summary = _compare_backends(results)
    report = {"dry_run": args.dry_run, "seconds": time.time() - t_start, "results": results,
              "unsloth_vs_hf": summary, "failures": failures}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    for r in results:
        peak = r.get("peak_reserved_gb")
        print(f"{r['model']:14s} {r['backend']:8s} C={r['completion_tokens']:5d}  step {r['step_seconds'] or 0:6.1f} s  "
              f"peak reserved {peak if peak is not None else float('nan'):6.2f} GB  plan {r['plan_total_gb']:6.2f} GB")
    return 1 if failures else 0


def _compare_backends(rows: list[dict]) -> list[dict]:
    """Unsloth / HF ratios of peak reserved VRAM and step time, per model and length."""
    by = {(r["model"], r["completion_tokens"], r["backend"]): r for r in rows}
    out = []
    for (model, length, backend), r in by.items():
        hf = by.get((model, length, "hf"))
        if backend != "unsloth" or hf is None:
            continue
        item = {"model": model, "completion_tokens": length}
        if r.get("peak_reserved_gb") and hf.get("peak_reserved_gb"):
            item["vram_ratio"] = r["peak_reserved_gb"] / hf["peak_reserved_gb"]
        if r.get("step_seconds") and hf.get("step_seconds"):
            item["step_time_ratio"] = r["step_seconds"] / hf["step_seconds"]
        out.append(item)
    return out


if __name__ == "__main__":
    sys.exit(main())
