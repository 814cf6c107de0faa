"""Generation shared by eval, p_ref, export checks, the studio and the reward check.

One batched sampling loop over chat prompts (left padding, the chat template without a second BOS),
seeded per batch so two models given the same settings see the same random stream. It never trains
and never writes files.
"""

from __future__ import annotations

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
    gen = GenerationConfig(
        max_new_tokens=settings.max_new_tokens, do_sample=sample, num_return_sequences=count,
        temperature=settings.temperature if sample else None, top_p=settings.top_p if sample else None, top_k=0 if sample else None,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids,
    )
    if sample:
        torch.manual_seed(settings.seed * 1_000_003 + batch_index)
    with torch.no_grad():
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
