"""The bare TRL GRPOTrainer script that bench/overhead.py measures local-grpo against.

Plain TRL 1.15 on the same task, tiny model and settings as `local-grpo train` in the overhead bench:
the arithmetic prompts with the same system prompt, two inline rewards (last number correct, and an
`Answer: N` line), LoRA r=16 on every projection, fp32, every completion run to the cap (EOS
suppressed). It shares only the CPU log-prob path our trainer installs (TRL 1.15's own is
Triton-only), so that both sides compute the loss alike.

    python bench/bare_trl.py MODEL_DIR STEPS OUT_DIR SETTINGS_JSON   # writes OUT_DIR/bare.json
"""

from __future__ import annotations

import json
import os
import re
import sys
import time


def text(completion) -> str:
    return completion[0]["content"] if isinstance(completion, list) else completion


def correct(completions, answer, **kwargs) -> list[float]:
    out = []
    for c, a in zip(completions, answer):
        nums = re.findall(r"-?\d+", text(c))
        out.append(1.0 if nums and nums[-1] == a else 0.0)
    return out


def answer_line(completions, **kwargs) -> list[float]:
    return [0.2 if re.search(r"Answer:\s*-?\d+", text(c)) else 0.0 for c in completions]


def bare_trainer(model_dir: str, steps: int, out_dir: str, settings: dict):
    """A TRL GRPOTrainer with nothing of ours but the CPU log-prob path."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from local_grpo.tasks.answers import ANSWER_LINE_PROMPT
    from local_grpo.tasks.builtin.arithmetic import arithmetic_examples
    from local_grpo.train.trainer import install_cpu_logprob

    install_cpu_logprob()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [{"prompt": [{"role": "system", "content": ANSWER_LINE_PROMPT}, {"role": "user", "content": r["question"]}],
             "answer": r["answer"]} for r in arithmetic_examples(200, 0, {})]
    cap = settings["max_completion_length"]
    args = GRPOConfig(output_dir=os.path.join(out_dir, "ckpt"), use_cpu=True, bf16=False, report_to="none",
                      logging_steps=1, max_steps=steps, save_strategy="no",
                      per_device_train_batch_size=settings["per_device_train_batch_size"],
                      num_generations=settings["num_generations"], max_completion_length=cap,
                      learning_rate=settings["learning_rate"], beta=0.0, gradient_checkpointing=False, seed=42,
                      lr_scheduler_type="constant", disable_tqdm=True, generation_kwargs={"min_new_tokens": cap})
    lora = LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[correct, answer_line], args=args,
                       train_dataset=Dataset.from_list(rows), peft_config=lora)


def trl_step_times(trainer) -> list[float]:
    """TRL's own `step_time` of each logged step (training_step: generation, rewards, loss)."""
    return [h["step_time"] for h in trainer.state.log_history if "step_time" in h]


def main() -> None:
    from transformers import TrainerCallback

    model_dir, steps, out_dir, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
    trainer = bare_trainer(model_dir, steps, out_dir, settings)
    stamps = []

    class Stamps(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:  # step rows, not the end-of-training summary
                stamps.append(time.time())

    trainer.add_callback(Stamps())
    started = time.time()
    trainer.train()
    result = {"wall": time.time() - started, "step_wall": [b - a for a, b in zip(stamps, stamps[1:])],
              "step_time": trl_step_times(trainer)}
    with open(os.path.join(out_dir, "bare.json"), "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
