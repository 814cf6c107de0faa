"""Write a merged Llama-architecture transformers model to one GGUF file with ggml's `gguf` package.

The `gguf` package (maintained with llama.cpp) provides the writer, the HF -> GGUF tensor-name map
(`gguf.get_tensor_name_map`), the quantisers (`gguf.quants.quantize`) and the special-token/merges
reader (`gguf.SpecialVocab`). What remains here is what llama.cpp's convert_hf_to_gguf.py does for
`LlamaForCausalLM`: the hyper-parameters, the q/k row permutation llama.cpp's rope expects, and the
BPE token list. Other architectures are refused (docs/export.md says what to do instead).
"""

from __future__ import annotations

import json
import tempfile

from .errors import UserError

SUPPORTED_MODEL_TYPES = ("llama",)
QUANT_TYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q5_1": "Q5_1", "q5_0": "Q5_0",
               "q4_1": "Q4_1", "q4_0": "Q4_0"}
FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "bf16": "MOSTLY_BF16", "q8_0": "MOSTLY_Q8_0",
              "q5_1": "MOSTLY_Q5_1", "q5_0": "MOSTLY_Q5_0", "q4_1": "MOSTLY_Q4_1", "q4_0": "MOSTLY_Q4_0"}


def write_gguf(model, tokenizer, path: str, quant: str, name: str = "local-grpo") -> list[str]:
    """Write `model` (a float32 transformers LlamaForCausalLM) and `tokenizer` to `path`; returns warnings."""
    import gguf

    config = model.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise UserError(f"--format gguf: supports Llama-architecture models (SmolLM2, Llama), not {config.model_type!r}; "
                        "export --format merged16 and convert that folder with llama.cpp's convert_hf_to_gguf.py")
    warnings: list[str] = []
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    write_hparams(writer, config, quant, name)
    warnings += write_vocab(writer, tokenizer, config.vocab_size)
    write_tensors(writer, model, config, quant)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return warnings


def write_hparams(writer, config, quant: str, name: str) -> None:
    import gguf

    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = getattr(config, "rope_parameters", None) or {}
    rope_theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
    if rope.get("rope_type", "default") not in ("default", None):
        raise UserError(f"--format gguf: rope scaling {rope.get('rope_type')!r} is not supported by this writer; use --format merged16")
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(rope_theta))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[quant]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def write_vocab(writer, tokenizer, vocab_size: int) -> list[str]:
    """GPT-2 style byte-level BPE: tokens, token types, merges, special ids, chat template."""
    import gguf

    warnings = []
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    if state.get("model", {}).get("type") != "BPE":
        raise UserError("--format gguf: only byte-level BPE tokenizers are supported by this writer; use --format merged16")
    pre = state.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        pre_name = "gpt2"  # llama.cpp's GPT-2 regex is the one ByteLevel(use_regex=True) applies
    else:
        pre_name = "default"
        warnings.append(f"pre-tokenizer {pre.get('type')!r} has no exact llama.cpp equivalent; wrote 'default'")
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_name)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    with tempfile.TemporaryDirectory() as folder:  # SpecialVocab reads merges/ids/template from files
        tokenizer.save_pretrained(folder)
        special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size)
        special.add_to_gguf(writer)
    if "bos" not in special.add_special_token:  # does the tokenizer put BOS in front by itself?
        ids = tokenizer("a")["input_ids"]
        writer.add_add_bos_token(tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id])
        if not special.merges:
            warnings.append("tokenizer has no BPE merges")
    return warnings


def permute_for_rope(weights, n_head: int):
    """HF's rotate-half q/k row order -> llama.cpp's interleaved order (as convert_hf_to_gguf.py does)."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_tensors(writer, model, config, quant: str) -> None:
    import gguf
    import numpy as np

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    qtype = getattr(gguf.GGMLQuantizationType, QUANT_TYPES[quant])
    state = model.state_dict()
    tied = getattr(config, "tie_word_embeddings", False)
    for hf_name, tensor in state.items():
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp reuses token_embd when output.weight is absent
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        new_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise UserError(f"--format gguf: no GGUF name for tensor {hf_name!r}; use --format merged16")
        data = tensor.detach().float().cpu().numpy()
        if hf_name.endswith("q_proj.weight"):
            data = permute_for_rope(data, config.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            data = permute_for_rope(data, config.num_key_value_heads)
        tensor_type = qtype if data.ndim >= 2 else gguf.GGMLQuantizationType.F32  # norms stay float32
        try:
            packed = gguf.quants.quantize(data, tensor_type)
        except gguf.quants.QuantError:  # a row length the block size does not divide: keep it in f16
            tensor_type = gguf.GGMLQuantizationType.F16
            packed = gguf.quants.quantize(data, tensor_type)
        writer.add_tensor(new_name, np.ascontiguousarray(packed), raw_dtype=tensor_type)
