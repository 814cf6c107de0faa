"""Generation shared by eval, p_ref, export checks, the studio and the reward check.

One batched sampling loop over chat prompts (left padding, the chat template without a second BOS),
seeded per batch so two models given the same settings see the same random stream. It never trains
and never writes files.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass


@dataclass
class GenerationSettings:
    """How to generate: sampled completions per prompt, length and sampling parameters."""

    samples: int = 1  # completions per prompt when sampling
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


def generate(model, tokenizer, prompts: list[list[dict]], settings: GenerationSettings, sample: bool,
             batch_index: int = 0) -> list[list[tuple[str, int]]]:
    """Completions for a batch of chat prompts: per prompt, a list of (text, length in tokens).

    Greedy gives one completion per prompt; sampling gives `settings.samples`, with the torch seed
    set from (seed, batch) so two models see the same random stream.
    """
    import torch
    from transformers import GenerationConfig

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    eos_ids = end_token_ids(model, tokenizer)
    count = settings.samples if sample else 1
    # rows repeated here, not through num_return_sequences, so that on the CPU the prefill is shared
    batch = {k: v.repeat_interleave(count, dim=0) for k, v in batch.items()}
    gen = GenerationConfig(
        max_new_tokens=settings.max_new_tokens, do_sample=sample,
        temperature=settings.temperature if sample else None, top_p=settings.top_p if sample else None, top_k=0 if sample else None,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids,
    )
    if sample:
        torch.manual_seed(settings.seed * 1_000_003 + batch_index)
    with torch.no_grad(), (cpu_sampling_speedups(model) if device.type == "cpu" else nullcontext()):
        out = model.generate(**batch, generation_config=gen)
    new_tokens = out[:, batch["input_ids"].shape[1]:].tolist()
    results = []
    for i in range(len(prompts)):
        per_prompt = []
        for ids in new_tokens[i * count:(i + 1) * count]:
            ids = cut_at_end(ids, eos_ids)
            per_prompt.append((tokenizer.decode(ids, skip_special_tokens=True), len(ids)))
        results.append(per_prompt)
    return results


def end_token_ids(model, tokenizer) -> list[int]:
    """Token ids that end a completion: the tokenizer's EOS plus the generation config's."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def cut_at_end(ids: list[int], eos_ids: list[int]) -> list[int]:
    """Generated ids up to and including the first end token (padding after it dropped)."""
    for position, token in enumerate(ids):
        if token in eos_ids:
            return ids[: position + 1]
    return ids


# --- faster sampling on the CPU ---------------------------------------------------------------
# GRPO samples each prompt num_generations times; the prompt's prefill need not be computed each time.
# bench/generation_speed.py measures it against plain generation and the hardware's bounds.


def repeat_count(input_ids, attention_mask) -> int:
    """r when the batch is runs of r identical consecutive rows (ids and mask), r > 1; else 1."""
    import torch

    n = input_ids.shape[0]
    for r in range(n, 1, -1):
        if n % r:
            continue
        ids, mask = input_ids.view(n // r, r, -1), attention_mask.view(n // r, r, -1)
        if torch.equal(ids, ids[:, :1].expand_as(ids)) and torch.equal(mask, mask[:, :1].expand_as(mask)):
            return r
    return 1


def generate_sharing_prefill(generate_fn, model, input_ids, attention_mask, **kwargs):
    """`generate_fn(input_ids=..., attention_mask=..., **kwargs)` with each run of identical prompt rows
    prefilled once: GRPO samples every prompt num_generations times, so the prompt's key/value cache
    is computed for one row and repeated. Falls back to plain generation when rows do not repeat or
    kwargs already carry a cache."""
    import torch
    from transformers import DynamicCache

    r = repeat_count(input_ids, attention_mask)
    if r == 1 or input_ids.shape[1] < 2 or "past_key_values" in kwargs:
        return generate_fn(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    ids, mask = input_ids[::r, :-1], attention_mask[::r, :-1]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate computes them
    cache = DynamicCache(config=getattr(model, "config", None))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    cache.batch_repeat_interleave(r)
    return generate_fn(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, **kwargs)


@contextmanager
def cpu_sampling_speedups(model):
    """Within the block, `model.generate` computes each repeated prompt's prefill once
    (`generate_sharing_prefill`). For the CPU, where the prefill of 8 copies is ~15 % of a step."""
    import functools

    original = model.generate
    model.generate = functools.partial(_shared_prefill_generate, original, model)
    try:
        yield model
    finally:
        del model.generate


def _shared_prefill_generate(original, model, input_ids=None, attention_mask=None, **kwargs):
    if input_ids is None or attention_mask is None:
        return original(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    return generate_sharing_prefill(original, model, input_ids, attention_mask, **kwargs)
