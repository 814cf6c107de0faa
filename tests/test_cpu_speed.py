"""CPU speed paths: the bf16 autocast decision (doctor, config, GRPOConfig) and the faster sampling: a
shared prefill (the same tokens as plain generation), the inverse-CDF sampler (the model's distribution)
and the pre-packed output head (the same logits to rounding)."""

from __future__ import annotations

import pytest

from local_grpo import backends
from local_grpo.config import Config, validate
from local_grpo.errors import UserError

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def test_cpu_bf16_flags_are_read_from_cpuinfo():
    assert backends.cpu_bf16_flags(AVX2_ONLY) == []
    assert backends.cpu_bf16_flags(SAPPHIRE) == ["avx512_bf16", "amx_bf16"]
    assert backends.cpu_bf16_flags("") == []


@pytest.mark.parametrize("mode, cpuinfo, on_cuda, expected", [
    ("auto", SAPPHIRE, False, "bfloat16"),
    ("auto", AVX2_ONLY, False, None),  # emulated bf16 is slower than fp32
    ("off", SAPPHIRE, False, None),  # the config forces fp32
    ("bf16", AVX2_ONLY, False, "bfloat16"),  # ... or bf16
    ("auto", SAPPHIRE, True, None),  # on a GPU model.dtype decides
])
def test_cpu_autocast_decision(mode, cpuinfo, on_cuda, expected):
    config = Config()
    config.model.cpu_autocast = mode
    assert backends.cpu_autocast_dtype(config, on_cuda, cpuinfo) == expected


def test_cpu_autocast_is_validated():
    config = Config()
    config.model.cpu_autocast = "fp8"
    with pytest.raises(UserError, match="model.cpu_autocast"):
        validate(config)


def test_forced_bf16_reaches_trls_config_as_cpu_autocast(tmp_path):
    from local_grpo.train import trainer

    config = Config()
    config.model.cpu_autocast = "bf16"
    args = trainer.grpo_args(config, str(tmp_path), on_cuda=False, backend="hf")
    assert args.use_cpu and args.bf16  # accelerate then runs the CPU forward under torch.autocast(bfloat16)
    config.model.cpu_autocast = "off"
    assert not trainer.grpo_args(config, str(tmp_path), on_cuda=False, backend="hf").bf16


def test_doctor_says_what_it_found_and_chose(capsys):
    from local_grpo.cli.main import cpu_autocast_line, main

    assert "stays fp32" in cpu_autocast_line([]) and "bf16 autocast" in cpu_autocast_line(["amx_bf16"])
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "CPU bf16:" in out


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = backends.prepare_tokenizer(AutoTokenizer.from_pretrained(tiny_model_dir))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))  # a non-zero adapter
    model.eval()
    return model, tokenizer


def _repeated_batch(tokenizer, repeats=4):
    texts = ["user: What is 12 + 35?\nassistant: ", "user: What is 7 + 8? Answer briefly.\nassistant: "]
    return tokenizer([t for t in texts for _ in range(repeats)], return_tensors="pt", padding=True)


@pytest.mark.parametrize("sample", [False, True])
def test_fast_cpu_sampling_gives_the_same_tokens(tiny_lm, sample, one_torch_thread):
    import torch
    from transformers import GenerationConfig

    from local_grpo.generation import cpu_sampling_speedups

    model, tokenizer = tiny_lm
    batch = _repeated_batch(tokenizer)
    gen = GenerationConfig(max_new_tokens=12, do_sample=sample, top_k=0 if sample else None,
                           pad_token_id=tokenizer.pad_token_id)
    outputs = []
    for fast in (False, True):
        torch.manual_seed(7)
        with torch.no_grad():
            if fast:
                # the shared prefill alone; the packed head and the inverse-CDF sampler: tests below
                with cpu_sampling_speedups(model, pack_output_head=False, inverse_cdf_sampling=False):
                    outputs.append(model.generate(**batch, generation_config=gen))
            else:
                outputs.append(model.generate(**batch, generation_config=gen))
    assert torch.equal(outputs[0], outputs[1])
    assert "generate" not in vars(model)  # restored


def test_the_packed_output_head_gives_the_same_logits_to_rounding_and_is_removed(tiny_lm, one_torch_thread):
    import torch

    from local_grpo import generation

    model, tokenizer = tiny_lm
    batch = _repeated_batch(tokenizer)
    head = model.get_output_embeddings()
    assert not head.weight.requires_grad  # frozen under LoRA: the case the packed copy is for
    with torch.no_grad():
        plain = model(**batch).logits
        with generation.packed_output_head(model):
            assert "forward" in vars(head)
            packed = model(**batch).logits
            again = generation._packed_weight(head)
        assert "forward" not in vars(head)  # restored
        assert torch.allclose(packed, plain, rtol=1e-5, atol=1e-5 * plain.abs().max().item())
        assert generation._packed_weight(head) is again  # packed once
        head.weight.mul_(1.0)  # an in-place change bumps the version: packed again
        assert generation._packed_weight(head) is not again
    with generation.packed_output_head(model), torch.enable_grad():
        hidden = torch.randn(2, head.in_features, requires_grad=True)
        head(hidden).sum().backward()  # a gradient through the head takes the plain product
    assert hidden.grad is not None
    with generation.packed_output_head(model), torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):  # entered inside the block, as in a wrapped forward
            hidden = torch.randn(2, head.in_features)
            assert torch.equal(head(hidden), torch.nn.functional.linear(hidden, head.weight))
            assert head(hidden.bfloat16()).dtype == torch.bfloat16  # the plain product, not oneDNN's fp32 one


def test_bf16_weights_for_sampling_swap_every_weight_and_restore_them(tiny_lm, one_torch_thread):
    import torch

    from local_grpo import generation

    model, tokenizer = tiny_lm
    batch = _repeated_batch(tokenizer)
    before = {name: p for name, p in model.named_parameters()}
    lora_a = next(p for name, p in before.items() if "lora_A" in name)
    frozen = model.get_input_embeddings().weight
    with torch.no_grad():
        plain = model(**batch).logits
        lora_layer = next(m for m in model.modules() if hasattr(m, "lora_A") and m.lora_A)
        with generation.bf16_weights_for_sampling(model):
            dtypes = {"lora_" in name: set() for name in before}
            for name, p in model.named_parameters():
                dtypes["lora_" in name].add(p.dtype)
            assert dtypes == {False: {torch.bfloat16}, True: {torch.float32}}  # adapters switched off: not copied
            assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # still tied
            assert lora_layer.disable_adapters  # merged into the bf16 copy of its base weight instead
            inside = model(**batch).logits
            first_copy = model.get_input_embeddings().weight
        assert dict(model.named_parameters()) == before  # the same fp32 tensors are back
        assert {p.dtype for p in model.parameters()} == {torch.float32} and not lora_layer.disable_adapters
        without_lora = model.get_base_model()
        with generation.bf16_weights_for_sampling(without_lora):  # LoRA kept as its own bf16 products
            assert not lora_layer.disable_adapters
            unmerged = without_lora(**batch).logits
        with model.disable_adapter():
            base = model(**batch).logits
        scale = plain.abs().max()
        for logits in (inside, unmerged):  # bf16 rounding of the adapted model, not the base model
            assert (logits.float() - plain).abs().max() < 0.05 * scale
        assert (base - plain).abs().max() > 0.2 * scale  # the adapter (init_lora_weights=False) matters
        lora_a.add_(1.0)  # a trainable weight changes between steps: copied anew, and merged anew
        with generation.bf16_weights_for_sampling(without_lora):
            current = next(p for name, p in without_lora.named_parameters() if "lora_A" in name)
            assert torch.equal(current, lora_a.bfloat16())
        changed = next(m for m in model.modules() if hasattr(m, "lora_A") and lora_a is m.lora_A["default"].weight)
        weight = changed.base_layer.weight
        with generation.bf16_weights_for_sampling(model):
            assert model.get_input_embeddings().weight is first_copy  # a frozen one is copied once
            expected = (weight + changed.get_delta_weight("default")).bfloat16()
            assert torch.equal(changed.base_layer.weight, expected)
        lora_a.sub_(1.0)
        frozen.mul_(1.0)  # an in-place change of a frozen weight: copied again
        with generation.bf16_weights_for_sampling(model):
            assert model.get_input_embeddings().weight is not first_copy


def test_inverse_cdf_sampler_draws_from_the_softmax():
    import torch

    from local_grpo.generation import InverseCdfSampler

    torch.manual_seed(0)
    logits = torch.randn(1, 50) * 2
    logits[0, 3] = float("-inf")  # e.g. EOS suppressed by min_new_tokens
    draws = 100_000
    scores = InverseCdfSampler(temperature=0.7)(None, logits.expand(draws, 50).contiguous())
    assert torch.isinf(scores).sum(-1).eq(49).all()  # one token per row kept, at 0
    frequency = torch.bincount(scores.argmax(-1), minlength=50).double() / draws
    expected = torch.softmax(logits[0] / 0.7, -1).double()
    assert frequency[3] == 0
    chi2 = (((frequency - expected) ** 2 / expected.clamp_min(1e-12)) * draws)[expected > 0].sum().item()
    assert chi2 < 90  # 48 degrees of freedom: p < 0.001 above 85


def test_inverse_cdf_is_used_for_plain_sampling_only(tiny_lm):
    from transformers import GenerationConfig

    from local_grpo.generation import InverseCdfSampler, inverse_cdf_kwargs

    model, _ = tiny_lm
    plain = inverse_cdf_kwargs(model, {"generation_config": GenerationConfig(do_sample=True, temperature=0.9, top_k=0),
                                       "disable_compile": True, "max_new_tokens": 5})
    config = plain["generation_config"]
    assert not config.do_sample and config.max_new_tokens == 5 and config.disable_compile
    assert isinstance(plain["logits_processor"][-1], InverseCdfSampler) and plain["logits_processor"][-1].temperature == 0.9
    for other in (dict(do_sample=True, top_k=50), dict(do_sample=True, top_k=0, top_p=0.9),
                  dict(do_sample=True, top_k=0, min_p=0.1), dict(do_sample=False)):
        kwargs = {"generation_config": GenerationConfig(**other)}
        assert inverse_cdf_kwargs(model, kwargs) is kwargs


def test_fast_sampling_draws_the_first_token_from_the_models_distribution(tiny_lm, one_torch_thread):
    import torch
    from transformers import GenerationConfig

    from local_grpo.generation import cpu_sampling_speedups

    model, tokenizer = tiny_lm
    rows = 2048
    batch = tokenizer(["user: What is 12 + 35?\nassistant: "] * rows, return_tensors="pt")
    gen = GenerationConfig(max_new_tokens=1, do_sample=True, temperature=0.3, top_k=0, pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        expected = torch.softmax(model(**{k: v[:1] for k, v in batch.items()}).logits[0, -1] / 0.3, -1).double()
        torch.manual_seed(3)
        with cpu_sampling_speedups(model):
            first = model.generate(**batch, generation_config=gen)[:, -1]
            torch.manual_seed(3)
            again = model.generate(**batch, generation_config=gen)[:, -1]
    assert torch.equal(first, again)  # seeded by torch's generator, like multinomial
    frequency = torch.bincount(first, minlength=expected.numel()).double() / rows
    likely = expected > 5 / rows  # bins expected to hold 5 draws or more; the rest pooled
    assert abs(frequency[~likely].sum() - expected[~likely].sum()) < 0.03  # a temperature off by 20 % misses this
    chi2 = (((frequency - expected) ** 2 / expected) * rows)[likely].sum().item()
    assert chi2 < likely.sum().item() + 4 * (2 * likely.sum().item()) ** 0.5


def test_repeat_count_finds_the_groups_or_gives_one(tiny_lm):
    from local_grpo.generation import repeat_count

    _, tokenizer = tiny_lm
    batch = _repeated_batch(tokenizer, repeats=4)
    assert repeat_count(batch["input_ids"], batch["attention_mask"]) == 4
    mixed = _repeated_batch(tokenizer, repeats=1)
    assert repeat_count(mixed["input_ids"], mixed["attention_mask"]) == 1


def test_a_bf16_autocast_run_trains_and_keeps_lora_and_optimizer_fp32(tiny_config, one_torch_thread):
    import torch

    from local_grpo import rundir, train
    from local_grpo.train import trainer as trainer_mod

    seen = {}
    original = trainer_mod.LocalGRPOHooks._compute_loss

    def record(module, args):
        if torch.is_grad_enabled():  # the loss forward, not generation
            seen["autocast"] = torch.is_autocast_enabled("cpu")
        else:  # sampling (step 2's): with bf16 weights
            seen["sampling_dtype"] = module.weight.dtype

    def spy(self, model, inputs):
        if not seen:
            seen["lora_dtypes"] = {p.dtype for p in model.parameters() if p.requires_grad}
            layer = next(m for name, m in model.named_modules() if name.endswith("q_proj.base_layer"))
            layer.register_forward_pre_hook(record)
            lora_layer = next(m for name, m in model.named_modules() if name.endswith("q_proj"))
            lora_layer.register_forward_pre_hook(
                lambda m, a: None if torch.is_grad_enabled() else seen.__setitem__("merged", m.disable_adapters))
        return original(self, model, inputs)

    tiny_config.model.cpu_autocast = "bf16"
    trainer_mod.LocalGRPOHooks._compute_loss = spy
    try:
        train.train(tiny_config, progress=False)
    finally:
        trainer_mod.LocalGRPOHooks._compute_loss = original
    assert seen["autocast"] is True  # the policy forward of the loss ran under CPU bf16 autocast
    assert seen["lora_dtypes"] == {torch.float32}
    assert seen["sampling_dtype"] == torch.bfloat16  # generation.bf16_weights_for_sampling ...
    assert seen["merged"] is True  # ... with the adapter merged into the bf16 copy, its own products off
    rows = [r for r in rundir.RunDir(tiny_config.output_dir).metrics() if "reward" in r]
    assert len(rows) == 2 and all(r["loss"] == r["loss"] for r in rows)  # finite losses
