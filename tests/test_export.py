"""Export: each format written, reloaded and checked against the trained model; refusals leave nothing behind."""

from __future__ import annotations

import json
import shutil
import os

import pytest

from local_grpo import export
from local_grpo.errors import UserError


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_run(trained_tiny_run, tmp_path_factory) -> str:
    """This module's copy of the session's finished tiny run, with an eval_compare.json for the model card."""
    from local_grpo.rundir import RunDir

    target = str(tmp_path_factory.mktemp("export") / "run")
    shutil.copytree(trained_tiny_run, target)
    metrics = {"pass@1_greedy": 0.1, "pass@1_sampled": 0.05, "pass@4": 0.2}
    RunDir(target).write_json("eval_compare.json", {
        "base": metrics, "trained": {**metrics, "pass@1_greedy": 0.3}, "n_prompts": 4, "k": 4, "samples": 8,
        "temperature": 1.0, "seed": 0})
    return target


def leftovers(folder: str) -> list[str]:
    """Temporary folders an export may have left next to its target."""
    return [n for n in os.listdir(folder) if ".partial-" in n or ".old-" in n]


def test_lora_export_loads_with_peft(tiny_run, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    result = export.export_run(tiny_run, "lora", str(out), verify_prompts=2)

    assert result["verification"]["agreement"] == 1.0 and result["verification"]["prompts"] == 2
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(out))
    assert any("lora_A" in name for name, _ in model.named_parameters())
    card = (out / "README.md").read_text()
    for text in ("Base model", "correct_numeric", "GRPO: 4 generations", "Steps: 2", "| pass@1_greedy | 0.100 | 0.300 |",
                 "reward_curve.png", "2 of 2"):
        assert text in card
    assert (out / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert leftovers(str(tmp_path)) == []


def test_merged16_export_loads_with_transformers(tiny_run, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "merged"
    result = export.export_run(tiny_run, "merged16", str(out), verify_prompts=2)

    assert result["quant"] == "f16" and result["verification"]["identical"] == 2
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert next(model.parameters()).dtype == torch.float16
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert AutoTokenizer.from_pretrained(str(out)).chat_template


def test_an_existing_target_is_refused(tiny_run, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="--out: .* already exists"):
        export.export_run(tiny_run, "lora", str(out))
    assert os.listdir(out) == ["keep.txt"]


def test_overwrite_replaces_the_target(tiny_run, tmp_path):
    out = tmp_path / "again"
    out.mkdir()
    (out / "old.txt").write_text("old")
    export.export_run(tiny_run, "lora", str(out), verify_prompts=0, overwrite=True)
    assert "old.txt" not in os.listdir(out) and "adapter_config.json" in os.listdir(out)
    assert leftovers(str(tmp_path)) == []


def test_a_failed_verification_leaves_no_folder(tiny_run, tmp_path, monkeypatch):
    real = export.greedy_ids
    calls = []

    def exported_model_says_something_else(model, tokenizer, prompts, max_new_tokens):
        calls.append(1)
        ids = real(model, tokenizer, prompts, max_new_tokens)
        return ids if len(calls) == 1 else [[t + 1 for t in seq] for seq in ids]

    monkeypatch.setattr(export, "greedy_ids", exported_model_says_something_else)
    out = tmp_path / "merged"
    with pytest.raises(export.VerificationError, match="verification failed.*nothing was written"):
        export.export_run(tiny_run, "merged16", str(out), verify_prompts=2)
    assert not out.exists()
    assert leftovers(str(tmp_path)) == []


@pytest.mark.parametrize("fmt, quant, flag", [("onnx", None, "--format"), ("lora", "q8_0", "--quant"),
                                              ("gguf", "q4_0", "--quant"), ("merged16", "q8_0", "--quant")])
def test_bad_format_or_quant_names_the_flag(tiny_run, tmp_path, fmt, quant, flag):
    with pytest.raises(UserError, match=flag):
        export.export_run(tiny_run, fmt, str(tmp_path / "x"), quant=quant)
    assert not (tmp_path / "x").exists()


def test_cli_json_prints_one_object(tiny_run, tmp_path, capsys):
    from local_grpo.cli import main

    out = tmp_path / "cli"
    assert main(["export", tiny_run, "--format", "lora", "--out", str(out), "--verify-prompts", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["path"] == str(out) and result["verification"]["prompts"] == 1
    assert main(["export", tiny_run, "--format", "lora", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


# --- the embedded SmolLM2 -----------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_run(tmp_path_factory) -> str:
    """A run directory for the embedded SmolLM2 with a small non-zero LoRA adapter built directly with peft."""
    from export_runs import run_config, write_adapter

    from local_grpo import models

    run_dir = tmp_path_factory.mktemp("smollm2") / "run"
    run_config(run_dir, models.resolve("embedded"), heldout=2, max_completion=16, model_name="embedded")
    return write_adapter(run_dir, models.resolve("embedded"), lora_std=0.02, seed=0)


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["lora", "merged16"])
def test_embedded_smollm2_exports_round_trip(smollm2_run, tmp_path, fmt):
    result = export.export_run(smollm2_run, fmt, str(tmp_path / fmt), verify_prompts=2)
    assert result["verification"]["identical"] == 2
    assert os.path.isfile(tmp_path / fmt / "README.md")


# --- the check's rule ---------------------------------------------------------------------

def test_each_format_has_its_rule():
    assert export.verification_rule("lora", None) == "exact"
    assert export.verification_rule("gguf", "f32") == "exact"
    assert export.verification_rule("merged16", "f16") == export.verification_rule("gguf", "bf16") == "horizon"
    assert export.verification_rule("gguf", "q8_0") == export.verification_rule("gguf", "q6_k") == "decisions"
    assert export.verification_rule("gguf", "q4_k_m") == export.verification_rule("gguf", "q5_k_m") == "report"
    assert {export.verification_rule("gguf", quant) for quant in export.GGUF_TYPES} <= set(export.RULES)


def test_16bit_exports_must_agree_on_the_first_tokens_and_the_answer_not_on_every_late_token():
    h = export.VERIFY_HORIZON
    reference = [list(range(100)), list(range(50))]
    late_flip = [list(range(h + 10)) + [999] * (100 - h - 10), list(range(50))]  # differs after the horizon
    same_answers = ["42", "7"]
    report = export.compare_greedy(reference, late_flip, same_answers, same_answers, "horizon")
    assert report["failed"] == [] and report["identical"] == 1 and report["horizon_agreement"] == 1.0
    assert export.compare_greedy(reference, late_flip, same_answers, same_answers, "exact")["failed"] == [0]

    wrong_answer = export.compare_greedy(reference, late_flip, same_answers, ["41", "7"], "horizon")
    assert wrong_answer["failed"] == [0] and wrong_answer["answer_agreement"] == 0.5
    early_flip = [[999] + list(range(1, 100)), list(range(50))]
    assert export.compare_greedy(reference, early_flip, same_answers, same_answers, "horizon")["failed"] == [0]
    assert export.compare_greedy(reference, early_flip, same_answers, ["x", "y"], "report")["failed"] == []


def test_quantized_gguf_must_keep_the_first_token_and_the_next_token_choices():
    """decisions: free-running paths may part early; the first token, and the export's choices given the
    reference's own prefix (teacher forced), must agree."""
    reference = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29]]
    parted = [[5, 6, 99, 98, 97], [20, 21, 22, 23, 24, 25, 26, 27, 28, 29]]  # prompt 0 parts at token 2
    one_flip = [[5, 6, 99, 8, 9, 10, 11, 12, 13, 14], reference[1]]  # 19 of 20 choices kept
    answers = ["1", "2"]
    report = export.compare_greedy(reference, parted, answers, ["3", "2"], "decisions", picks=one_flip)
    assert report["failed"] == [] and report["decision_agreement"] == 0.95 and report["identical"] == 1

    first_differs = [[4] + parted[0][1:], parted[1]]
    assert export.compare_greedy(reference, first_differs, answers, answers, "decisions", picks=one_flip)["failed"] == [0]
    another_model = [[5, 1, 1, 1, 1, 1, 1, 1, 1, 1], reference[1][:7] + [0, 0, 0]]  # 8 of 20 choices
    low = export.compare_greedy(reference, parted, answers, answers, "decisions", picks=another_model)
    assert low["decision_agreement"] == 0.4 and low["failed"] == [0, 1]
    assert export.compare_greedy(reference, parted, answers, answers, "report", picks=another_model)["failed"] == []
