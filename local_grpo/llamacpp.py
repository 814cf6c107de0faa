"""llama.cpp's converter, quantizer and runtime: what writes a GGUF export and what runs it for the check.

- `convert`: a Hugging Face model folder -> one GGUF file (f32, f16, bf16, q8_0), by llama.cpp's own
  `convert_hf_to_gguf.py` in a child process. The converter is the copy `make gguf`
  (scripts/setup_gguf.sh) extracts from the llama-cpp-python sdist into the venv
  (`default_converter_dir`), or a llama.cpp checkout named by $LOCAL_GRPO_LLAMA_CPP.
- `quantize`: GGUF -> k-quant GGUF (q4_k_m, q5_k_m, q6_k) with llama.cpp's quantizer
  (`llama_cpp.llama_model_quantize`, the `gguf` extra).
- `greedy`: runs a GGUF in llama.cpp (`llama_cpp.Llama`): the prompt ids llama.cpp's own tokenizer gives
  each prompt text, and its greedy completion ids.

The quantizer and the runtime run in a child process too (`python -m local_grpo.llamacpp`): llama.cpp
logs to the C-level stderr and aborts its process on some malformed files; in a child both stay off the
user's terminal and out of the export, which reports one line instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

from .errors import UserError

ENV_VAR = "LOCAL_GRPO_LLAMA_CPP"
INSTALL_HINT = "`make gguf` (scripts/setup_gguf.sh) installs it"
EXTRA_HINT = 'the gguf extra: `make gguf`, or pip install -e ".[gguf]" (compiles llama.cpp, minutes)'
CONVERTER = "convert_hf_to_gguf.py"
CONVERTER_TYPES = ("f32", "f16", "bf16", "q8_0")  # written by the converter itself
QUANTIZER_TYPES = {"q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K", "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
                   "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}  # written by llama.cpp's quantizer from an f16 GGUF
TYPES = CONVERTER_TYPES + tuple(QUANTIZER_TYPES)
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a sentencepiece byte-fallback token


class LlamaCppError(UserError):
    """llama.cpp's converter, quantizer or runtime failed; `detail` says how, with llama.cpp's own last error line."""

    def __init__(self, detail: str):
        super().__init__(f"--format gguf: {detail}")
        self.detail = detail


def default_converter_dir() -> str:
    """Where scripts/setup_gguf.sh extracts the converter: <venv>/share/local-grpo/llama.cpp."""
    return os.path.join(sys.prefix, "share", "local-grpo", "llama.cpp")


def converter_dir() -> str:
    """The llama.cpp tree whose convert_hf_to_gguf.py we run: $LOCAL_GRPO_LLAMA_CPP, else the extracted copy."""
    chosen = os.environ.get(ENV_VAR)
    folder = chosen or default_converter_dir()
    if not os.path.isfile(os.path.join(folder, CONVERTER)):
        where = f"${ENV_VAR} ({folder})" if chosen else folder
        raise UserError(f"--format gguf: llama.cpp's converter ({CONVERTER}) is not in {where}; {INSTALL_HINT}")
    return folder


def layer_pattern_problem(model_config) -> str | None:
    """Why llama.cpp would run this model with the wrong attention layers, or None.

    llama.cpp's Gemma 3 converter (llama-cpp-python 0.3.36) writes the sliding window but not which layers
    use it, and llama.cpp then assumes Gemma 3's own pattern, every 6th layer global. Every released Gemma 3
    follows it; a model whose `layer_types` differ would convert without an error and compute otherwise.
    """
    text = model_config.get_text_config()
    layer_types = getattr(text, "layer_types", None)
    if getattr(text, "model_type", None) not in ("gemma3", "gemma3_text") or not layer_types:
        return None
    assumed = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(len(layer_types))]
    if list(layer_types) == assumed:
        return None
    return (f"this Gemma 3 model's layer_types ({len(layer_types)} layers, global at "
            f"{[i for i, t in enumerate(layer_types) if t == 'full_attention']}) differ from every 6th layer global, "
            "the pattern llama.cpp assumes for Gemma 3 (its converter does not write it): the GGUF would compute "
            "another model; export merged16 instead")


def runtime_available() -> bool:
    """Whether llama-cpp-python (the runtime and the quantizer) is installed."""
    return importlib.util.find_spec("llama_cpp") is not None


def convert(hf_folder: str, out_path: str, outtype: str) -> None:
    """Write `hf_folder` (a saved transformers model + tokenizer) as one GGUF file of `outtype` (CONVERTER_TYPES)."""
    script = os.path.join(converter_dir(), CONVERTER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, script, hf_folder, "--outfile", out_path, "--outtype", outtype],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not os.path.isfile(out_path):
        raise LlamaCppError(f"llama.cpp's converter failed ({exit_status(proc.returncode)}): "
                            f"{last_error_line(proc.stderr + proc.stdout)}")


def quantize(source: str, target: str, quant: str) -> None:
    """Quantize the GGUF `source` to `quant` (QUANTIZER_TYPES) into `target` with llama.cpp's quantizer."""
    require_runtime(f"--quant {quant}")
    run_child({"op": "quantize", "source": source, "target": target, "ftype": QUANTIZER_TYPES[quant]})


def greedy(gguf_path: str, texts: list[str], stop_ids: list[int], max_new_tokens: int, n_ctx: int,
           references: list[list[int]] | None = None) -> dict:
    """Run `gguf_path` in llama.cpp: each text tokenized by llama.cpp (special tokens parsed, no BOS added)
    and decoded greedily until a token of `stop_ids` (kept, as `generation.cut_at_end` does) or
    `max_new_tokens`.

    Returns {"prompt_ids": [[...]], "completions": [[...]], "end_of_generation": {id: bool}} where
    end_of_generation says, per stop id, whether llama.cpp itself ends generation at that token; with
    `references` (a completion per text) also "picks": llama.cpp's argmax at each position of the
    reference, given the prompt and the reference's tokens before it (teacher forced).
    """
    require_runtime("the llama.cpp check")
    return run_child({"op": "greedy", "gguf": gguf_path, "texts": texts, "stop_ids": stop_ids,
                      "max_new_tokens": max_new_tokens, "n_ctx": n_ctx, "references": references})


def require_runtime(what: str) -> None:
    if not runtime_available():
        raise UserError(f"{what}: needs llama-cpp-python, which is not installed; install {EXTRA_HINT}")


def run_child(job: dict) -> dict:
    """Run one job (`main`) in a child Python; its output, C logs included, is captured."""
    with tempfile.TemporaryDirectory(prefix="local-grpo-llama-") as folder:
        result_path = os.path.join(folder, "result.json")
        proc = subprocess.run([sys.executable, "-m", __name__, result_path], input=json.dumps(job),
                              capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.isfile(result_path):
            what = {"quantize": "quantizer", "greedy": "runtime"}[job["op"]]
            raise LlamaCppError(f"llama.cpp's {what} failed ({exit_status(proc.returncode)}): "
                                f"{last_error_line(proc.stderr + proc.stdout)}")
        with open(result_path, encoding="utf-8") as fh:
            return json.load(fh)


def exit_status(code: int) -> str:
    """A child's exit code in words: "exit 1", or the signal that killed it ("killed by SIGSEGV")."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def last_error_line(output: str) -> str:
    """The line of a child's output that says what went wrong: the last exception or error line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    markers = ("Error", "error", "Exception", "what():", "failed", "terminate called")
    for line in reversed(lines):
        if any(marker in line for marker in markers):
            return line
    return lines[-1] if lines else "no output"


def plain_byte_level_bpe(folder: str) -> bool:
    """Make a byte-level BPE tokenizer.json read as what it is, so the converter writes a GPT-2 style vocabulary.

    transformers' GGUF reader (how the embedded SmolLM2 becomes an HF folder) rebuilds byte-level BPE
    tokenizers with `byte_fallback` and a sentencepiece-style decoder. llama.cpp's converter then takes
    them for a Llama sentencepiece vocabulary (`LlamaHfVocab`), and llama.cpp aborts when it tokenizes
    with the file. Under a ByteLevel pre-tokenizer every byte of the text is a character of the byte
    alphabet, and without `<0xXX>` tokens in the vocabulary byte fallback has nothing to fall back to:
    the two settings are reset (plain BPE, ByteLevel decoder) and ids and text stay the same. The ids
    llama.cpp then gives are checked against the HF tokenizer's by the export. Returns whether the file changed.
    """
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as fh:
        state = json.load(fh)
    model = state.get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback") or not has_byte_level(state.get("pre_tokenizer")):
        return False
    if any(BYTE_TOKEN.fullmatch(token) for token in model.get("vocab") or {}):
        return False  # <0xXX> byte tokens exist: byte fallback may matter
    model["byte_fallback"] = False
    state["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(state, fh, ensure_ascii=False)
    return True


def phi3_gpt2_vocabulary(folder: str) -> bool:
    """Name a Phi-3 folder's byte-level BPE tokenizer GPT2Tokenizer, the class llama.cpp's Phi-3 converter reads.

    That converter takes a GPT-2 style vocabulary only when tokenizer_config.json says GPT2Tokenizer (as
    Phi-4-mini's own file does) and otherwise wants a sentencepiece tokenizer.model; transformers 5.17 saves
    every tokenizer as "TokenizersBackend". Only a Phi-3 folder without tokenizer.model whose tokenizer.json
    is byte-level BPE is changed (the class name only). Returns whether the file changed.
    """
    config_path, tokenizer_config_path = (os.path.join(folder, name) for name in ("config.json", "tokenizer_config.json"))
    if os.path.exists(os.path.join(folder, "tokenizer.model")) or not os.path.isfile(tokenizer_config_path):
        return False
    with open(config_path, encoding="utf-8") as fh:
        if json.load(fh).get("model_type") != "phi3":
            return False
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as fh:
        state = json.load(fh)
    if (state.get("model") or {}).get("type") != "BPE" or not has_byte_level(state.get("pre_tokenizer")):
        return False
    with open(tokenizer_config_path, encoding="utf-8") as fh:
        tokenizer_config = json.load(fh)
    if tokenizer_config.get("tokenizer_class") == "GPT2Tokenizer":
        return False
    tokenizer_config["tokenizer_class"] = "GPT2Tokenizer"
    with open(tokenizer_config_path, "w", encoding="utf-8") as fh:
        json.dump(tokenizer_config, fh, ensure_ascii=False, indent=2)
    return True


def has_byte_level(pre_tokenizer: dict | None) -> bool:
    if not pre_tokenizer:
        return False
    if pre_tokenizer.get("type") == "Sequence":
        return any(has_byte_level(p) for p in pre_tokenizer.get("pretokenizers") or [])
    return pre_tokenizer.get("type") == "ByteLevel"


def file_metadata(gguf_path: str, keys: tuple[str, ...]) -> dict:
    """Scalar and string metadata of a GGUF file (read with the `gguf` package, no llama.cpp needed)."""
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    return {key: reader.fields[key].contents() for key in keys if key in reader.fields}


# --- the child process ----------------------------------------------------------------------

def _quantize_job(job: dict) -> dict:
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, job["ftype"])
    code = llama_cpp.llama_model_quantize(job["source"].encode(), job["target"].encode(), ctypes.byref(params))
    if code != 0:
        raise RuntimeError(f"llama_model_quantize returned {code}")
    return {}


def _greedy_job(job: dict) -> dict:
    import llama_cpp

    llm = llama_cpp.Llama(job["gguf"], n_ctx=job["n_ctx"], verbose=False, seed=0)
    stops = set(job["stop_ids"])
    prompt_ids, completions = [], []
    for text in job["texts"]:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        prompt_ids.append(ids)
        llm.reset()  # no prompt-prefix reuse between prompts: each decodes from an empty cache
        out: list[int] = []
        for token in llm.generate(ids, temp=0.0, repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if token in stops or len(out) >= job["max_new_tokens"]:
                break
        completions.append(out)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    eog = {str(i): bool(llama_cpp.llama_vocab_is_eog(vocab, i)) for i in job["stop_ids"]}
    result = {"prompt_ids": prompt_ids, "completions": completions, "end_of_generation": eog}
    if job.get("references") is not None:
        result["picks"] = [_teacher_forced(llm, ids, reference) for ids, reference in zip(prompt_ids, job["references"])]
    return result


def _teacher_forced(llm, prompt_ids: list[int], reference: list[int]) -> list[int]:
    """llama.cpp's argmax before each token of `reference`, feeding the reference's own tokens."""
    import llama_cpp
    import numpy as np

    llm.reset()
    picks = []
    for i, token in enumerate(reference):
        llm.eval(prompt_ids if i == 0 else [reference[i - 1]])
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
        picks.append(int(logits.argmax()))
    return picks


def main(argv: list[str]) -> int:
    """`python -m local_grpo.llamacpp RESULT_JSON` with a job on stdin (see run_child)."""
    job = json.loads(sys.stdin.read())
    result = {"quantize": _quantize_job, "greedy": _greedy_job}[job["op"]](job)
    with open(argv[0], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
