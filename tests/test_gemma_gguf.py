"""A Gemma GGUF converts into a folder whose tokenizer encodes as llama.cpp does (models.convert_gguf).

transformers reads a Gemma GGUF's tokenizer as a Unigram model with five special tokens and no BOS, and
its saved copy reloads as a BPE without merges: one token per character. The tiny GGUF here is written
with the `gguf` package in the layout llama.cpp's converter gives Gemma 3 (sentencepiece BPE: tokens,
scores, token types), with random weights.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

# llama.cpp's token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6

SPECIAL = [("<pad>", CONTROL), ("<eos>", CONTROL), ("<bos>", CONTROL), ("<unk>", UNKNOWN), ("<mask>", CONTROL),
           ("<start_of_turn>", CONTROL), ("<end_of_turn>", CONTROL),
           ("\n", USER_DEFINED), ("\n\n", USER_DEFINED), ("  ", USER_DEFINED)]
CHARS = list("▁abcdehilnorstuwx0123456789+?:'")
# Merged pieces, best first: a sentencepiece BPE merges the pair whose merged piece scores highest, so
# "abc" is ab|c; a Unigram (best total score) would take a|bc, as "a" scores above "c".
MERGED = ["ab", "bc", "th", "▁th", "▁the", "is", "▁is", "wh", "▁wh", "at", "▁what", "or", "wor", "▁wor", "ld",
          "▁world", "er", "▁w", "▁wha"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
                 "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    tokens, scores, types = [], [], []
    for token, kind in SPECIAL:
        tokens.append(token), scores.append(0.0), types.append(kind)
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>"), scores.append(0.0), types.append(BYTE)
    for rank, token in enumerate(MERGED):
        tokens.append(token), scores.append(-float(rank)), types.append(NORMAL)
    for rank, token in enumerate(CHARS):
        tokens.append(token), scores.append(-1000.0 - rank), types.append(NORMAL)
    return tokens, scores, types


def write_tiny_gemma3_gguf(path: str, hidden: int = 16, layers: int = 2, seed: int = 0) -> str:
    """A tiny Gemma 3 GGUF (F32 tensors, random weights) with a sentencepiece-BPE vocabulary."""
    import gguf

    tokens, scores, types = tiny_vocab()
    heads, kv_heads, head_dim, ffn = 2, 1, 8, 32
    writer = gguf.GGUFWriter(path, "gemma3")
    writer.add_name("tiny gemma3")
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(64)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)  # as llama.cpp's converter writes for Gemma
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(seed)

    def tensor(name, *shape):  # numpy shape = torch shape (out, in)
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", len(tokens), hidden)
    tensor("output_norm.weight", hidden)
    for i in range(layers):
        b = f"blk.{i}."
        tensor(b + "attn_q.weight", heads * head_dim, hidden)
        tensor(b + "attn_k.weight", kv_heads * head_dim, hidden)
        tensor(b + "attn_v.weight", kv_heads * head_dim, hidden)
        tensor(b + "attn_output.weight", hidden, heads * head_dim)
        tensor(b + "attn_q_norm.weight", head_dim)
        tensor(b + "attn_k_norm.weight", head_dim)
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            tensor(b + norm + ".weight", hidden)
        tensor(b + "ffn_gate.weight", ffn, hidden)
        tensor(b + "ffn_up.weight", ffn, hidden)
        tensor(b + "ffn_down.weight", hidden, ffn)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


TEXTS = [" what is the world", "what", "abc", "<start_of_turn>user\nwhat is 4+5?<end_of_turn>\n<start_of_turn>model\n",
         "the  world\n\nis: 'x'", "xyz é"]


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    """(the GGUF file, its converted folder) for a tiny Gemma 3, converted once into a private cache."""
    from local_grpo import models

    root = tmp_path_factory.mktemp("gemma")
    gguf_path = write_tiny_gemma3_gguf(str(root / "tiny-gemma3.gguf"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCAL_GRPO_CACHE", str(root / "cache"))
        folder = models.convert_gguf(gguf_path)
    return gguf_path, folder


def test_converted_gemma_tokenizer_is_the_sentencepiece_bpe(tiny_gemma):
    from transformers import AutoTokenizer

    _, folder = tiny_gemma
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokens, _, _ = tiny_vocab()
    ids = {token: i for i, token in enumerate(tokens)}
    # <bos> first; no space is prefixed (Gemma's add_space_prefix is false)
    assert tokenizer(" what is the world").input_ids == [ids[t] for t in ["<bos>", "▁what", "▁is", "▁the", "▁world"]]
    assert tokenizer("what", add_special_tokens=False).input_ids == [ids["wh"], ids["at"]]
    # merge order, not best total score
    assert tokenizer("abc", add_special_tokens=False).input_ids == [ids["ab"], ids["c"]]
    # control tokens and user-defined runs are single tokens
    chat = tokenizer("<start_of_turn>user\n\n", add_special_tokens=False).input_ids
    assert chat[0] == ids["<start_of_turn>"] and chat[-1] == ids["\n\n"]
    assert tokenizer("a  b", add_special_tokens=False).input_ids == [ids["a"], ids["  "], ids["b"]]
    # a character outside the vocabulary falls back to its UTF-8 bytes
    assert tokenizer("é", add_special_tokens=False).input_ids == [ids["<0xC3>"], ids["<0xA9>"]]
    for text in TEXTS:
        assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text.replace(
            "<start_of_turn>", "").replace("<end_of_turn>", "")
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert tokenizer.chat_template == CHAT_TEMPLATE


def test_converted_gemma_model_loads_and_generates(tiny_gemma):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, folder = tiny_gemma
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.model_type == "gemma3_text" and model.config.num_hidden_layers == 2
    batch = tokenizer(["what is the world"], return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=3, do_sample=False)
    assert out.shape == (1, batch.input_ids.shape[1] + 3)


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
def test_converted_gemma_tokenizer_encodes_like_llama_cpp(tiny_gemma):
    from llama_cpp import Llama
    from transformers import AutoTokenizer

    gguf_path, folder = tiny_gemma
    tokenizer = AutoTokenizer.from_pretrained(folder)
    llm = Llama(gguf_path, vocab_only=True, verbose=False)
    for text in TEXTS:
        assert tokenizer(text).input_ids == llm.tokenize(text.encode(), add_bos=True, special=True), text
