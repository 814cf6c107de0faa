"""Tiny random-weight models built locally for tests.

`build_tiny_model`: a tiny Llama + a BPE trained here (the fast default of most tests). Llama, not
Qwen2: a qwen2 folder makes AutoTokenizer rebuild the pre-tokenizer and change ids.

`build_architecture`: one tiny model per architecture the recipes name (`ARCHITECTURES`), each from
its real transformers config class with that family's distinguishing features (GQA, llama3 rope
scaling, untied head, q/k/v bias, q/k norm, sliding-window layers, fused projections), and a real
tokenizer llama.cpp's converter knows: the embedded SmolLM2's, given the family's own chat template,
special tokens and end token; for Qwen2, Qwen2.5's own where llama.cpp's tree is installed
(`llama_cpp_vocab`), since transformers reads any qwen2 folder's tokenizer with Qwen2's pre-tokenizer
and over SmolLM2's vocabulary that gives ids whose hash llama.cpp's converter does not recognise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from local_grpo.errors import UserError

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus() -> list[str]:
    lines = []
    for a in range(0, 100, 3):
        for b in range(0, 100, 7):
            lines.append(f"What is {a} + {b}? {a} plus {b} is {a + b}. Answer: {a + b}")
    lines += [
        "Solve the problem. Think briefly, then end your reply with a last line 'Answer: <number>'.",
        "<think> reasoning </think> <answer> 42 </answer> The answer is 7. #### 12",
        "system user assistant",
    ] * 20
    return lines


def build_tiny_model(out_dir: str, hidden: int = 64, layers: int = 2, seed: int = 0) -> str:
    """Write a tiny LlamaForCausalLM + tokenizer folder to `out_dir` and return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    os.makedirs(out_dir, exist_ok=True)
    bpe = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        bos_token="<|im_start|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out_dir)
    return out_dir


# --- one tiny model per architecture, with the embedded SmolLM2's tokenizer ------------------

def save_smollm2_tokenizer(out_dir: str) -> str:
    """The embedded SmolLM2's tokenizer (converted once into the model cache), saved alone in `out_dir`."""
    from transformers import AutoTokenizer

    from local_grpo import models

    AutoTokenizer.from_pretrained(models.resolve("embedded")).save_pretrained(out_dir)
    return out_dir


# Families whose real tokenizer llama.cpp's tree holds as a vocabulary-only GGUF (`make gguf` extracts it).
LLAMA_CPP_VOCABS = {"qwen2": "models/ggml-vocab-qwen2.gguf"}  # Qwen2.5's, 151,936 tokens


def llama_cpp_vocab(name: str) -> str | None:
    """The vocabulary GGUF of family `name` in the installed llama.cpp tree, or None (none for it, or no tree)."""
    if name not in LLAMA_CPP_VOCABS:
        return None
    try:
        from local_grpo import llamacpp

        path = os.path.join(llamacpp.converter_dir(), LLAMA_CPP_VOCABS[name])
    except (ImportError, UserError):
        return None
    return path if os.path.isfile(path) else None


def save_gguf_tokenizer(gguf_path: str, out_dir: str) -> str:
    """The tokenizer of a GGUF file (transformers' GGUF reader), saved alone in `out_dir`."""
    from transformers import AutoTokenizer

    folder, filename = os.path.split(os.path.abspath(gguf_path))
    AutoTokenizer.from_pretrained(folder, gguf_file=filename).save_pretrained(out_dir)
    return out_dir


@dataclass(frozen=True)
class Architecture:
    """A family's tiny shape: its transformers config class and keyword arguments, chat template, tokens."""

    config_class: str  # in transformers
    config: dict  # the family's distinguishing settings (sizes are added by build_architecture)
    template: str | None  # a chat template file shipped with TRL (its exact copy of the family's), None: SmolLM2's own
    special_tokens: list[str] = field(default_factory=list)  # added to SmolLM2's vocabulary
    bos: str | None = None  # None: SmolLM2's
    eos: str = "<|im_end|>"  # the family's end of turn
    pad: str = "<|endoftext|>"
    tokenizer_class: str | None = None  # written into tokenizer_config.json when the family's converter reads it
    fused: tuple[str, ...] = ()  # fused projection names LoRA must reach


# Every projection's output size is a multiple of 32: bitsandbytes' 4-bit layout on CPUs with AVX512-BF16
# (repacked at the first no-grad forward) refuses others, as no real model's size would be.
ARCHITECTURES = {
    # SmolLM2-135M: the embedded model's shape (tied head, GQA, plain rope) and its own ChatML template
    "smollm2": Architecture("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                                rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
                            template=None),
    # Llama 3.x: 4:1 GQA, llama3 rope scaling, untied head, <|eot_id|> ends a turn
    "llama3": Architecture("LlamaConfig", dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                                               tie_word_embeddings=False,
                                               rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                                "factor": 32.0, "low_freq_factor": 1.0,
                                                                "high_freq_factor": 4.0,
                                                                "original_max_position_embeddings": 256}),
                           template="llama3_2.jinja",
                           special_tokens=["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
                           bos="<|begin_of_text|>", eos="<|eot_id|>"),
    # Qwen2.5: bias on q/k/v, tied head (0.5B-3B), ChatML
    "qwen2": Architecture("Qwen2Config", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                          template="qwen2_5.jinja"),
    # Qwen3: RMSNorm on q and k, explicit head_dim
    "qwen3": Architecture("Qwen3Config", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                              tie_word_embeddings=True,
                                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                          template="qwen3.jinja"),
    # Gemma 3 (text): sliding-window and global layers, query_pre_attn_scalar, scaled embeddings, no system role.
    # Six layers in Gemma 3's own pattern (every 6th global), the one llama.cpp assumes (GGUF export refuses others)
    "gemma3": Architecture("Gemma3TextConfig", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                    query_pre_attn_scalar=16, sliding_window=16,
                                                    layer_types=["sliding_attention"] * 5 + ["full_attention"],
                                                    tie_word_embeddings=True),
                           template="gemma3.jinja", special_tokens=["<bos>", "<start_of_turn>", "<end_of_turn>"],
                           bos="<bos>", eos="<end_of_turn>"),
    # Phi-4-mini: fused qkv_proj and gate_up_proj, partial rotary, tied head; a GPT-2 style BPE
    "phi3": Architecture("Phi3Config", dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                             "partial_rotary_factor": 0.75}),
                         template="phi3.jinja", special_tokens=["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
                         eos="<|end|>", tokenizer_class="GPT2Tokenizer", fused=("qkv_proj", "gate_up_proj")),
}

# Text whose ids must survive a save and reload: digits, punctuation runs, newlines and spaces, non-ASCII.
PROBE_TEXTS = ["hello,world it's 3.14 foo\n\n  bar", "Hey!!! x=1;y=22\t\tz", "  leading  spaces\r\n\r\nend",
               "ÀÉÎ naïve 日本語 😀", "What is 12 + 35? Answer: 47"]


def trl_chat_template(filename: str) -> str:
    """A chat template file from TRL's copies of the families' own templates."""
    import trl

    with open(os.path.join(os.path.dirname(trl.__file__), "chat_templates", filename), encoding="utf-8") as fh:
        return fh.read()


def build_architecture(name: str, out_dir: str, tokenizer_dir: str, hidden: int = 64, layers: int = 2,
                       seed: int = 0) -> str:
    """Write a tiny random model of architecture `name` (a key of ARCHITECTURES) with the tokenizer in
    `tokenizer_dir` (`save_smollm2_tokenizer`) adapted to the family, to `out_dir`; return it."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    arch = ARCHITECTURES[name]
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if arch.special_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": arch.special_tokens})
    tokenizer.eos_token, tokenizer.pad_token = arch.eos, arch.pad
    if arch.bos:
        tokenizer.bos_token = arch.bos
    if arch.template:
        tokenizer.chat_template = trl_chat_template(arch.template)
    ids = tokenizer.convert_tokens_to_ids
    config = getattr(transformers, arch.config_class)(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
        num_hidden_layers=len(arch.config.get("layer_types", ())) or layers,  # a family's own layer pattern sets it
        max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id, eos_token_id=ids(arch.eos),
        pad_token_id=ids(arch.pad), **arch.config)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    # Saved again as AutoTokenizer reads it back, so that the files hold the tokenizer every loader sees.
    # Only qwen2 differs: transformers 5.17 builds Qwen2Tokenizer for any qwen2 folder whatever
    # tokenizer_class says, with Qwen2's own pre-tokenizer regex and NFC over SmolLM2's vocabulary and merges.
    reloaded = AutoTokenizer.from_pretrained(out_dir)
    if type(reloaded) is not type(tokenizer):
        reloaded.save_pretrained(out_dir)
    if arch.tokenizer_class:  # llama.cpp's Phi-3 converter reads a GPT-2 style vocabulary only under this name
        path = os.path.join(out_dir, "tokenizer_config.json")
        with open(path, encoding="utf-8") as fh:
            saved = json.load(fh)
        saved["tokenizer_class"] = arch.tokenizer_class
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(saved, fh, indent=2)
    return out_dir


def reencodes_like(folder: str, tokenizer_dir: str) -> bool:
    """True when the folder's tokenizer gives the ids of the one in `tokenizer_dir` on `PROBE_TEXTS`."""
    from transformers import AutoTokenizer

    mine, source = AutoTokenizer.from_pretrained(folder), AutoTokenizer.from_pretrained(tokenizer_dir)
    return all(mine(text)["input_ids"] == source(text)["input_ids"] for text in PROBE_TEXTS)
