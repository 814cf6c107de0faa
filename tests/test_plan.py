"""The memory planner: shapes, the model's monotonic behaviour, known magnitudes, suggestions, CLI, presets."""

from __future__ import annotations

import argparse
import json

import pytest

from local_grpo import plan
from local_grpo.cli import plan as plan_cli
from local_grpo.config import Config
from local_grpo.errors import UserError
from local_grpo.presets import PRESETS, apply_preset


def config_for(model="Qwen/Qwen3-4B", backend="hf", **grpo) -> Config:
    config = Config()
    config.model.name = model
    config.model.load_in_4bit = True
    config.model.max_seq_length = 256 + grpo.get("max_completion_length", 512)
    config.backend = backend
    config.grpo.max_completion_length = 512
    config.grpo.num_generations = 8
    config.grpo.per_device_train_batch_size = 8
    config.grpo.gradient_checkpointing = True
    for key, value in grpo.items():
        setattr(config.grpo, key, value)
    return config


def total(config, **kw) -> float:
    return plan.estimate(config, **kw)["total_gb"]


# --- shapes ---

def test_shape_from_a_local_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": True}))
    shape = plan.model_shape(str(tmp_path))
    assert (shape.hidden_size, shape.num_layers, shape.num_kv_heads, shape.head_dim) == (256, 4, 2, 32)
    assert shape.params == 4 * (256 * 256 * 2 + 2 * 256 * 64 + 3 * 256 * 512) + 1000 * 256 + 9 * 256


def test_shape_from_the_table_matches_published_sizes():
    assert plan.model_shape("Qwen/Qwen3-4B").params == pytest.approx(4.02e9, rel=0.01)
    assert plan.model_shape("meta-llama/Llama-3.1-8B-Instruct").params == pytest.approx(8.03e9, rel=0.01)
    assert plan.model_shape("unsloth/Qwen2.5-7B-Instruct-bnb-4bit").params == pytest.approx(7.62e9, rel=0.01)
    assert plan.model_shape("embedded").hidden_size == 576


def test_unknown_hub_model_names_the_flag():
    with pytest.raises(UserError, match="--model"):
        plan.model_shape("someone/unknown-model")
    with pytest.raises(UserError, match="config.json"):
        plan.model_shape("/")


QWEN3_4B_2507 = {"model_type": "qwen3", "hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936,
                 "tie_word_embeddings": True}


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache; `add(repo_id, config)` puts a snapshot's config.json in it."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def add(repo_id, config):
        repo = tmp_path / "hub" / ("models--" + repo_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("abc123")
        (repo / "snapshots" / "abc123").mkdir(parents=True)
        (repo / "snapshots" / "abc123" / "config.json").write_text(json.dumps(config))
    return add


def test_a_hub_model_outside_the_table_is_read_from_the_hf_cache(hub_cache):
    hub_cache("Qwen/Qwen3-4B-Instruct-2507", QWEN3_4B_2507)
    shape = plan.model_shape("Qwen/Qwen3-4B-Instruct-2507")
    assert shape.params == pytest.approx(4.02e9, rel=0.01) and shape.source.endswith("config.json")


@pytest.mark.parametrize("force", [False, True])
def test_train_preflight_skips_an_unknown_shape_with_one_warning(hub_cache, capsys, force):
    config = config_for("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    assert plan.preflight(config, force=force, vram_gb=8) is None  # train goes on without a plan
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("local-grpo: warning: memory plan skipped")
    assert "DeepSeek-R1-Distill-Qwen-1.5B" in err[0]
    hub_cache("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", {**QWEN3_4B_2507, "hidden_size": 1536, "num_hidden_layers": 28,
                                                            "num_attention_heads": 12, "num_key_value_heads": 2,
                                                            "intermediate_size": 8960, "head_dim": 128})
    assert plan.preflight(config, force=force, vram_gb=8)["fits"] is True  # in the cache: planned


def test_vllm_pool_is_planned_and_shown():
    base = plan.estimate(config_for(), vram_gb=16)
    colocate = config_for(use_vllm=True)
    colocate.grpo.vllm_gpu_memory_utilization = 0.3
    with_vllm = plan.estimate(colocate, vram_gb=16)
    assert with_vllm["breakdown"]["vllm_gb"] == pytest.approx(0.3 * 16, abs=0.01)  # TRL colocate: a pool of its own
    assert with_vllm["total_gb"] >= base["total_gb"] + 0.3 * 16
    assert "gpu_memory_utilization 0.3 of a 16 GB card" in with_vllm["breakdown"]["assumptions"]["vllm"]
    unsloth = config_for(backend="unsloth", use_vllm=True)
    unsloth.grpo.vllm_gpu_memory_utilization = 0.3
    shared = plan.estimate(unsloth, vram_gb=16)["breakdown"]  # fast_inference shares the weights with vLLM
    assert shared["vllm_gb"] == pytest.approx(0.3 * 16 - shared["weights_gb"], abs=0.01)
    server = config_for(use_vllm=True, vllm_mode="server")
    assert plan.estimate(server, vram_gb=16)["breakdown"]["vllm_gb"] == 0
    assert "vllm" in plan_cli.format_table(with_vllm)


# --- the model ---

def test_more_generations_longer_completions_bigger_rank_cost_more():
    base = total(config_for())
    assert total(config_for(per_device_train_batch_size=16, num_generations=16)) > base
    assert total(config_for(max_completion_length=1024)) > base
    bigger_rank = config_for()
    bigger_rank.lora.r = 64
    assert total(bigger_rank) > base


def test_four_bit_weights_are_smaller_and_checkpointing_cuts_activations():
    four, sixteen = config_for(), config_for()
    sixteen.model.load_in_4bit = False
    assert plan.estimate(four)["breakdown"]["weights_gb"] < plan.estimate(sixteen)["breakdown"]["weights_gb"] / 2
    on, off = config_for(), config_for(gradient_checkpointing=False)
    assert plan.estimate(on)["breakdown"]["activations_gb"] < plan.estimate(off)["breakdown"]["activations_gb"] / 3


def test_known_magnitudes():
    # 7-8B: nf4 linears + 16-bit untied embeddings (the bnb-4bit checkpoints on the hub are ~5.5 GB).
    for name in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"):
        four_bit = plan.estimate(config_for(name, backend="unsloth"))["breakdown"]["weights_gb"]
        assert 4.5 < four_bit < 5.6, (name, four_bit)
        sixteen = config_for(name)
        sixteen.model.load_in_4bit = False
        assert 14.0 < plan.estimate(sixteen)["breakdown"]["weights_gb"] < 15.2
    # the HF backend keeps embeddings/lm_head 16-bit too (no prepare_model_for_kbit_training upcast)
    assert plan.estimate(config_for("meta-llama/Llama-3.1-8B-Instruct"))["breakdown"]["weights_gb"] < 5.6


def test_reference_costs_no_weights_with_lora_and_total_is_the_peak_phase():
    with_kl = plan.estimate(config_for(beta=0.04))
    b = with_kl["breakdown"]
    assert b["reference_gb"] > 0 and "no extra weights" in b["assumptions"]["reference"]
    parts = sum(v for k, v in b.items() if k.endswith("_gb"))
    assert with_kl["total_gb"] <= parts + 0.01


def test_json_shape():
    result = plan.estimate(config_for(), vram_gb=8)
    assert set(result) == {"fits", "total_gb", "vram_gb", "breakdown", "suggestion"}
    assert {"weights_gb", "lora_gb", "optimizer_gb", "activations_gb", "logits_gb", "kv_cache_gb",
            "reference_gb"} <= set(result["breakdown"])
    assert result["vram_gb"] == 8 and isinstance(result["fits"], bool)


# --- suggestion ---

@pytest.mark.parametrize("vram", [8, 12, 16])
def test_suggestion_fits_its_vram(vram):
    config = config_for("meta-llama/Llama-3.1-8B-Instruct", max_completion_length=2048,
                        gradient_checkpointing=False)
    config.model.max_seq_length = 2304
    result = plan.estimate(config, vram_gb=vram)
    assert not result["fits"]
    s = result["suggestion"]
    if s["fits"]:
        assert s["total_gb"] <= vram
        check = config_for("meta-llama/Llama-3.1-8B-Instruct")
        from local_grpo.config import apply_overrides

        apply_overrides(check, s["overrides"])
        assert plan.estimate(check, vram_gb=vram)["fits"]
    else:
        assert vram == 8  # HF backend: 8B weights alone (fp32 embeddings) take ~7.3 GB


def test_a_config_that_fits_gets_no_suggestion():
    assert plan.estimate(config_for("Qwen/Qwen2.5-0.5B-Instruct"), vram_gb=24)["suggestion"] is None


def test_preflight_refuses_clear_misfits_unless_forced():
    big = config_for("meta-llama/Llama-3.1-8B-Instruct", gradient_checkpointing=False, max_completion_length=2048)
    big.model.max_seq_length = 2304
    with pytest.raises(UserError, match="--force.*GB GPU.*try:"):
        plan.preflight(big, vram_gb=12)
    assert plan.preflight(big, force=True, vram_gb=12)["fits"] is False


def test_preflight_without_a_gpu_only_plans(monkeypatch):
    monkeypatch.setattr(plan.before_train, "detect_vram_gb", lambda: None)
    assert plan.preflight(config_for())["note"] == "no GPU: plan only"


# --- CLI ---

def run_cli(argv, capsys):
    parser = argparse.ArgumentParser()
    plan_cli.register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["plan", *argv])
    code = args.func(args)
    return code, capsys.readouterr().out


def test_cli_json_prints_one_object(capsys):
    code, out = run_cli(["--model", "Qwen/Qwen3-4B", "--load-in-4bit", "--num-generations", "8",
                         "--max-seq-length", "1280", "--max-completion-length", "1024", "--lora-r", "32",
                         "--per-device-train-batch-size", "8", "--beta", "0.04", "--gradient-checkpointing",
                         "--vram", "8", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and set(result) == {"fits", "total_gb", "vram_gb", "breakdown", "suggestion", "assumed_defaults",
                                         "prompts"}
    assert result["prompts"]["measured"] is False and result["prompts"]["budget"] == 1280 - 1024  # no local tokenizer
    assert result["breakdown"]["assumptions"]["completion_tokens"] == 1024
    assert result["breakdown"]["reference_gb"] > 0
    assert result["assumed_defaults"]["values"] == {"gradient-accumulation-steps": 1}  # the one flag not given


README_QUESTION = ["--model", "Qwen/Qwen3-4B", "--load-in-4bit", "--num-generations", "8", "--max-completion-length", "512"]


def preset_table_range(model="Qwen/Qwen3-4B") -> tuple[float, float]:
    """Lowest and highest planned peak of the README's preset table (every preset, both backends) for a model."""
    totals = [total(apply_preset(name, {"model": {"name": model}, "backend": backend}))
              for name in plan.PRESET_TARGETS for backend in ("hf", "unsloth")]
    return min(totals), max(totals)


@pytest.mark.parametrize("backend", ["hf", "unsloth"])
def test_gpu_question_without_a_preset_is_planned_with_gpu_defaults(backend, capsys):
    code, out = run_cli([*README_QUESTION, "--backend", backend, "--json"], capsys)
    result = json.loads(out)
    assumed = result["assumed_defaults"]
    assert code == 0 and assumed["preset"] == "24gb"  # no --vram: the card `fits` answers for
    assert assumed["values"] == {"gradient-checkpointing": True, "max-seq-length": 768,
                                 "per-device-train-batch-size": 8, "gradient-accumulation-steps": 1}
    a = result["breakdown"]["assumptions"]
    assert (a["prompt_tokens"], a["completion_tokens"], a["micro_batch"], a["gradient_checkpointing"]) == (256, 512, 8, True)
    low, high = preset_table_range()
    assert low <= result["total_gb"] <= high, (low, result["total_gb"], high)


def test_gpu_defaults_follow_the_card_and_never_override_a_given_flag(capsys):
    code, out = run_cli([*README_QUESTION, "--vram", "8", "--json"], capsys)
    assumed = json.loads(out)["assumed_defaults"]
    assert assumed["preset"] == "8gb"
    assert (assumed["values"]["per-device-train-batch-size"], assumed["values"]["gradient-accumulation-steps"]) == (4, 2)
    code, out = run_cli([*README_QUESTION, "--max-seq-length", "2048", "--no-gradient-checkpointing",
                         "--per-device-train-batch-size", "16", "--json"], capsys)
    result = json.loads(out)
    assert set(result["assumed_defaults"]["values"]) == {"gradient-accumulation-steps"}
    a = result["breakdown"]["assumptions"]
    assert (a["prompt_tokens"], a["micro_batch"], a["gradient_checkpointing"]) == (1536, 16, False)
    # what it planned before: every activation of 16 x 2048 tokens over 36 layers kept for backward
    assert result["breakdown"]["activations_gb"] > 200


def test_gpu_defaults_are_said_in_the_table_and_absent_for_cpu_questions(capsys):
    code, out = run_cli(README_QUESTION, capsys)
    assert code == 0 and "  assumed: --gradient-checkpointing --max-seq-length 768" in out and "preset 24gb" in out
    for argv in ([], ["--preset", "8gb", *README_QUESTION]):  # the embedded model on CPU defaults; an explicit preset
        code, out = run_cli([*argv, "--json"], capsys)
        assert code == 0 and json.loads(out)["assumed_defaults"] is None
    code, out = run_cli([], capsys)
    assert "assumed:" not in out and "micro-batch 16" in out


def test_cli_table_and_config_file(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("model: {name: Qwen/Qwen2.5-1.5B-Instruct}\npreset: 6gb\n")
    code, out = run_cli(["--config", str(path), "--vram", "6"], capsys)
    assert code == 0 and "weights" in out and "fits in 6 GB" in out


def test_cli_bad_input_is_a_user_error(capsys):
    with pytest.raises(UserError, match="--model"):
        run_cli(["--model", "nobody/nothing"], capsys)
    with pytest.raises(UserError, match="--vram"):
        run_cli(["--vram", "-1"], capsys)


# --- presets ---

@pytest.mark.parametrize("name", list(plan.PRESET_TARGETS))
def test_each_preset_fits_its_documented_sizes(name):
    vram, classes, _ = plan.PRESET_TARGETS[name]
    assert PRESETS[name] == plan.derive_preset(name)
    for size in classes:
        for backend in ("hf", "unsloth"):
            data = apply_preset(name, {"model": {"name": plan.SIZE_CLASSES[size]}, "backend": backend})
            result = plan.estimate(data, vram_gb=vram)
            assert result["fits"] and result["total_gb"] <= vram * plan.PRESET_HEADROOM, (name, size, backend)
