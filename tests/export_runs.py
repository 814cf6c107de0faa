"""Run directories for export tests, written without training: a saved config and a random LoRA adapter."""

from __future__ import annotations

import os


def run_config(run_dir, base_dir: str, heldout: int = 4, max_completion: int = 24, model_name: str | None = None):
    """The config of a run over `base_dir` (named `model_name`, default the folder) on the arithmetic task,
    saved in `run_dir`."""
    from local_grpo import config as config_mod
    from local_grpo import tasks

    config = config_mod.Config()
    config.model.name, config.backend, config.output_dir = model_name or base_dir, "hf", str(run_dir)
    config.data.num_train, config.data.num_heldout = 8, heldout
    config.grpo.max_completion_length = max_completion
    config = tasks.fill_defaults(config)
    os.makedirs(run_dir, exist_ok=True)
    config_mod.save(config, str(run_dir / "config.yaml"))
    return config


def write_adapter(run_dir, base_dir: str, lora_std: float, seed: int = 1) -> str:
    """RUN_DIR/adapter: a random non-zero LoRA adapter (q, v; r 4) over `base_dir`, built directly with peft."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=lora_std)  # B = 0 would make the adapter a no-op
    model.save_pretrained(str(run_dir / "adapter"))
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(str(run_dir / "adapter"))
    return str(run_dir)
