"""GPU check of the GPU path: `local-grpo train` and `export` exactly as users run them, on consumer memory budgets.

One script, ~7 minutes on an H200. Every item is one `local-grpo ... --json` command in its own process
(Unsloth patches transformers/trl at import; each item needs a clean CUDA peak counter), capped with
`torch.cuda.set_per_process_memory_fraction` to a consumer card's memory. Its stdout must parse as
exactly one JSON object. Items, in order (later ones are skipped when --budget-s runs out):

    train-hf-8gb             configs/gsm8k-8gb.yaml, 2 steps, --backend hf, 8 GB cap
    train-unsloth-8gb        the same, --backend unsloth
    train-hf-kl-mirror-8gb   the same with grpo.kl mirror (beta 0.04) on hf
    export-merged16          the hf run exported (--verify-prompts 1), 16 GB cap
    export-gguf              the same as GGUF f16
    export-lora              the same as a LoRA adapter
    train-hf-16bit-16gb      the 8gb recipe without 4-bit on hf (the model placed on the GPU at load), 16 GB cap

The model is Qwen2.5-0.5B-shaped (hidden 896, 24 layers, 14/2 heads, vocab 151936, tied) with random
weights, built on the device from a config (no downloads; speed and memory do not depend on the
weight values), as a Llama-architecture model so that GGUF export applies; its byte-level BPE
tokenizer is trained on the generated data and padded to the vocabulary. The data is a small
generated GSM8K-format file (question, answer "... #### n") that the recipe's data.task_options.path
points at; num_train 48, num_heldout 8, p_ref_prompts 2 keep the run short without changing what one
step holds (a random model writes every completion to max_completion_length, 1024). Per item it
records peak torch memory (max_memory_allocated / max_memory_reserved) against the plan
(`local_grpo.plan.estimate` of the run's own config.yaml, minus the CUDA context torch does not
count), step time (metrics.jsonl), pass/fail, and the tail of stderr on failure.

Wheels. The device has torch 2.11, transformers 5.17, peft, accelerate, safetensors and tokenizers,
and no trl, datasets, bitsandbytes or unsloth; nothing can be downloaded there, and one call carries
at most 64 MiB. So, here, once (downloads the pinned wheels of WHEELS for CPython 3.12 manylinux,
drops what a training run never loads: bitsandbytes' builds for CUDA < 12.6, Unsloth Studio's web
app, pyarrow's Flight/S3 libraries, test suites; packs the rest into two zip files of at most 58 MiB,
so that each call, work tree included, stays under 64 MiB):

    python bench/gpu_plan_check.py --pack-wheels .gpu_wheels

Then two `run` calls on the same warm machine (/tmp/site, outside the repo, survives between them):

    run(carry=[".gpu_wheels/gpu-site-1.zip"], timeout_s=120,
        command="python3 bench/gpu_plan_check.py --install .gpu_wheels/gpu-site-1.zip --site /tmp/site")
    run(carry=[".gpu_wheels/gpu-site-2.zip"], timeout_s=560,
        command="python3 bench/gpu_plan_check.py --install .gpu_wheels/gpu-site-2.zip --site /tmp/site &&
                 PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1 PYTHONUNBUFFERED=1
                 python3 bench/gpu_plan_check.py --out $OUT/gpu_plan_check.json 2>&1 | tail -c 20000")

The check starts by importing every module it needs (recorded under "environment"), so a missing
dependency shows in the JSON and in the first lines of the log; `--items a,b` reruns a subset. Copy
$OUT/gpu_plan_check.json to bench/results/ and its table into docs/performance.md.

Dry run (no GPU; plans every item, writes the data and the item configs, runs nothing):
    python bench/gpu_plan_check.py --dry-run --out /tmp/gpu_plan_check.json
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

GIB = 1024**3
RECIPE = os.path.join(REPO, "configs", "gsm8k-8gb.yaml")
SHAPE_OF = "Qwen/Qwen2.5-0.5B-Instruct"  # the shape the random check model copies (plan.MODEL_TABLE)
CHECK_DATA = {"num_train": 48, "num_heldout": 8}
CHECK_GRPO = {"max_steps": 2, "save_steps": 100, "p_ref_prompts": 2}  # p_ref: 2 prompts x 4 samples, one generate
MIRROR_GRPO = {"kl": "mirror", "beta": 0.04}
VERIFY_PROMPTS = 1
DEFAULT_BUDGET_S = 420  # items start only while this much time has not passed
ITEM_LIMIT_S = 200  # one item's own limit


@dataclasses.dataclass(frozen=True)
class Item:
    """One `local-grpo` command of the check."""

    name: str
    kind: str  # "train" or "export"
    cap_gb: int
    backend: str = "hf"
    grpo: tuple = ()  # extra grpo fields as (key, value) pairs
    four_bit: bool = True
    fmt: str | None = None  # export format
    source: str = "train-hf-8gb"  # export: the run it exports


ITEMS = (
    Item("train-hf-8gb", "train", 8),
    Item("train-unsloth-8gb", "train", 8, backend="unsloth"),
    Item("train-hf-kl-mirror-8gb", "train", 8, grpo=tuple(MIRROR_GRPO.items())),
    Item("export-merged16", "export", 16, fmt="merged16"),
    Item("export-gguf", "export", 16, fmt="gguf"),
    Item("export-lora", "export", 16, fmt="lora"),
    Item("train-hf-16bit-16gb", "train", 16, four_bit=False),
)

# Modules the items import (checked first, so a missing wheel shows at once).
NEEDED_MODULES = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "pyarrow", "pandas",
                  "bitsandbytes", "math_verify", "gguf", "matplotlib", "yaml", "threadpoolctl")  # unsloth: its own item shows it


# --- the check's inputs: data, model, item configs -----------------------------------------------

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


def item_config(item: Item, model_dir: str, data_path: str) -> dict:
    """The recipe as a config dict, pointed at the check's model and data, with the check's step counts."""
    from local_grpo.config import read_yaml

    data = read_yaml(RECIPE)
    data["model"] = {**data.get("model", {}), "name": model_dir}
    if not item.four_bit:
        data["model"]["load_in_4bit"] = False
    data["data"] = {**data.get("data", {}), **CHECK_DATA, "task_options": {"path": data_path}}
    data["grpo"] = {**data.get("grpo", {}), **CHECK_GRPO, **dict(item.grpo)}
    return data


def build_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE trained on `texts`, padded with unreachable filler tokens to `vocab_size` ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=1000, special_tokens=special,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(bpe.to_str())
    vocab = spec["model"]["vocab"]
    filler = 0
    while len(vocab) < vocab_size:
        if f"zq{filler}" not in vocab:
            vocab[f"zq{filler}"] = len(vocab)
        filler += 1
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", bos_token="<|im_start|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


def build_model_folder(out_dir: str, data_path: str) -> str:
    """The random-weight, Qwen2.5-0.5B-shaped Llama checkpoint + tokenizer (built on the GPU when there is one)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from local_grpo import plan

    if os.path.isfile(os.path.join(out_dir, "config.json")):
        return out_dir
    s = plan.MODEL_TABLE[SHAPE_OF]
    texts = [json.loads(line)["question"] for line in open(data_path, encoding="utf-8")]
    tokenizer = build_tokenizer(texts * 4, s.vocab_size)
    config = LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                         num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                         num_key_value_heads=s.num_kv_heads, head_dim=s.head_dim, tie_word_embeddings=s.tie_embeddings,
                         max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out_dir


def command(item: Item, workdir: str) -> list[str]:
    """The `local-grpo` arguments of an item (all with --json)."""
    if item.kind == "train":
        return ["train", "--config", os.path.join(workdir, "configs", f"{item.name}.yaml"), "--backend", item.backend,
                "--output", run_dir(item.name, workdir), "--overwrite", "--json"]
    return ["export", run_dir(item.source, workdir), "--format", item.fmt, "--out",
            os.path.join(workdir, "exports", item.name), "--verify-prompts", str(VERIFY_PROMPTS), "--overwrite", "--json"]


def run_dir(name: str, workdir: str) -> str:
    return os.path.join(workdir, "runs", name)


def prepare(workdir: str, items: list[Item], build_model: bool) -> dict:
    """Write the data and each train item's config (and build the model unless a dry run)."""
    import yaml

    for sub in ("configs", "runs", "exports", "measure"):
        os.makedirs(os.path.join(workdir, sub), exist_ok=True)
    data_path = write_gsm8k_tiny(os.path.join(workdir, "gsm8k-tiny.jsonl"))
    model_dir = os.path.join(workdir, "model")
    started = time.time()
    if build_model:
        build_model_folder(model_dir, data_path)
    for item in items:
        if item.kind == "train":
            with open(os.path.join(workdir, "configs", f"{item.name}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(item_config(item, model_dir, data_path), fh, sort_keys=False)
    return {"model_dir": model_dir, "data": data_path, "build_seconds": round(time.time() - started, 1)}


def planned(item: Item, workdir: str, model_dir: str) -> dict | None:
    """The memory plan of a train item at its cap (the shape from the built folder, else from the table)."""
    from local_grpo import plan
    from local_grpo.config import from_dict
    from local_grpo.presets import apply_preset

    if item.kind != "train":
        return None
    data = item_config(item, model_dir, os.path.join(workdir, "gsm8k-tiny.jsonl"))
    config = from_dict(apply_preset(data["preset"], data) if data.get("preset") else data)  # as `train --config` does
    config.backend = item.backend
    shape = None if os.path.isfile(os.path.join(model_dir, "config.json")) else plan.MODEL_TABLE[SHAPE_OF]
    estimate = plan.estimate(config, vram_gb=item.cap_gb, suggest_settings=False, shape=shape)
    return {"total_gb": estimate["total_gb"], "fits": estimate["fits"], "peak_phase": estimate["breakdown"]["peak_phase"],
            "breakdown": {k: v for k, v in estimate["breakdown"].items() if k.endswith("_gb")}}


def plan_of_run(path: str, item: Item) -> dict:
    """The memory plan of the config a run saved (what it trained), at the item's cap."""
    from local_grpo import plan
    from local_grpo.config import load

    config = load(os.path.join(path, "config.yaml"))
    config.backend = item.backend
    estimate = plan.estimate(config, vram_gb=item.cap_gb, suggest_settings=False)
    return {"total_gb": estimate["total_gb"], "fits": estimate["fits"], "peak_phase": estimate["breakdown"]["peak_phase"],
            "breakdown": {k: v for k, v in estimate["breakdown"].items() if k.endswith("_gb")}}


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
        info["rc"], info["seconds"] = rc, round(time.time() - started, 1)
        with open(measure_path, "w", encoding="utf-8") as fh:
            json.dump(info, fh)
    return rc


def run_item(item: Item, workdir: str, timeout_s: float) -> dict:
    """Run an item's command in a child process; parse its stdout as one JSON object."""
    measure = os.path.join(workdir, "measure", f"{item.name}.json")
    if os.path.exists(measure):
        os.remove(measure)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(item.cap_gb), measure, "--", *command(item, workdir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), REPO]))}
    started = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, env=env, timeout=timeout_s)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, rc = _text(exc.stdout), _text(exc.stderr) + f"\n[killed after {timeout_s:.0f} s]", "timeout"
    row = {"item": item.name, "kind": item.kind, "cap_gb": item.cap_gb, "backend": item.backend,
           "command": "local-grpo " + " ".join(command(item, workdir)), "rc": rc,
           "wall_seconds": round(time.time() - started, 1)}
    try:
        row["stdout_json"], row["stdout_is_one_json_object"] = json.loads(stdout), True
    except ValueError:
        row["stdout_is_one_json_object"] = False
        row["stdout_head"] = stdout[:1500]
    if os.path.isfile(measure):
        row["measured"] = json.load(open(measure, encoding="utf-8"))
    if rc != 0 or not row["stdout_is_one_json_object"]:
        row["stderr_tail"] = stderr[-4000:]
    return row


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def judge(item: Item, row: dict, workdir: str) -> dict:
    """Pass/fail of an item, and for training runs step time and measured peak vs the plan."""
    ok = row["rc"] == 0 and row["stdout_is_one_json_object"]
    out = row.get("stdout_json") or {}
    if item.kind == "train" and ok:
        metrics = [json.loads(line) for line in open(os.path.join(run_dir(item.name, workdir), "metrics.jsonl"))]
        times = [m["time"] for m in metrics if "time" in m]
        row["steps"] = out.get("steps")
        row["step_seconds"] = round(times[-1] - times[-2], 2) if len(times) >= 2 else None
        row["plan"] = plan_of_run(run_dir(item.name, workdir), item)
        peak = (row.get("measured") or {}).get("peak_reserved_gb")
        if peak and row["plan"]:
            from local_grpo.plan.memory import CUDA_CONTEXT_GB

            plan_torch = row["plan"]["total_gb"] - CUDA_CONTEXT_GB  # torch's counters exclude the context
            row["plan_over_measured"] = round(plan_torch / peak, 3)
            row["plan_within_15pct"] = abs(plan_torch / peak - 1) <= 0.15
        ok = ok and out.get("steps") == 2 and len(metrics) == 2
    if item.kind == "export" and ok:
        check = out.get("verification") or {}
        row["verification"] = check
        ok = check.get("failed") == []
    row["passed"] = bool(ok)
    return row


# --- the whole check ------------------------------------------------------------------------------

def environment() -> dict:
    """Versions, the GPU, and which needed modules do not import (each tried in a fresh process)."""
    import importlib.metadata

    env: dict = {"python": sys.version.split()[0], "versions": {}, "import_errors": {}}
    for module in NEEDED_MODULES + ("unsloth", "unsloth_zoo"):
        name = {"yaml": "pyyaml", "math_verify": "math-verify"}.get(module, module)
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


def run_check(args) -> dict:
    """Prepare, then run the items in order while the budget lasts; returns the report."""
    items = [i for i in ITEMS if not args.items or i.name in args.items.split(",")]
    started = time.time()
    report: dict = {"dry_run": args.dry_run, "budget_s": args.budget_s, "environment": environment()}
    report["prepared"] = prepare(args.workdir, items, build_model=not args.dry_run)
    rows = []
    for item in items:
        base = {"item": item.name, "kind": item.kind, "cap_gb": item.cap_gb, "backend": item.backend,
                "command": "local-grpo " + " ".join(command(item, args.workdir))}
        remaining = args.budget_s - (time.time() - started)
        if args.dry_run:
            rows.append({**base, "plan": planned(item, args.workdir, report["prepared"]["model_dir"]), "status": "planned"})
            continue
        if remaining <= 30:
            rows.append({**base, "status": "skipped (time budget)", "passed": None})
            continue
        print(f"[{time.time() - started:5.0f} s] {item.name} ...", file=sys.stderr, flush=True)
        row = judge(item, run_item(item, args.workdir, min(ITEM_LIMIT_S, remaining)), args.workdir)
        row["status"] = "passed" if row["passed"] else "FAILED"
        print(f"[{time.time() - started:5.0f} s] {item.name}: {row['status']}", file=sys.stderr, flush=True)
        rows.append(row)
    report["items"] = rows
    report["summary"] = {s: sum(r.get("status") == s for r in rows) for s in ("passed", "FAILED", "planned")}
    report["summary"]["skipped"] = sum(str(r.get("status", "")).startswith("skipped") for r in rows)
    report["seconds"] = round(time.time() - started, 1)
    return report


# --- wheels for the device: download, trim, pack; install there -----------------------------------

# Pinned as in this project's environment; CPython 3.12 manylinux builds are fetched for the device.
WHEELS = (
    "trl==1.15.0", "datasets==4.8.5", "dill==0.4.1", "multiprocess==0.70.19", "xxhash==4.1.0",
    "pyarrow==26.0.1", "pandas==3.1.1", "python-dateutil==4.0.0", "pytz==2026.6", "tzdata==2026.6",
    "bitsandbytes==0.50.2", "unsloth==2026.10.9", "unsloth-zoo==2026.10.9", "tyro==1.0.17",
    "docstring-parser==0.18.0", "typeguard==4.6.1", "msgspec==0.23.0", "cut-cross-entropy==25.1.1",
    "sentencepiece==0.2.3", "einops==0.8.2", "protobuf==7.36.2", "math-verify==0.9.0",
    "latex2sympy2-extended==1.11.0", "antlr4-python3-runtime==4.13.2", "gguf==0.19.0", "matplotlib==3.11.2",
    "contourpy==1.3.3", "cycler==0.12.1", "fonttools==4.68.0", "kiwisolver==1.5.1", "pyparsing==3.3.3",
    "pillow==12.3.0", "threadpoolctl==3.8.0",
)
PLATFORM_FLAGS = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                  "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64",
                  "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
# Wheel members a training run never loads: Unsloth Studio's web app, bitsandbytes' builds for CUDA
# 11.x-12.5 and ROCm (torch 2.11 ships CUDA 12.6+), pyarrow's Flight and S3 libraries (lib.so does
# not link them; `import datasets, trl` and Dataset.from_list/map/shuffle checked without them on
# pyarrow 26.0.1 here), test suites, C headers and sample data.
DROP_PREFIXES = ("studio/", "pandas/tests/", "matplotlib/tests/", "matplotlib/mpl-data/sample_data/",
                 "pyarrow/tests/", "pyarrow/include/", "pyarrow/src/")
DROP_NAMES = ("libbitsandbytes_cuda11", "libbitsandbytes_cuda120", "libbitsandbytes_cuda121", "libbitsandbytes_cuda122",
              "libbitsandbytes_cuda123", "libbitsandbytes_cuda124", "libbitsandbytes_cuda125", "libbitsandbytes_rocm",
              "libarrow_flight.", "libarrow_python_flight.", "_flight.cpython", "libarrow_s3", "_s3fs.cpython",
              "_pyarrow_cpp_tests.")
ZIP_LIMIT = 58 * 1024**2  # per carried file: a call carries 64 MiB in all, the work tree (~3 MiB) included


def kept(member: str) -> bool:
    name = member.rsplit("/", 1)[-1]
    return not member.startswith(DROP_PREFIXES) and not name.startswith(DROP_NAMES)


def pack_wheels(out_dir: str) -> list[str]:
    """Download WHEELS for the device and pack their kept members into as few <= ZIP_LIMIT zip files as fit."""
    download = os.path.join(out_dir, "download")
    os.makedirs(download, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *PLATFORM_FLAGS, "-d", download, *WHEELS],
                   check=True)
    sizes = {}
    for wheel in sorted(os.listdir(download)):
        with zipfile.ZipFile(os.path.join(download, wheel)) as z:
            sizes[wheel] = sum(i.compress_size for i in z.infolist() if kept(i.filename))
    bins: list[list[str]] = []
    for wheel in sorted(sizes, key=sizes.get, reverse=True):  # first fit, largest first
        target = next((b for b in bins if sum(sizes[w] for w in b) + sizes[wheel] <= ZIP_LIMIT * 0.97), None)
        if target is None:
            bins.append(target := [])
        target.append(wheel)
    paths = []
    for n, wheels in enumerate(bins, 1):
        path = os.path.join(out_dir, f"gpu-site-{n}.zip")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as out:
            for wheel in wheels:
                with zipfile.ZipFile(os.path.join(download, wheel)) as z:
                    for info in z.infolist():
                        if kept(info.filename) and not info.is_dir():
                            out.writestr(info.filename, z.read(info))
        print(f"{path}: {os.path.getsize(path) / 2**20:.1f} MiB, {len(wheels)} wheels: {', '.join(wheels)}")
        paths.append(path)
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
    parser.add_argument("--dry-run", action="store_true", help="plan every item and write its inputs; run nothing")
    parser.add_argument("--pack-wheels", metavar="DIR", help="download and pack the device's wheels into DIR")
    parser.add_argument("--install", metavar="ZIP", help="unpack a packed zip into --site")
    parser.add_argument("--site", default="/tmp/site")
    parser.add_argument("--child", nargs=2, metavar=("CAP_GB", "MEASURE"), help=argparse.SUPPRESS)
    parser.add_argument("cli", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.items:
        unknown = set(args.items.split(",")) - {i.name for i in ITEMS}
        if unknown:
            parser.error(f"--items: unknown {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(float(args.child[0]), args.child[1], args.cli)
    if args.pack_wheels:
        pack_wheels(args.pack_wheels)
        return 0
    if args.install:
        return install(args.install, args.site)
    report = run_check(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    for row in report["items"]:
        measured = row.get("measured") or {}
        plan_total = (row.get("plan") or {}).get("total_gb")
        print(f"{row['item']:24s} {row.get('status', ''):22s} peak reserved {measured.get('peak_reserved_gb', '-')!s:>6} GB"
              f"  plan {plan_total if plan_total is not None else '-'!s:>6} GB  step {row.get('step_seconds', '-')!s:>6} s")
    print(f"wrote {args.out}")
    return 0 if report["summary"]["FAILED"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
