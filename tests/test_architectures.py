"""Every architecture the recipes name trains, evaluates and exports on the CPU, in fp32 and on a 4-bit nf4 base.

Tiny random models of Llama (SmolLM2 and Llama 3.x shapes), Qwen2.5, Qwen3, Gemma 3 (text) and
Phi-4-mini, each from its real transformers config class with the embedded SmolLM2's tokenizer and
the family's own chat template (tests/tiny_model.py).

In the default selection: the tokenizer each folder loads; LoRA on every linear layer whatever the
architecture calls it (Phi-3's fused qkv_proj and gate_up_proj included); the CPU sampling speed-ups
giving plain generation's tokens; one training step and a q8_0 GGUF per family (the GGUF when llama.cpp's
converter is installed, `make gguf`); a 4-bit Qwen3 run exported as merged16.
Marked slow: the whole matrix, architecture x {fp32, nf4} x {train two steps, eval, lora, merged16, gguf q8_0}.
"""

from __future__ import annotations

import json
import os
from contextlib import nullcontext

import pytest

from tiny_model import ARCHITECTURES

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_torch_thread")]  # SmolLM2's tokenizer

FAMILIES = ("llama3", "qwen2", "qwen3", "gemma3", "phi3")  # one of each family in the default selection
QUANTS = ("fp32", "nf4")
STAGES = ("train", "eval", "lora", "merged16", "gguf")



def converter_installed() -> bool:
    try:
        from local_grpo import llamacpp
    except ImportError:  # before GGUF export through llama.cpp's converter
        return False
    folder = os.environ.get(llamacpp.ENV_VAR) or llamacpp.default_converter_dir()
    return os.path.isfile(os.path.join(folder, llamacpp.CONVERTER))


CONVERTER_INSTALLED = converter_installed()
NO_CONVERTER = "llama.cpp's converter is not installed (make gguf)"
needs_converter = pytest.mark.skipif(not CONVERTER_INSTALLED, reason=NO_CONVERTER)


@pytest.fixture(scope="module")
def trained_run(tiny_architecture, tmp_path_factory):
    """`trained_run(arch, quant, steps)`: a run directory of that tiny model trained `steps` steps on an fp32
    or nf4 base, trained on first use and kept for the module."""
    from conftest import make_tiny_config

    from local_grpo import train

    runs: dict[tuple, str] = {}

    def run(arch: str, quant: str, steps: int) -> str:
        key = (arch, quant, steps)
        if key not in runs:
            config = make_tiny_config(tiny_architecture(arch), str(tmp_path_factory.mktemp(f"{arch}-{quant}") / "run"),
                                      steps=steps, save_steps=steps, max_completion_length=8)
            config.model.max_seq_length = 256  # Llama 3's template alone is ~40 tokens
            config.model.load_in_4bit = quant == "nf4"
            train.train(config, progress=False)
            runs[key] = config.output_dir
        return runs[key]

    return run


def check_trained(run_path: str, steps: int, model_dir: str) -> None:
    """`steps` logged steps with finite losses, and an adapter on every linear layer of the decoder blocks."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from local_grpo import rundir

    run = rundir.RunDir(run_path)
    rows = [r for r in run.metrics() if "reward" in r]
    assert len(rows) == steps and all(r["loss"] == r["loss"] for r in rows)
    with open(os.path.join(run.adapter_dir, "adapter_config.json"), encoding="utf-8") as fh:
        adapted = {name.rsplit(".", 1)[-1] for name in json.load(fh)["target_modules"]}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    head = model.get_output_embeddings()
    linear = {name.rsplit(".", 1)[-1] for name, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and m is not head}
    assert adapted == linear


def export(run_path: str, fmt: str, out: str) -> dict:
    from local_grpo import export as export_mod

    # q8_0 is judged on next-token choices: 4 prompts x 8 tokens, so one near-tie flip is not the verdict
    return export_mod.export_run(run_path, fmt, out, quant="q8_0" if fmt == "gguf" else None,
                                 verify_prompts=4 if fmt == "gguf" else 1)


# --- the tokenizer and LoRA's modules ------------------------------------------------------------

@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_each_folder_loads_the_tokenizer_it_was_built_with(tiny_architecture, smollm2_tokenizer_dir, arch):
    from transformers import AutoTokenizer

    from tiny_model import reencodes_like

    folder = tiny_architecture(arch)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    spec = ARCHITECTURES[arch]
    assert tokenizer.eos_token == spec.eos and tokenizer.chat_template
    if arch == "qwen2":  # transformers 5.17 reads any qwen2 folder with Qwen2's own pre-tokenizer
        assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    else:
        assert reencodes_like(folder, smollm2_tokenizer_dir)
    rendered = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "What is 2 + 3?"}],
                                             tokenize=False, add_generation_prompt=True)
    assert "Be brief." in rendered  # Gemma 3's template has no system turn: it opens the first user turn


def test_listed_lora_modules_must_exist_and_all_linear_reaches_fused_ones(tiny_architecture):
    import torch
    from transformers import AutoModelForCausalLM

    from local_grpo import backends
    from local_grpo.config import Config, validate
    from local_grpo.errors import UserError

    model = AutoModelForCausalLM.from_pretrained(tiny_architecture("phi3"), dtype=torch.float32)
    assert backends.lora_target_modules(model, ["all-linear"]) == "all-linear"
    assert backends.lora_target_modules(model, ["qkv_proj", "o_proj"]) == ["qkv_proj", "o_proj"]
    with pytest.raises(UserError, match=r"q_proj, v_proj not in this model; its linear layers are down_proj, "
                                        r"gate_up_proj, o_proj, qkv_proj"):
        backends.lora_target_modules(model, ["q_proj", "v_proj", "o_proj"])
    config = Config()
    assert config.lora.target_modules == ["all-linear"]
    config.lora.target_modules = ["all-linear", "q_proj"]
    with pytest.raises(UserError, match="lora.target_modules"):
        validate(config)


# --- CPU sampling speed-ups on every architecture --------------------------------------------------

@pytest.fixture(scope="module")
def adapted_model(tiny_architecture):
    """`adapted_model(arch, quant)`: (model with a non-zero LoRA on all linear layers, tokenizer), in eval mode."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from local_grpo import backends

    def load(arch: str, quant: str):
        folder = tiny_architecture(arch)
        tokenizer = backends.load_tokenizer(folder)
        extra = {"quantization_config": backends.quantization_config(torch.float32)} if quant == "nf4" else {}
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **extra)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                 init_lora_weights=False))
        return model.eval(), tokenizer

    return load


def repeated_chat_batch(tokenizer, repeats: int = 4):
    """Two chat prompts, each repeated (as GRPO samples them), longer than Gemma 3's tiny sliding window."""
    prompts = [[{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": f"What is {a} + {b}? Think step by step please."}] for a, b in ((12, 35), (7, 8))]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    return tokenizer([t for t in texts for _ in range(repeats)], return_tensors="pt", padding=True,
                     add_special_tokens=False)


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("arch", ("llama3", "qwen3", "gemma3", "phi3"))  # Qwen2 computes as Qwen3 without q/k norm
def test_cpu_sampling_speedups_give_plain_generations_tokens(adapted_model, arch, quant):
    """The shared prefill gives plain generation's tokens (greedy and sampled; Gemma 3's sliding-window cache
    included), the packed output head its logits to rounding (untied Llama 3 head, tied ones), and bf16
    sampling weights the adapted model's logits to bf16 rounding."""
    import torch
    from transformers import GenerationConfig

    from local_grpo import generation

    model, tokenizer = adapted_model(arch, quant)
    batch = repeated_chat_batch(tokenizer)
    if arch == "gemma3":
        assert batch["input_ids"].shape[1] > model.config.sliding_window
    for sample in (False, True):
        gen = GenerationConfig(max_new_tokens=16, do_sample=sample, top_k=0 if sample else None,
                               pad_token_id=tokenizer.pad_token_id)
        outputs = []
        for fast in (False, True):
            torch.manual_seed(7)
            with torch.no_grad(), (generation.cpu_sampling_speedups(model, pack_output_head=False,
                                                                    inverse_cdf_sampling=False)
                                   if fast else nullcontext()):
                outputs.append(model.generate(**batch, generation_config=gen))
        assert torch.equal(outputs[0], outputs[1]), f"sample={sample}"
    assert "generate" not in vars(model)
    with torch.no_grad():
        plain = model(**batch).logits
        with generation.packed_output_head(model):
            assert "forward" in vars(model.get_output_embeddings())
            packed = model(**batch).logits
        assert torch.allclose(packed, plain, rtol=1e-5, atol=1e-5 * plain.abs().max().item())
        if quant == "fp32":
            with generation.bf16_weights_for_sampling(model):
                bf16 = model(**batch).logits
            layers = model.config.get_text_config().num_hidden_layers  # bf16 rounding adds up layer by layer
            assert (bf16.float() - plain).abs().max() < 0.025 * layers * plain.abs().max()


# --- train and export: in the default selection --------------------------------------------------

@pytest.mark.parametrize("arch", FAMILIES)
def test_each_family_trains_one_step(trained_run, tiny_architecture, arch):
    check_trained(trained_run(arch, "fp32", 1), 1, tiny_architecture(arch))


Q8_0_SEEN_FAILING = pytest.mark.xfail(
    strict=False, reason="near-ties of a random model: tiny llama3's and gemma3's top-2 logits are ~0.02 apart "
    "(qwen/phi ~0.4), q8_0 moves them ~0.013, so a few next-token choices flip (llama3 seen at 88% of 8, rule 90%); "
    "f32 agrees with the merged model")


@needs_converter
@pytest.mark.parametrize("arch", ("qwen2", "qwen3", "phi3", pytest.param("llama3", marks=Q8_0_SEEN_FAILING),
                                  pytest.param("gemma3", marks=Q8_0_SEEN_FAILING)))
def test_each_family_exports_a_q8_0_gguf(trained_run, arch, tmp_path):
    result = export(trained_run(arch, "fp32", 1), "gguf", str(tmp_path / "gguf"))
    assert result["file"].endswith("-q8_0.gguf") and os.path.getsize(result["file"]) > 0
    assert result["verification"]["prompts"] == 4


def test_a_gemma3_layer_pattern_llama_cpp_would_not_follow_is_refused():
    from transformers import Gemma3TextConfig, LlamaConfig

    from local_grpo import llamacpp

    assert llamacpp.layer_pattern_problem(Gemma3TextConfig(num_hidden_layers=12)) is None  # Gemma 3's own 5:1
    assert llamacpp.layer_pattern_problem(LlamaConfig(num_hidden_layers=2)) is None
    problem = llamacpp.layer_pattern_problem(
        Gemma3TextConfig(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"]))
    assert "global at [1]" in problem and "every 6th layer global" in problem and "merged16" in problem


@pytest.mark.parametrize("arch", ("phi3", "qwen3"))
def test_only_a_phi3_folder_is_given_the_gpt2_tokenizer_class_llama_cpp_reads(tiny_architecture, arch, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    from local_grpo import llamacpp

    source, folder = tiny_architecture(arch), tmp_path / arch
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)  # as export saves the merged model's
    shutil.copy(os.path.join(source, "config.json"), folder)
    path = folder / "tokenizer_config.json"
    before = json.loads(path.read_text())
    assert before["tokenizer_class"] != "GPT2Tokenizer"  # transformers 5.17 writes TokenizersBackend
    changed = llamacpp.phi3_gpt2_vocabulary(str(folder))
    after = json.loads(path.read_text())
    assert changed == (arch == "phi3")
    assert after == ({**before, "tokenizer_class": "GPT2Tokenizer"} if arch == "phi3" else before)
    assert llamacpp.phi3_gpt2_vocabulary(str(folder)) is False  # once is enough


def test_a_4bit_qwen3_run_exports_merged16(trained_run, tiny_architecture, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    run = trained_run("qwen3", "nf4", 1)
    check_trained(run, 1, tiny_architecture("qwen3"))
    result = export(run, "merged16", str(tmp_path / "merged"))
    assert result["verification"]["identical"] == 1
    merged = AutoModelForCausalLM.from_pretrained(result["path"])
    assert next(merged.parameters()).dtype == torch.float16 and "quantization_config" not in merged.config.to_dict()


# --- the whole matrix: slow ---------------------------------------------------------------------

GGUF_MARKS = {"llama3": [Q8_0_SEEN_FAILING], "gemma3": [Q8_0_SEEN_FAILING]}
MATRIX = [pytest.param(arch, quant, stage, id=f"{arch}-{quant}-{stage}",
                       marks=GGUF_MARKS.get(arch, []) if stage == "gguf" else [])
          for arch in ARCHITECTURES for quant in QUANTS for stage in STAGES]


@pytest.mark.slow
@pytest.mark.parametrize("arch, quant, stage", MATRIX)
def test_matrix(trained_run, tiny_architecture, arch, quant, stage, tmp_path):
    """Each cell: training two steps, eval (base vs trained), or one export format, checked by reloading it."""
    run = trained_run(arch, quant, 2)
    if stage == "train":
        check_trained(run, 2, tiny_architecture(arch))
    elif stage == "eval":
        from local_grpo import evaluate, rundir
        from local_grpo.config import load as load_config

        config = load_config(rundir.RunDir(run).file(rundir.CONFIG))
        settings = evaluate.EvalSettings(n=2, samples=2, k=1, max_new_tokens=8)
        result = evaluate.run_eval(config, rundir.RunDir(run).adapter_dir, settings, compare=True, progress=False)
        assert result["n_prompts"] == 2 and {"base", "trained"} <= set(result)
        assert all(0 <= result[m]["pass@1_greedy"] <= 1 for m in ("base", "trained"))
    elif stage == "gguf":
        if not CONVERTER_INSTALLED:
            pytest.skip(NO_CONVERTER)
        result = export(run, "gguf", str(tmp_path / "gguf"))
        assert result["file"].endswith("-q8_0.gguf")
    else:
        result = export(run, stage, str(tmp_path / stage))
        assert result["verification"]["agreement"] == 1.0
