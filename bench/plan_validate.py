"""Validate the memory plan on CPU: planner estimates vs measured memory of real steps.

For the tiny test model and the embedded SmolLM2-135M (fp32, and 4-bit nf4 via bitsandbytes),
each case runs in a fresh subprocess and measures
  - weights: the bytes of the loaded model's tensors (exact) and the RSS growth while loading;
  - training: the peak RSS growth during one policy forward + backward of micro_batch x
    (prompt + completion) tokens with LoRA, log-probs of the completion tokens from full logits
    (what our CPU fallback of TRL's fused head does), with and without gradient checkpointing;
  - generation: the peak RSS growth during one `generate` of the generation batch.
The planner is asked for the same settings with device="cpu" (fp32 activations, full logits,
no CUDA context). What RSS measures: resident pages of the whole process, sampled every 2 ms by
a thread, so a peak shorter than that can be missed and glibc/torch allocator slack is included.
`MALLOC_MMAP_THRESHOLD_` is pinned so large tensors are mmapped and returned on free: the growth
during a phase then tracks live tensor bytes (plus small-block heap slack) rather than reuse of
memory freed earlier. Activation peaks on the GPU are counted in bf16 with the same formula; this
run checks the fp32 instance of it.

    python bench/plan_validate.py            # all cases, writes bench/results/plan_validate.json
    python bench/plan_validate.py --case smol-fp32-train   # one case, prints its JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

# name -> (model, 4-bit, phase, micro/generation batch, prompt tokens, completion tokens, checkpointing)
CASES = {
    "tiny-fp32-train": ("tiny", False, "train", 16, 64, 192, False),
    "tiny-fp32-gen": ("tiny", False, "gen", 16, 64, 64, False),
    "smol-fp32-train": ("embedded", False, "train", 2, 64, 128, False),
    "smol-fp32-train-ckpt": ("embedded", False, "train", 2, 64, 128, True),
    "smol-4bit-train": ("embedded", True, "train", 2, 64, 128, False),
    "smol-fp32-gen": ("embedded", False, "gen", 8, 64, 32, False),
}
MB = 1024**2


class PeakRSS:
    """Sample this process's RSS every `interval` s in a thread; `peak` is the largest seen."""

    def __init__(self, interval: float = 0.002):
        import psutil

        self.proc, self.interval, self.peak, self._stop = psutil.Process(), interval, 0, threading.Event()

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def __enter__(self):
        self.start = self.peak = self.rss()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def growth(self) -> int:
        return self.peak - self.start


def _model_dir(which: str, tmp: str) -> str:
    if which == "tiny":
        from tiny_model import build_tiny_model

        return build_tiny_model(os.path.join(tmp, "tiny"), hidden=128, layers=4)
    from local_grpo import models

    return models.resolve("embedded")


def run_case(name: str) -> dict:
    which, four_bit, phase, batch, prompt, completion, ckpt = CASES[name]
    import torch

    torch.set_num_threads(2)
    torch.manual_seed(0)
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    from local_grpo import plan
    from local_grpo.config import Config

    tmp = tempfile.mkdtemp()
    path = _model_dir(which, tmp)
    kwargs = {"dtype": torch.float32}
    if four_bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32,
            bnb_4bit_use_double_quant=True)
    meter = PeakRSS()
    with meter:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        if four_bit:
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=ckpt)
        with torch.no_grad():  # touch every weight: safetensors maps the file lazily
            model(input_ids=torch.ones((1, 4), dtype=torch.long))
    load_growth = meter.rss() - meter.start
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in model.state_dict().values()}
    tensor_bytes = sum(storages.values())  # tied embeddings counted once
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (batch, prompt + completion))
    mask = torch.ones_like(ids)

    config = Config()
    config.model.name = path
    config.model.load_in_4bit = four_bit
    config.model.dtype = "float32"
    config.model.max_seq_length = prompt + completion
    config.backend = "hf"
    config.grpo.max_completion_length = completion
    config.grpo.per_device_train_batch_size = batch
    config.grpo.num_generations = batch
    config.grpo.gradient_checkpointing = ckpt
    est = plan.estimate(config, device="cpu")
    b = est["breakdown"]
    result = {"case": name, "model": which, "load_in_4bit": four_bit, "phase": phase, "batch": batch,
              "prompt_tokens": prompt, "completion_tokens": completion, "gradient_checkpointing": ckpt,
              "weights_tensor_mb": tensor_bytes / MB, "weights_rss_mb": load_growth / MB,
              "weights_plan_mb": b["weights_gb"] * 1024}
    if phase == "train":
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        labels = ids[:, -completion:]
        with PeakRSS() as m:
            t0 = time.time()
            out = model(input_ids=ids, attention_mask=mask, logits_to_keep=completion + 1)
            logits = out.logits[:, :-1].float()
            log_p = torch.log_softmax(logits, dim=-1)
            token_log_p = log_p.gather(-1, labels[..., None]).squeeze(-1)
            entropy = -(log_p.exp() * log_p).sum(-1)
            loss = -token_log_p.mean() - 0.01 * entropy.mean()
            loss.backward()
            seconds = time.time() - t0
        result.update(measured_mb=m.growth / MB, plan_mb=(b["activations_gb"] + b["logits_gb"]) * 1024,
                      plan_activations_mb=b["activations_gb"] * 1024, plan_logits_mb=b["logits_gb"] * 1024,
                      seconds=seconds)
    else:
        model.eval()
        with torch.no_grad(), PeakRSS(interval=0.01) as m:  # decoding is Python-bound: sample less often
            t0 = time.time()
            model.generate(input_ids=ids[:, :prompt], attention_mask=mask[:, :prompt], max_new_tokens=completion,
                           min_new_tokens=completion, do_sample=True, pad_token_id=0)
            seconds = time.time() - t0
        result.update(measured_mb=m.growth / MB, plan_mb=(b["kv_cache_gb"] + b["generation_working_gb"]) * 1024,
                      plan_kv_cache_mb=b["kv_cache_gb"] * 1024, seconds=seconds)
    result["ratio_plan_to_measured"] = result["plan_mb"] / max(result["measured_mb"], 1e-9)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "plan_validate.json"))
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "2", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    results = []
    for name in CASES:
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, env=env)
        if proc.returncode:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(row)
        print(f"{name:22s} measured {row['measured_mb']:8.1f} MB  plan {row['plan_mb']:8.1f} MB  "
              f"ratio {row['ratio_plan_to_measured']:.2f}  weights tensors {row['weights_tensor_mb']:.1f} / "
              f"plan {row['weights_plan_mb']:.1f} MB  ({time.time() - t0:.0f} s)", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"device": "cpu", "what": "planner (device=cpu) vs measured peak RSS growth", "results": results},
                  fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
