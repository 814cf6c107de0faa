"""GPU check of the GPU path: `local-grpo train` and `export` as users run them, on consumer memory budgets.

One `run` call of at most ~8 minutes on one GPU (an H200). Every item is one `local-grpo ... --json`
command in its own process (Unsloth patches transformers/trl at import; each item needs a clean CUDA
peak counter), capped with `torch.cuda.set_per_process_memory_fraction` to a consumer card's memory.
Its stdout must parse as exactly one JSON object. Items, most valuable first (an item starts only while
--budget-s has not run out; the JSON is rewritten after every item, so a cut-off call still returns
what ran):

    train-unsloth-qwen3-4bit         Qwen3-0.6B shape, 4-bit, --backend unsloth: Unsloth's GRPOTrainer with
                                     our hooks (never run on a GPU before), 8 GB cap
    train-hf-qwen2.5-4bit            Qwen2.5-0.5B shape, 4-bit, --backend hf, 8 GB
    train-hf-qwen3-4bit              Qwen3-0.6B shape, 4-bit, --backend hf, 8 GB
    export-lora                      train-hf-qwen3-4bit exported as a LoRA adapter, 16 GB
    export-merged16                  the same merged into its dequantised nf4 base, f16
    export-gguf                      the same as a GGUF f16 by llama.cpp's converter
    export-merged16-unsloth-run      train-unsloth-qwen3-4bit exported as merged16 (Unsloth's loader)
    train-unsloth-qwen2.5-4bit       configs/gsm8k-8gb.yaml's own model shape and backend, 8 GB
    train-hf-kl-mirror-qwen2.5-4bit  grpo.kl mirror (beta 0.04), hf, 8 GB
    train-hf-qwen2.5-16bit           without 4-bit, hf (the model placed on the GPU at load), 16 GB

Each train item is configs/gsm8k-8gb.yaml for 2 steps (num_train 48, num_heldout 8, p_ref_prompts 2)
on a generated GSM8K-format file, with --completion-tokens (256; the recipe's 1024 fits a longer call)
and the recipe's prompt budget. An export of a run that did not pass is skipped.

The models. A true Qwen2 (Qwen2Config) and a true Qwen3 (Qwen3Config) at the published shapes of
Qwen2.5-0.5B-Instruct and Qwen3-0.6B (plan.MODEL_TABLE), with random weights, built on the device
(no downloads; speed and memory do not depend on the weight values), with the family's chat template
and end token (tests/tiny_model.py ARCHITECTURES). The tokenizer is the embedded SmolLM2-135M's real
one (llama.cpp's converter knows its pre-tokenizer; a BPE trained here would be refused), its 49152
tokens padded with unreachable filler tokens to Qwen's 151936, so the embedding and the logits have
Qwen's size; the JSON records the vocabulary ("models"). The exports come from the Qwen3 run: a qwen2
folder's tokenizer loads as Qwen2Tokenizer, whose pre-tokenizer over SmolLM2's vocabulary llama.cpp's
converter does not recognise (a real Qwen2.5 tokenizer it does). A random model writes every completion to
the completion limit. Per item the JSON records peak torch memory (max_memory_allocated /
max_memory_reserved) against the plan of the run's own config.yaml (read from the model folder's
config.json, minus the CUDA context torch does not count), step time, the GRPOTrainer class that
trained (Unsloth's for the unsloth items), each export's verification (for GGUF, which runtime
checked it: llama.cpp's runtime is not on the device, so transformers' GGUF reader), pass/fail and
the tail of stderr on failure.

Wheels, converter and tokenizer. The device image has torch 2.11 (CUDA 13.0), transformers 5.17,
accelerate, safetensors, tokenizers, pyarrow, pandas, matplotlib, sentencepiece, protobuf, einops,
threadpoolctl, and no trl, datasets, bitsandbytes, unsloth, math-verify or gguf; nothing can be
downloaded there, and one call carries at most 64 MiB, work tree (~8 MiB) included. So, here, once:

    .venv/bin/python bench/gpu_plan_check.py --pack-wheels .gpu_wheels

downloads the pinned CPython 3.12 manylinux wheels of WHEELS (peft too, so its version is ours),
drops what a run never loads (bitsandbytes' builds for CUDA < 13, ROCm and XPU; Unsloth Studio's
web app; test suites), and packs them, llama.cpp's converter (`llamacpp.converter_dir()`, put there by
`make gguf`) and SmolLM2's tokenizer (`models.resolve("embedded")`) into one zip (.gpu_wheels is
git-ignored). Then one `run` call:

    run(carry=[".gpu_wheels/gpu-site-1.zip"], timeout_s=540,
        command="set -o pipefail; python3 bench/gpu_plan_check.py --install .gpu_wheels/gpu-site-1.zip
                 --site /tmp/site && PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
                 python3 bench/gpu_plan_check.py --site /tmp/site --out $OUT/gpu_plan_check.json
                 2>&1 | tee $OUT/gpu_plan_check.log")

(If the packing step ever needs a second zip, it says so: install each with --install, in the same
call when they fit 64 MiB together, else in a first call on the same warm machine.) The converter is
found at SITE/local-grpo-gpu-check/llama.cpp (passed to the items as $LOCAL_GRPO_LLAMA_CPP), the
tokenizer at SITE/local-grpo-gpu-check/smollm2-tokenizer (--tokenizer overrides; without either,
here, it is saved from the embedded model). The check first imports every module it needs in a fresh
process (recorded under "environment"), so a missing one shows in the JSON and the first log lines;
`--items a,b` reruns a subset. Copy $OUT/gpu_plan_check.json to bench/results/ and its table into
docs/performance.md.

Dry run (no GPU; plans every item, writes the data and the item configs, builds and runs nothing):
    .venv/bin/python bench/gpu_plan_check.py --dry-run --out /tmp/gpu_plan_check.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))  # tiny_model: the families' chat templates and end tokens

GIB = 1024**3
RECIPE = os.path.join(REPO, "configs", "gsm8k-8gb.yaml")
CHECK_DATA = {"num_train": 48, "num_heldout": 8}
CHECK_GRPO = {"max_steps": 2, "save_steps": 100, "p_ref_prompts": 2}  # p_ref: 2 prompts x 4 samples, one generate
MIRROR_GRPO = {"kl": "mirror", "beta": 0.04}
COMPLETION_TOKENS = 256  # --completion-tokens: a random model writes every completion to this length
VERIFY_PROMPTS = 1
GGUF_QUANT = "f16"
DEFAULT_BUDGET_S = 420  # items start only while this much time has not passed
ITEM_LIMIT_S = 200  # one item's own limit
MIN_START_S = 30  # no item starts with less of the budget left
ASSETS = "local-grpo-gpu-check"  # the zip's (and so the site's) folder of the converter and the tokenizer
CONVERTER_DIR = f"{ASSETS}/llama.cpp"
TOKENIZER_DIR = f"{ASSETS}/smollm2-tokenizer"


@dataclasses.dataclass(frozen=True)
class Family:
    """A model family of the check: its tests/tiny_model.py architecture and the published shape it copies."""

    architecture: str  # key of tiny_model.ARCHITECTURES: config class, chat template, end token
    shape_of: str  # key of plan.MODEL_TABLE
    max_position_embeddings: int  # as in the published config.json (rope_theta and the rest come with the architecture)


FAMILIES = {
    "qwen2.5": Family("qwen2", "Qwen/Qwen2.5-0.5B-Instruct", 32768),
    "qwen3": Family("qwen3", "Qwen/Qwen3-0.6B", 40960),
}
RMS_NORM_EPS = 1e-6  # both families' published value


@dataclasses.dataclass(frozen=True)
class Item:
    """One `local-grpo` command of the check."""

    name: str
    kind: str  # "train" or "export"
    cap_gb: int
    family: str | None = None  # train: a key of FAMILIES
    backend: str = "hf"
    grpo: tuple = ()  # extra grpo fields as (key, value) pairs
    four_bit: bool = True
    fmt: str | None = None  # export format
    quant: str | None = None  # export --quant
    source: str = "train-hf-qwen3-4bit"  # export: the train item whose run it exports


ITEMS = (
    Item("train-unsloth-qwen3-4bit", "train", 8, family="qwen3", backend="unsloth"),
    Item("train-hf-qwen2.5-4bit", "train", 8, family="qwen2.5"),
    Item("train-hf-qwen3-4bit", "train", 8, family="qwen3"),
    Item("export-lora", "export", 16, fmt="lora"),
    Item("export-merged16", "export", 16, fmt="merged16"),
    Item("export-gguf", "export", 16, fmt="gguf", quant=GGUF_QUANT),
    Item("export-merged16-unsloth-run", "export", 16, fmt="merged16", source="train-unsloth-qwen3-4bit"),
    Item("train-unsloth-qwen2.5-4bit", "train", 8, family="qwen2.5", backend="unsloth"),
    Item("train-hf-kl-mirror-qwen2.5-4bit", "train", 8, family="qwen2.5", grpo=tuple(MIRROR_GRPO.items())),
    Item("train-hf-qwen2.5-16bit", "train", 16, family="qwen2.5", four_bit=False),
)
ITEM_BY_NAME = {i.name: i for i in ITEMS}

# Modules the items import (checked first, so a missing wheel shows at once).
NEEDED_MODULES = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "pyarrow", "pandas",
                  "bitsandbytes", "math_verify", "gguf", "matplotlib", "yaml", "threadpoolctl", "sentencepiece")
# unsloth: the first item imports it and shows what fails


# --- the check's inputs: data, models, item configs ----------------------------------------------

def write_gsm8k_tiny(path: str, rows: int = 64, seed: int = 0) -> str:
    """A GSM8K-format jsonl (question, answer with '#### n') of simple word problems."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(rows):
            a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
            question = (f"A shop has {a} boxes with {c} pens each and sells {b} pens. "
                        f"How many pens are left?")
            answer = f"{a} * {c} = {a * c}. {a * c} - {b} = {a * c - b}.\n#### {a * c - b}"
            fh.write(json.dumps({"question": question, "answer": answer}) + "\n")
    return path


def model_dir(workdir: str, family: str) -> str:
    return os.path.join(workdir, "models", family)


def family_of(item: Item) -> str:
    """The model family an item trains, or (an export) that its source run trained."""
    return item.family or ITEM_BY_NAME[item.source].family


def item_config(item: Item, model_path: str, data_path: str, completion_tokens: int = COMPLETION_TOKENS) -> dict:
    """The recipe as a config dict, pointed at the check's model and data, with the check's step counts and
    completion length (the recipe's prompt budget kept: max_seq_length is that budget + the completion)."""
    from local_grpo.config import read_yaml
    from local_grpo.presets import apply_preset

    data = read_yaml(RECIPE)
    recipe = apply_preset(data["preset"], data) if data.get("preset") else data
    prompt_budget = recipe["model"]["max_seq_length"] - recipe["grpo"]["max_completion_length"]
    data["model"] = {**data.get("model", {}), "name": model_path, "max_seq_length": prompt_budget + completion_tokens}
    if not item.four_bit:
        data["model"]["load_in_4bit"] = False
    data["data"] = {**data.get("data", {}), **CHECK_DATA, "task_options": {"path": data_path}}
    data["grpo"] = {**data.get("grpo", {}), **CHECK_GRPO, "max_completion_length": completion_tokens, **dict(item.grpo)}
    return data


def pad_vocabulary(tokenizer_json: str, size: int) -> int:
    """Append unreachable filler tokens ("zq0", "zq1", ...: no merge makes them) to a BPE tokenizer.json's
    vocabulary until it has `size` ids; returns how many were added. Text tokenizes exactly as before."""
    with open(tokenizer_json, encoding="utf-8") as fh:
        state = json.load(fh)
    vocab = state["model"]["vocab"]
    taken = set(vocab.values()) | {t["id"] for t in state.get("added_tokens", [])}
    added, filler = 0, 0
    next_id = max(taken) + 1
    while next_id < size:
        token = f"zq{filler}"
        filler += 1
        if token not in vocab:
            vocab[token] = next_id
            next_id += 1
            added += 1
    with open(tokenizer_json, "w", encoding="utf-8") as fh:
        json.dump(state, fh, ensure_ascii=False)
    return added


def build_model_folder(out_dir: str, family: str, tokenizer_dir: str, shape=None) -> dict:
    """A random-weight model of `family` (true Qwen2 / Qwen3 architecture) at `shape` (default: the published
    shape, plan.MODEL_TABLE) with SmolLM2's tokenizer from `tokenizer_dir` padded to the shape's vocabulary,
    written to `out_dir` in bf16 (built on the GPU when there is one). Returns what was built."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from local_grpo import plan
    from tiny_model import ARCHITECTURES, trl_chat_template

    started = time.time()
    spec = FAMILIES[family]
    arch = ARCHITECTURES[spec.architecture]
    shape = shape or plan.MODEL_TABLE[spec.shape_of]
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    source_tokens = len(tokenizer)
    if shape.vocab_size < source_tokens:
        raise ValueError(f"{family}: vocabulary {shape.vocab_size} is smaller than the tokenizer's {source_tokens}")
    tokenizer.eos_token, tokenizer.pad_token = arch.eos, arch.pad
    tokenizer.chat_template = trl_chat_template(arch.template)
    ids = tokenizer.convert_tokens_to_ids
    token_ids = {"bos_token_id": ids(tokenizer.bos_token) if tokenizer.bos_token else None,
                 "eos_token_id": ids(arch.eos), "pad_token_id": ids(arch.pad)}
    tokenizer.save_pretrained(out_dir)
    fillers = pad_vocabulary(os.path.join(out_dir, "tokenizer.json"), shape.vocab_size)
    sizes = dict(hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                 num_hidden_layers=shape.num_layers, num_attention_heads=shape.num_heads,
                 num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim, vocab_size=shape.vocab_size,
                 tie_word_embeddings=shape.tie_embeddings)
    config = getattr(transformers, arch.config_class)(
        **{**arch.config, **sizes, "max_position_embeddings": spec.max_position_embeddings,
           "rms_norm_eps": RMS_NORM_EPS, **token_ids})
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(**token_ids)
    model.save_pretrained(out_dir)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    # Saved again as AutoTokenizer reads it back beside this config (a qwen2 folder loads as Qwen2Tokenizer),
    # so the files hold the tokenizer every loader sees.
    reloaded = AutoTokenizer.from_pretrained(out_dir)
    reloaded.save_pretrained(out_dir)
    if len(reloaded) != shape.vocab_size:
        raise ValueError(f"{family}: the saved tokenizer has {len(reloaded)} tokens, the model {shape.vocab_size}")
    return {"path": out_dir, "architecture": arch.config_class, "shape_of": spec.shape_of,
            "shape": plan.model_shape(out_dir).as_dict(),
            "vocabulary": {"size": shape.vocab_size, "tokenizer": "SmolLM2-135M-Instruct (embedded)",
                           "tokenizer_tokens": source_tokens, "unreachable_fillers": fillers},
            "device": device, "build_seconds": round(time.time() - started, 1)}


def planned_model(family: str, model_path: str) -> dict:
    """What a dry run records of a family's model: the published shape it would be built at."""
    from local_grpo import plan
    from tiny_model import ARCHITECTURES

    spec = FAMILIES[family]
    shape = plan.MODEL_TABLE[spec.shape_of]
    return {"path": model_path, "architecture": ARCHITECTURES[spec.architecture].config_class,
            "shape_of": spec.shape_of, "shape": shape.as_dict(),
            "vocabulary": {"size": shape.vocab_size, "tokenizer": "SmolLM2-135M-Instruct (embedded)",
                           "padded_with": "unreachable fillers"}}


def command(item: Item, workdir: str) -> list[str]:
    """The `local-grpo` arguments of an item (all with --json)."""
    if item.kind == "train":
        return ["train", "--config", os.path.join(workdir, "configs", f"{item.name}.yaml"), "--backend", item.backend,
                "--output", run_dir(item.name, workdir), "--overwrite", "--json"]
    quant = ["--quant", item.quant] if item.quant else []
    return ["export", run_dir(item.source, workdir), "--format", item.fmt, *quant, "--out",
            os.path.join(workdir, "exports", item.name), "--verify-prompts", str(VERIFY_PROMPTS), "--overwrite", "--json"]


def run_dir(name: str, workdir: str) -> str:
    return os.path.join(workdir, "runs", name)


def prepare(workdir: str, items: list[Item], build_model: bool, tokenizer_dir: str | None = None,
            completion_tokens: int = COMPLETION_TOKENS, shapes: dict | None = None) -> dict:
    """Write the data and each train item's config, and build each family's model (unless a dry run).

    `shapes`: {family: plan.Shape} to build at instead of the published shape (the CPU tests' tiny ones)."""
    import yaml

    for sub in ("configs", "runs", "exports", "measure", "models"):
        os.makedirs(os.path.join(workdir, sub), exist_ok=True)
    data_path = write_gsm8k_tiny(os.path.join(workdir, "gsm8k-tiny.jsonl"))
    models: dict = {}
    for family in sorted({i.family for i in items if i.kind == "train"}):
        path = model_dir(workdir, family)
        models[family] = (build_model_folder(path, family, tokenizer_dir, (shapes or {}).get(family)) if build_model
                          else planned_model(family, path))
    for item in items:
        if item.kind == "train":
            with open(os.path.join(workdir, "configs", f"{item.name}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(item_config(item, model_dir(workdir, item.family), data_path, completion_tokens), fh,
                               sort_keys=False)
    return {"data": data_path, "completion_tokens": completion_tokens, "models": models}


def plan_summary(estimate: dict) -> dict:
    return {"total_gb": estimate["total_gb"], "fits": estimate["fits"], "peak_phase": estimate["breakdown"]["peak_phase"],
            "breakdown": {k: v for k, v in estimate["breakdown"].items() if k.endswith("_gb")}}


def planned(item: Item, workdir: str, completion_tokens: int = COMPLETION_TOKENS) -> dict | None:
    """The memory plan of a train item at its cap (the shape from its built folder, else the published one)."""
    from local_grpo import plan
    from local_grpo.config import from_dict
    from local_grpo.presets import apply_preset

    if item.kind != "train":
        return None
    path = model_dir(workdir, item.family)
    data = item_config(item, path, os.path.join(workdir, "gsm8k-tiny.jsonl"), completion_tokens)
    config = from_dict(apply_preset(data["preset"], data) if data.get("preset") else data)  # as `train --config` does
    config.backend = item.backend
    built = os.path.isfile(os.path.join(path, "config.json"))
    shape = None if built else plan.MODEL_TABLE[FAMILIES[item.family].shape_of]
    return plan_summary(plan.estimate(config, vram_gb=item.cap_gb, suggest_settings=False, shape=shape))


def plan_of_run(path: str, item: Item) -> dict:
    """The memory plan of the config a run saved (what it trained; the shape from its model folder's
    config.json), at the item's cap."""
    from local_grpo import plan
    from local_grpo.config import load

    config = load(os.path.join(path, "config.yaml"))
    config.backend = item.backend
    return plan_summary(plan.estimate(config, vram_gb=item.cap_gb, suggest_settings=False))


# --- one item in its own process ------------------------------------------------------------------

def child(cap_gb: float, measure_path: str, cli_args: list[str]) -> int:
    """Cap this process's GPU memory, run one `local-grpo` command in-process, write its measurements."""
    import torch

    started = time.time()
    info: dict = {"cap_gb": cap_gb}
    on_cuda = torch.cuda.is_available()
    if on_cuda:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap_gb * GIB / total), 0)
        torch.cuda.reset_peak_memory_stats()
        info["device"] = torch.cuda.get_device_name(0)
    rc = 1
    try:
        from local_grpo.cli import main

        rc = main(cli_args)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # an OOM under the cap is a result: record it
        traceback.print_exc()
        info["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
    finally:
        if on_cuda:
            info["peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
            info["peak_reserved_gb"] = round(torch.cuda.max_memory_reserved() / GIB, 3)
        trl = sys.modules.get("trl")
        if trl is not None:  # the class train built its trainer on (Unsloth swaps its own in at import)
            trainer = getattr(trl, "GRPOTrainer", None)
            info["trl_grpo_trainer"] = f"{trainer.__module__}.{trainer.__qualname__}" if trainer else None
        info["rc"], info["seconds"] = rc, round(time.time() - started, 1)
        with open(measure_path, "w", encoding="utf-8") as fh:
            json.dump(info, fh)
    return rc


def child_env(converter: str | None) -> dict:
    """The items' environment: the repo importable, and llama.cpp's converter where the site has one."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), REPO]))}
    if converter:
        from local_grpo import llamacpp

        env.setdefault(llamacpp.ENV_VAR, converter)
    return env


def run_item(item: Item, workdir: str, timeout_s: float, converter: str | None = None) -> dict:
    """Run an item's command in a child process; parse its stdout as one JSON object."""
    measure = os.path.join(workdir, "measure", f"{item.name}.json")
    if os.path.exists(measure):
        os.remove(measure)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(item.cap_gb), measure, "--", *command(item, workdir)]
    started = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, env=child_env(converter),
                              timeout=timeout_s)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, rc = _text(exc.stdout), _text(exc.stderr) + f"\n[killed after {timeout_s:.0f} s]", "timeout"
    row = {**item_row(item, workdir), "rc": rc, "wall_seconds": round(time.time() - started, 1)}
    try:
        row["stdout_json"], row["stdout_is_one_json_object"] = json.loads(stdout), True
    except ValueError:
        row["stdout_is_one_json_object"] = False
        row["stdout_head"] = stdout[:1500]
    if os.path.isfile(measure):
        with open(measure, encoding="utf-8") as fh:
            row["measured"] = json.load(fh)
    if rc != 0 or not row["stdout_is_one_json_object"]:
        row["stderr_tail"] = stderr[-4000:]
    return row


def item_row(item: Item, workdir: str) -> dict:
    """What every row of the report says about its item."""
    row = {"item": item.name, "kind": item.kind, "cap_gb": item.cap_gb, "family": family_of(item),
           "backend": item.backend, "four_bit": item.four_bit, "command": "local-grpo " + " ".join(command(item, workdir))}
    if item.kind == "export":
        row = {**row, "format": item.fmt, "quant": item.quant, "source": item.source}
        del row["backend"], row["four_bit"]  # the source run's
    return row


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def judge(item: Item, row: dict, workdir: str) -> dict:
    """Pass/fail of an item; for training runs step time, the trainer class and measured peak vs the plan;
    for exports the verification (and for GGUF the runtime that checked it)."""
    ok = row["rc"] == 0 and row["stdout_is_one_json_object"]
    out = row.get("stdout_json") or {}
    if item.kind == "train" and ok:
        from local_grpo import rundir

        metrics = [m for m in rundir.RunDir(run_dir(item.name, workdir)).metrics() if "reward" in m]
        times = [m["time"] for m in metrics if "time" in m]
        row["steps"] = out.get("steps")
        row["trained_backend"] = out.get("backend")
        row["trainer"] = (row.get("measured") or {}).get("trl_grpo_trainer")
        row["step_seconds"] = round(times[-1] - times[-2], 2) if len(times) >= 2 else None
        row["plan"] = plan_of_run(run_dir(item.name, workdir), item)
        peak = (row.get("measured") or {}).get("peak_reserved_gb")
        if peak and row["plan"]:
            from local_grpo.plan.memory import CUDA_CONTEXT_GB

            plan_torch = row["plan"]["total_gb"] - CUDA_CONTEXT_GB  # torch's counters exclude the context
            row["plan_over_measured"] = round(plan_torch / peak, 3)
            row["plan_within_15pct"] = abs(plan_torch / peak - 1) <= 0.15
        ok = ok and out.get("steps") == 2 and len(metrics) == 2 and out.get("backend") == item.backend
        if item.backend == "unsloth":  # Unsloth's own GRPOTrainer, not TRL's left in place
            ok = ok and "unsloth" in str(row["trainer"]).lower()
    if item.kind == "export" and row["stdout_is_one_json_object"]:
        check = out.get("verification") or {}
        row["verification"] = check
        row["reference"] = out.get("reference")
        if item.fmt == "gguf":
            row["gguf_runtime"] = check.get("runtime")
        ok = ok and check.get("failed") == []
    if not ok and "export verification failed" in row.get("stderr_tail", ""):
        row["failure"] = "verification"  # it ran end to end; the reloaded export's tokens differ
    row["passed"] = bool(ok)
    return row


# --- the whole check ------------------------------------------------------------------------------

def environment() -> dict:
    """Versions, the GPU, and which needed modules do not import (each tried in a fresh process)."""
    import importlib.metadata

    env: dict = {"python": sys.version.split()[0], "versions": {}, "import_errors": {}}
    for module in NEEDED_MODULES + ("unsloth", "unsloth_zoo", "llama_cpp"):
        name = {"yaml": "pyyaml", "math_verify": "math-verify", "llama_cpp": "llama-cpp-python"}.get(module, module)
        try:
            env["versions"][module] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            env["versions"][module] = None
    probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    try: importlib.import_module(m)\n" \
            "    except Exception as e: print(m + ': ' + type(e).__name__ + ': ' + str(e)[:300])"
    proc = subprocess.run([sys.executable, "-c", probe, *NEEDED_MODULES], capture_output=True, text=True, timeout=300)
    for line in proc.stdout.splitlines():
        module, _, error = line.partition(": ")
        env["import_errors"][module] = error
    try:
        import torch

        env["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        env["torch_cuda"] = torch.version.cuda
    except ImportError:
        env["cuda"] = None
    return env


def site_converter(site: str) -> str | None:
    """llama.cpp's converter as packed into the site, or None when the site has none."""
    folder = os.path.join(site, CONVERTER_DIR)
    return folder if os.path.isfile(os.path.join(folder, "convert_hf_to_gguf.py")) else None


def tokenizer_source(args) -> str:
    """SmolLM2's tokenizer folder: --tokenizer, the packed one in the site, else saved from the embedded model."""
    if args.tokenizer:
        return args.tokenizer
    packed = os.path.join(args.site, TOKENIZER_DIR)
    if os.path.isfile(os.path.join(packed, "tokenizer.json")):
        return packed
    from tiny_model import save_smollm2_tokenizer

    return save_smollm2_tokenizer(os.path.join(args.workdir, "smollm2-tokenizer"))


def selected(args) -> list[Item]:
    return [i for i in ITEMS if not args.items or i.name in args.items.split(",")]


def run_check(args, save=None) -> dict:
    """Prepare, then run the items in order while the budget lasts; `save(report)` after each. Returns the report."""
    items = selected(args)
    started = time.time()
    converter = site_converter(args.site)
    report: dict = {"dry_run": args.dry_run, "budget_s": args.budget_s, "environment": environment(),
                    "llama_cpp_converter": converter or os.environ.get("LOCAL_GRPO_LLAMA_CPP") or "the venv's (make gguf)"}
    report["prepared"] = prepare(args.workdir, items, build_model=not args.dry_run,
                                 tokenizer_dir=None if args.dry_run else tokenizer_source(args),
                                 completion_tokens=args.completion_tokens)
    report["items"] = rows = []
    passed: set[str] = set()
    for item in items:
        base = item_row(item, args.workdir)
        remaining = args.budget_s - (time.time() - started)
        if args.dry_run:
            rows.append({**base, "plan": planned(item, args.workdir, args.completion_tokens), "status": "planned"})
            continue
        if item.kind == "export" and item.source not in passed and (
                item.source in {i.name for i in items}
                or not os.path.isfile(os.path.join(run_dir(item.source, args.workdir), "adapter", "adapter_config.json"))):
            rows.append({**base, "status": f"skipped (its source run {item.source} did not pass)", "passed": None})
            continue
        if remaining <= MIN_START_S:
            rows.append({**base, "status": "skipped (time budget)", "passed": None})
            continue
        print(f"[{time.time() - started:5.0f} s] {item.name} ...", file=sys.stderr, flush=True)
        limit = min(ITEM_LIMIT_S, remaining)
        row = judge(item, run_item(item, args.workdir, limit, converter), args.workdir)
        if row["passed"]:
            passed.add(item.name)
        cut_by_budget = row["rc"] == "timeout" and limit < ITEM_LIMIT_S
        row["status"] = "passed" if row["passed"] else "stopped (time budget)" if cut_by_budget else "FAILED"
        print(f"[{time.time() - started:5.0f} s] {item.name}: {row['status']}", file=sys.stderr, flush=True)
        rows.append(row)
        if save:
            save(summarize(report, started))
    return summarize(report, started)


def summarize(report: dict, started: float) -> dict:
    rows = report["items"]
    report["summary"] = {s: sum(r.get("status") == s for r in rows) for s in ("passed", "FAILED", "planned")}
    report["summary"]["skipped"] = sum(str(r.get("status", "")).startswith(("skipped", "stopped")) for r in rows)
    report["seconds"] = round(time.time() - started, 1)
    return report


# --- wheels, converter and tokenizer for the device: download, trim, pack; install there ----------

# Pinned as in this project's environment; CPython 3.12 manylinux builds are fetched for the device. Only
# what its image lacks (see the module docstring), and peft, whose version there is not known.
WHEELS = (
    "trl==1.15.0", "datasets==4.8.5", "dill==0.4.1", "multiprocess==0.70.19", "peft==0.21.2",
    "bitsandbytes==0.50.2", "unsloth==2026.10.9", "unsloth-zoo==2026.10.9", "tyro==1.0.17",
    "docstring-parser==0.18.0", "typeguard==4.6.1", "msgspec==0.23.0", "cut-cross-entropy==25.1.1",
    "math-verify==0.9.0", "latex2sympy2-extended==1.11.0", "antlr4-python3-runtime==4.13.2", "gguf==0.19.0",
)
PLATFORM_FLAGS = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                  "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64",
                  "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
# Wheel members a training run never loads: Unsloth Studio's web app, bitsandbytes' builds for CUDA
# 11.x-12.x, ROCm and XPU (the device's torch 2.11 is built for CUDA 13.0; bitsandbytes loads the build
# of torch.version.cuda), test suites.
DROP_PREFIXES = ("studio/",)
DROP_NAMES = ("libbitsandbytes_cuda11", "libbitsandbytes_cuda12", "libbitsandbytes_rocm", "libbitsandbytes_xpu")
DROP_PARTS = ("/tests/", "/__pycache__/")
CALL_LIMIT = 64 * 1024**2  # a call carries this much in all, the work tree included
ZIP_LIMIT = 54 * 1024**2  # per carried zip, leaving room for the work tree (~8 MiB)


def kept(member: str) -> bool:
    name = member.rsplit("/", 1)[-1]
    return (not member.startswith(DROP_PREFIXES) and not name.startswith(DROP_NAMES)
            and not any(part in "/" + member for part in DROP_PARTS))


def asset_files(tokenizer_dir: str, converter_dir: str) -> dict[str, str]:
    """{member name in the zip: file here} for llama.cpp's converter tree and SmolLM2's tokenizer folder."""
    files = {}
    for prefix, root in ((CONVERTER_DIR, converter_dir), (TOKENIZER_DIR, tokenizer_dir)):
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(names):
                path = os.path.join(folder, name)
                member = f"{prefix}/{os.path.relpath(path, root)}".replace(os.sep, "/")
                if kept(member):
                    files[member] = path
    return files


def work_tree_bytes() -> int:
    """What a call sends besides the carried zips: tracked and untracked-not-ignored files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sum(os.path.getsize(os.path.join(REPO, p)) for p in listed if p and os.path.isfile(os.path.join(REPO, p)))


def pack_wheels(out_dir: str) -> list[str]:
    """Download WHEELS for the device and pack their kept members, llama.cpp's converter and SmolLM2's tokenizer
    into as few <= ZIP_LIMIT zip files as fit."""
    from local_grpo import llamacpp
    from tiny_model import save_smollm2_tokenizer

    download = os.path.join(out_dir, "download")
    os.makedirs(download, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM_FLAGS, "-d", download, *WHEELS],
                   check=True)
    tokenizer_dir = save_smollm2_tokenizer(os.path.join(out_dir, "smollm2-tokenizer"))
    assets = asset_files(tokenizer_dir, llamacpp.converter_dir())
    sizes = {ASSETS: sum(os.path.getsize(p) for p in assets.values()) // 3}  # text: ~3x smaller deflated
    for wheel in sorted(os.listdir(download)):
        with zipfile.ZipFile(os.path.join(download, wheel)) as z:
            sizes[wheel] = sum(i.compress_size for i in z.infolist() if kept(i.filename))
    bins: list[list[str]] = []
    for part in sorted(sizes, key=sizes.get, reverse=True):  # first fit, largest first
        target = next((b for b in bins if sum(sizes[w] for w in b) + sizes[part] <= ZIP_LIMIT * 0.97), None)
        if target is None:
            bins.append(target := [])
        target.append(part)
    paths = []
    for n, parts in enumerate(bins, 1):
        path = os.path.join(out_dir, f"gpu-site-{n}.zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as out:
            for part in parts:
                if part == ASSETS:
                    for member, file in assets.items():
                        out.write(file, member)
                    continue
                with zipfile.ZipFile(os.path.join(download, part)) as z:
                    for info in z.infolist():
                        if kept(info.filename) and not info.is_dir():
                            out.writestr(info.filename, z.read(info))
        print(f"{path}: {os.path.getsize(path) / 2**20:.1f} MiB: {', '.join(parts)}")
        paths.append(path)
    tree = work_tree_bytes()
    total = tree + sum(os.path.getsize(p) for p in paths)
    print(f"work tree {tree / 2**20:.1f} MiB + zips = {total / 2**20:.1f} MiB "
          f"({'one call carries them all' if total <= CALL_LIMIT else 'more than one call carries: install in turn'})")
    return paths


def install(zip_path: str, site: str) -> int:
    """Unpack a packed site zip into `site` (wheels are plain zips; nothing to build)."""
    os.makedirs(site, exist_ok=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(site)
        count = len(z.infolist())
    print(f"installed {count} files from {zip_path} into {site}")
    return 0


# --- entry point -----------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_plan_check.json"))
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "gpu_plan_check"))
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="start no item after this many seconds")
    parser.add_argument("--items", help=f"comma-separated subset of: {', '.join(i.name for i in ITEMS)}")
    parser.add_argument("--completion-tokens", type=int, default=COMPLETION_TOKENS,
                        help="grpo.max_completion_length of the train items (the recipe's is 1024)")
    parser.add_argument("--tokenizer", help="SmolLM2's tokenizer folder (default: the site's packed one)")
    parser.add_argument("--dry-run", action="store_true", help="plan every item and write its inputs; run nothing")
    parser.add_argument("--pack-wheels", metavar="DIR", help="download and pack the device's wheels into DIR")
    parser.add_argument("--install", metavar="ZIP", help="unpack a packed zip into --site")
    parser.add_argument("--site", default="/tmp/site", help="where --install unpacks (and the check finds its assets)")
    parser.add_argument("--child", nargs=2, metavar=("CAP_GB", "MEASURE"), help=argparse.SUPPRESS)
    parser.add_argument("cli", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.items:
        unknown = set(args.items.split(",")) - set(ITEM_BY_NAME)
        if unknown:
            parser.error(f"--items: unknown {', '.join(sorted(unknown))}")
    return args


def write_report(report: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(float(args.child[0]), args.child[1], args.cli)
    if args.pack_wheels:
        pack_wheels(args.pack_wheels)
        return 0
    if args.install:
        return install(args.install, args.site)
    report = run_check(args, save=lambda partial: write_report(partial, args.out))
    write_report(report, args.out)
    for row in report["items"]:
        measured = row.get("measured") or {}
        plan_total = (row.get("plan") or {}).get("total_gb")
        print(f"{row['item']:32s} {row.get('status', ''):22s} peak reserved {measured.get('peak_reserved_gb', '-')!s:>6} GB"
              f"  plan {plan_total if plan_total is not None else '-'!s:>6} GB  step {row.get('step_seconds', '-')!s:>6} s")
    print(f"wrote {args.out}")
    return 0 if report["summary"]["FAILED"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
