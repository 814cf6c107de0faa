"""Generation shared by eval, p_ref, export checks, the studio and the reward check.

One batched sampling loop over chat prompts (left padding, the chat template without a second BOS),
seeded per batch so two models given the same settings see the same random stream; for a tool task,
with the tool-calling loop TRL runs in training (`tool_loop`). It never trains and never writes files.
"""

from __future__ import annotations

import copy
import weakref
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


@dataclass
class Completion:
    """One generated completion: `text` is what the rewards read (the assistant's text, over all its turns),
    `tokens` the model's own tokens (up to and including the end token; a tool's results not counted, as in
    TRL's completions/mean_length), `turns` a tool task's chat messages (assistant, tool, assistant, ...)."""

    text: str
    tokens: int
    turns: list[dict] | None = None


def generate(model, tokenizer, prompts: list[list[dict]], settings: GenerationSettings, sample: bool,
             batch_index: int = 0, tools: list | None = None,
             max_tool_rounds: int | None = None) -> list[list[tuple[str, int]]]:
    """Completions for a batch of chat prompts: per prompt, a list of (text, length in tokens).

    Greedy gives one completion per prompt; sampling gives `settings.samples`, with the torch seed
    set from (seed, batch) so two models see the same random stream. With `tools`, see generate_turns.
    """
    return [[(c.text, c.tokens) for c in per_prompt]
            for per_prompt in generate_turns(model, tokenizer, prompts, settings, sample, batch_index, tools,
                                             max_tool_rounds)]


def generate_turns(model, tokenizer, prompts: list[list[dict]], settings: GenerationSettings, sample: bool,
                   batch_index: int = 0, tools: list | None = None,
                   max_tool_rounds: int | None = None) -> list[list[Completion]]:
    """`generate`, with each completion's turns when the task has tools.

    `tools` (a tool task's sandboxed tools, tasks.tools.sandboxed_tools): the prompt lists them, and each
    completion runs TRL's tool-calling loop (`tool_loop`): until it calls no tool, `max_tool_rounds`
    rounds, or settings.max_new_tokens tokens in all (its own and the tools' results, as TRL bounds
    max_completion_length).
    """
    import torch
    from transformers import GenerationConfig

    texts = [tokenizer.apply_chat_template(p, tools=tools or None, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
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
    new_tokens = [cut_at_end(ids, eos_ids) for ids in generate_ids(model, batch, gen)]
    if tools:
        prompt_ids = [[t for t, m in zip(ids, mask) if m] for ids, mask in
                      zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist())]
        completions = tool_loop(model, tokenizer, prompt_ids, new_tokens, tools, gen, max_tool_rounds)
    else:
        completions = [Completion(tokenizer.decode(ids, skip_special_tokens=True), len(ids)) for ids in new_tokens]
    return [completions[i * count:(i + 1) * count] for i in range(len(prompts))]


def generate_ids(model, batch: dict, gen) -> list[list[int]]:
    """The new tokens of `model.generate` on a padded batch (on the CPU within cpu_sampling_speedups)."""
    import torch

    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    with torch.no_grad(), (cpu_sampling_speedups(model) if device.type == "cpu" else nullcontext()):
        out = model.generate(**batch, generation_config=gen)
    return out[:, batch["input_ids"].shape[1]:].tolist()


# --- the tool-calling loop (eval's side of TRL's GRPOTrainer._tool_call_loop) -------------------

def tool_loop(model, tokenizer, prompt_ids: list[list[int]], first: list[list[int]], tools: list, gen,
              max_rounds: int | None = None) -> list[Completion]:
    """Run the tools each completion calls and generate its next turn, as TRL does in training.

    Each turn is read with TRL's parser (trl.chat_template_utils.parse_response); a tool call's results
    become `tool` messages (a failing tool's `{'error': ...}`, as TRL words it), and the ids go on by
    concatenation: prompt + completion so far + the tool turn's tokens (`tool_suffix_ids`), never
    re-tokenised. A completion whose next tool turn would pass gen.max_new_tokens tokens in all stops
    there, without that turn; its next turn is cut to the tokens left.
    """
    from rewards.extract import completion_text
    from trl.chat_template_utils import parse_response

    eos_ids = gen.eos_token_id
    budget = gen.max_new_tokens
    ids = [list(c) for c in first]
    own = [len(c) for c in first]  # the model's own tokens
    messages = [[parse_response(tokenizer, c, prefix=p)] for p, c in zip(prompt_ids, first)]
    by_name = {tool.__name__: tool for tool in tools}
    pending = [i for i, m in enumerate(messages) if m[-1].get("tool_calls")]
    rounds = 0
    while pending and (max_rounds is None or rounds < max_rounds):
        rows = []
        for i in pending:
            results = tool_messages(by_name, messages[i][-1]["tool_calls"])
            longer = ids[i] + tool_suffix_ids(tokenizer, results)
            if len(longer) <= budget:  # else this completion ends here, without the tool turn
                messages[i] += results
                ids[i] = longer
                if len(longer) < budget:
                    rows.append(i)
        if not rows:
            break
        left = [budget - len(ids[i]) for i in rows]
        batch = tokenizer.pad({"input_ids": [prompt_ids[i] + ids[i] for i in rows]}, padding=True, return_tensors="pt")
        turn_gen = copy.deepcopy(gen)
        turn_gen.max_new_tokens = max(left)
        nexts = generate_ids(model, batch, turn_gen)
        pending = []
        for i, room, new in zip(rows, left, nexts):
            new = cut_at_end(new, eos_ids)[:room]
            turn = parse_response(tokenizer, new, prefix=prompt_ids[i] + ids[i])
            ids[i] += new
            own[i] += len(new)
            messages[i].append(turn)
            if turn.get("tool_calls"):
                pending.append(i)
        rounds += 1
    return [Completion(completion_text(m), n, m) for m, n in zip(messages, own)]


def tool_messages(tools_by_name: dict, calls: list) -> list[dict]:
    """One `tool` message per call: the tool's result, or `{'error': ...}` when it is unknown or fails (TRL's words)."""
    results = []
    for call in calls:
        function = call.get("function", call) if isinstance(call, dict) else {}
        name = function.get("name", "unknown")
        try:
            if name not in tools_by_name:
                raise ValueError(f"Tool {name} not found.")
            result = tools_by_name[name](**function.get("arguments", {}))
        except Exception as error:  # the tool's own error, a ToolError from its child, bad arguments
            result = {"error": str(error)}
        results.append({"role": "tool", "name": name, "content": str(result)})
    return results


def tool_suffix_ids(tokenizer, tool_messages: list[dict]) -> list[int]:
    """The tokens between a tool-calling turn and the model's next turn: the tool results and the next
    assistant header, rendered as TRL's GRPOTrainer._get_tool_suffix_ids renders them (a dummy tool call
    with and without the results; the difference, from the call's end token on)."""
    call = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
    dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": call}]
    prefix = tokenizer.apply_chat_template(dummy, add_generation_prompt=False, tokenize=True, return_dict=False)
    full = tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, tokenize=True,
                                         return_dict=False)
    ends = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    return full[len(prefix):]


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
def cpu_sampling_speedups(model, pack_output_head: bool = True, inverse_cdf_sampling: bool = True,
                          bf16_weights: bool = False):
    """Within the block, `model.generate` computes each repeated prompt's prefill once
    (`generate_sharing_prefill`; the prefill of 8 copies is ~15 % of a CPU step), with
    `inverse_cdf_sampling` draws plain sampling's tokens by inverse CDF (`inverse_cdf_kwargs`), with
    `pack_output_head` the output head reads a pre-packed copy of its weight (`packed_output_head`), and
    with `bf16_weights` (CPUs with native bf16) the whole model computes in bf16 (`bf16_weights_for_sampling`)."""
    import functools

    original = model.generate
    model.generate = functools.partial(_fast_generate, original, model, inverse_cdf_sampling)
    try:
        with bf16_weights_for_sampling(model) if bf16_weights else nullcontext(), \
                packed_output_head(model) if pack_output_head else nullcontext():
            yield model
    finally:
        del model.generate


def _fast_generate(original, model, inverse_cdf: bool, input_ids=None, attention_mask=None, **kwargs):
    if inverse_cdf:
        kwargs = inverse_cdf_kwargs(model, kwargs)
    if input_ids is None or attention_mask is None:
        return original(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    return generate_sharing_prefill(original, model, input_ids, attention_mask, **kwargs)


def inverse_cdf_kwargs(model, kwargs: dict) -> dict:
    """`generate` kwargs that draw each token by inverse CDF instead of `torch.multinomial`, which spends
    one exponential draw per vocabulary entry and row (~25 ms a CPU decode step for 16 × 49k). Only for plain
    sampling (temperature alone: no top-k, top-p, min-p or other warper, one beam, one sequence per row, no
    scores returned); anything else comes back unchanged. Same distribution, another random stream: the
    token is drawn by `InverseCdfSampler`, last in the processor list, and picked by greedy argmax."""
    import copy

    from transformers import LogitsProcessorList

    config = copy.deepcopy(kwargs.get("generation_config") or model.generation_config)
    rest = config.update(**{k: v for k, v in kwargs.items() if k != "generation_config"})
    plain = (config.do_sample and (config.num_beams or 1) == 1 and (config.num_return_sequences or 1) == 1
             and config.top_k in (None, 0) and (config.top_p is None or config.top_p >= 1.0) and config.min_p is None
             and config.top_h is None and (config.typical_p is None or config.typical_p >= 1.0)
             and not 0.0 < (config.epsilon_cutoff or 0.0) < 1.0 and not 0.0 < (config.eta_cutoff or 0.0) < 1.0
             and config.watermarking_config is None and (config.temperature is None or config.temperature > 0)
             and not (config.return_dict_in_generate or config.output_scores or config.output_logits))
    if not plain:
        return kwargs
    sampler = InverseCdfSampler(config.temperature or 1.0)
    config.do_sample, config.temperature, config.top_k, config.top_p = False, None, None, None
    processors = LogitsProcessorList([*(rest.pop("logits_processor", None) or []), sampler])
    return {**rest, "generation_config": config, "logits_processor": processors}


class InverseCdfSampler:
    """A logits processor that samples: softmax(scores / temperature), one uniform draw per row against the
    cumulative probabilities (float64), and scores of 0 for the drawn token and -inf elsewhere."""

    def __init__(self, temperature: float = 1.0):
        self.temperature = temperature

    def __call__(self, input_ids, scores):
        import torch

        probs = torch.softmax(scores / self.temperature, dim=-1)
        cdf = probs.cumsum(-1, dtype=torch.float64)
        draw = torch.rand(scores.shape[0], 1, dtype=torch.float64, device=scores.device) * cdf[:, -1:]
        tokens = torch.searchsorted(cdf, draw, right=True).clamp_(max=scores.shape[-1] - 1)
        return torch.full_like(scores, float("-inf")).scatter_(1, tokens, 0.0)


_BF16_COPIES = None  # frozen fp32 parameter -> ((data_ptr, version), its bf16 copy); torch's weak tensor-key dict


@contextmanager
def bf16_weights_for_sampling(model):
    """Within the block, `model` samples in bf16: every fp32 parameter is a bf16 copy, restored on exit, and
    a PEFT LoRA model's adapters are merged into the copies of their layers' weights and switched off (one
    product per layer instead of three); for sampling (no gradient) on CPUs with native bf16 matrix products.
    Under bf16 autocast each product casts its fp32 weight again (frozen weights are not in autocast's cache)
    and LoRA's inputs go back and forth between dtypes; in bf16 nothing is cast, and a 16-row decode step
    takes well under the fp32 one (bench/generation_speed.py). Frozen weights are copied once and again only
    when they change; merged and trainable ones at every entry. Tied weights stay tied. Samples come from
    the bf16-rounded policy, as from vLLM's bf16 engine on a GPU."""
    import torch

    copies = _merged_lora_weights(model)  # id(base weight) -> bf16 (W + ΔW); empty when not mergeable
    merged = bool(copies)
    unused = _adapter_modules(model) if merged else set()  # switched off while merged: nothing to copy
    swapped = []
    for module in model.modules():
        if id(module) in unused:
            continue
        for name, param in module._parameters.items():
            if param is None or param.dtype != torch.float32 or param.device.type != "cpu":
                continue
            if id(param) not in copies:  # one copy per tensor, so tied weights stay tied
                copies[id(param)] = _bf16_copy(param)
            swapped.append((module, name, param))
            module._parameters[name] = copies[id(param)]
    try:
        with torch.no_grad(), model.disable_adapter() if merged else nullcontext():
            yield
    finally:
        for module, name, param in swapped:
            module._parameters[name] = param


def _merged_lora_weights(model) -> dict:
    """id(base weight) -> bf16 copy of the weight plus its active LoRA adapters' ΔW, for every LoRA layer of a
    PEFT model with plain LoRA on fp32 nn.Linear (no DoRA, no 4-bit, nothing merged or disabled); {} for
    anything else (its adapters then run as their own bf16 products)."""
    import torch

    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return {}
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    plain = hasattr(model, "disable_adapter") and layers and all(
        isinstance(m.base_layer, torch.nn.Linear) and m.base_layer.weight.dtype == torch.float32  # not 4-bit
        and not m.merged and not m.disable_adapters
        and not any(m.use_dora.get(a, False) for a in m.active_adapters) for m in layers)
    if not plain:
        return {}
    merged = {}
    with torch.no_grad():
        for m in layers:
            weight = m.base_layer.weight
            total = weight.detach().clone()
            for adapter in m.active_adapters:
                if adapter in m.lora_A:
                    total += m.get_delta_weight(adapter)
            merged[id(weight)] = torch.nn.Parameter(total.to(torch.bfloat16), requires_grad=False)
    return merged


def _adapter_modules(model) -> set:
    """ids of the modules that hold a PEFT model's LoRA A and B weights."""
    from peft.tuners.lora import LoraLayer

    return {id(x) for m in model.modules() if isinstance(m, LoraLayer) for d in (m.lora_A, m.lora_B) for x in d.values()}


def _bf16_copy(param):
    """A frozen bf16 copy of `param`: made anew for a trainable one, kept (`_derived_from`) for a frozen one."""
    global _BF16_COPIES
    import torch
    from torch.utils.weak import WeakTensorKeyDictionary

    def to_bf16(tensor):
        return torch.nn.Parameter(tensor.to(torch.bfloat16), requires_grad=False)

    if param.requires_grad:
        return to_bf16(param.detach())
    if _BF16_COPIES is None:
        _BF16_COPIES = WeakTensorKeyDictionary()
    return _derived_from(_BF16_COPIES, param, param, to_bf16)


def _derived_from(cache, owner, tensor, make):
    """`make(tensor.detach())`, kept in `cache[owner]` and made again only when the tensor's storage or
    version changes (an in-place update, a reload)."""
    key = (tensor.data_ptr(), tensor._version)
    cached = cache.get(owner)
    if cached is None or cached[0] != key:
        cached = cache[owner] = (key, make(tensor.detach()))
    return cached[1]


_PACKED_HEADS = weakref.WeakKeyDictionary()  # head module -> ((weight data_ptr, version), packed weight)


@contextmanager
def packed_output_head(model):
    """Within the block, a frozen fp32 output head (lm_head, no bias) on the CPU multiplies fp32 inputs by its
    weight pre-packed for oneDNN, when no gradient is taken and autocast is off (checked per call: accelerate
    may enter autocast inside the model's forward). Each decode step multiplies 16 rows by the whole
    vocabulary's weight (113 MB for SmolLM2); with the plain weight the CPU re-reads it in a poor order,
    pre-packed it is ~2.5x faster (bench/generation_speed.py). Logits differ from plain by float rounding."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not (isinstance(head, torch.nn.Linear) and head.bias is None and weight.dtype == torch.float32
            and weight.device.type == "cpu" and not weight.requires_grad and torch.backends.mkldnn.is_available()):
        yield
        return
    packed = _packed_weight(head)

    def forward(hidden):
        if torch.is_grad_enabled() or torch.is_autocast_enabled("cpu") or hidden.dtype != torch.float32:
            return torch.nn.functional.linear(hidden, weight)
        return torch.ops.mkldnn._linear_pointwise(hidden, packed, None, "none", [], "")

    head.forward = forward
    try:
        yield
    finally:
        del head.forward


def _packed_weight(head):
    """oneDNN's layout of `head.weight` for a 16-row product, packed once and again only when the weight changes."""
    import torch

    return _derived_from(_PACKED_HEADS, head, head.weight, lambda w: torch.ops.mkldnn._reorder_linear_weight(w, 16))
