"""Best checkpoint and early stop on held-out success (grpo.eval_steps, grpo.early_stop_evals): the rule on a
synthetic sequence, the reward-hacking alert on synthetic metrics, and a real tiny run that names its best
checkpoint in summary.json, stops early, and whose best adapter eval and export take by default."""

from __future__ import annotations

import filecmp
import json
import os

import pytest

from local_grpo import cli, export, rundir
from local_grpo.errors import UserError
from local_grpo.train import diagnostics
from local_grpo.train.held_out_eval import BestCheckpoint, BestSoFar

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- the rule ---------------------------------------------------------------------------------

def first_stop(results: list[float], patience: int) -> int | None:
    """The eval number (1-based) after which the early stop fires, or None."""
    state = BestSoFar()
    for number, success in enumerate(results, start=1):
        state = state.after(number * 10, success)
        if state.stale(patience):
            return number
    return None


def test_the_best_is_the_first_strictly_highest_result():
    state = BestSoFar()
    for step, success in ((10, 0.25), (20, 0.5), (30, 0.5), (40, 0.375)):
        state = state.after(step, success)
    assert (state.step, state.success, state.evals_since) == (20, 0.5, 2)  # the tie at step 30 is no improvement


@pytest.mark.parametrize("results, patience, stop", [
    ([0.2, 0.5, 0.5, 0.4, 0.6], 2, 4),  # 0.5 then two evals without beating it
    ([0.2, 0.5, 0.5, 0.6, 0.6, 0.3], 3, None),  # the 0.6 restarts the count
    ([0.2, 0.5, 0.5, 0.6, 0.6, 0.3, 0.6], 3, 7),
    ([0.0, 0.0, 0.0, 0.0], 1, 2),
    ([0.9, 0.1, 0.1, 0.1], 0, None),  # 0 = off
])
def test_early_stop_fires_after_patience_evals_without_improvement(results, patience, stop):
    assert first_stop(results, patience) == stop


def test_best_checkpoint_keeps_the_best_adapter_and_resumes_from_best_json(tiny_model_dir, tiny_config, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, lora_alpha=4, target_modules="all-linear"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    run = rundir.RunDir.create(str(tmp_path / "run"))
    tiny_config.grpo.eval_steps, tiny_config.grpo.early_stop_evals = 1, 2
    best = BestCheckpoint(run, model, tokenizer, tiny_config)
    for step, success in ((1, 0.25), (2, 0.5)):
        best.observe(step, success, prompts=4)
    first = os.stat(run.file(rundir.BEST_ADAPTER)).st_ino
    assert run.best() == {"step": 2, "held_out_success": 0.5, "prompts": 4, "adapter": rundir.BEST_ADAPTER}
    best.observe(3, 0.5, prompts=4)  # a tie: nothing rewritten
    assert os.stat(run.file(rundir.BEST_ADAPTER)).st_ino == first and best.stop_reason() is None
    best.observe(4, 0.25, prompts=4)
    assert "has not improved for 2 evals" in best.stop_reason() and "0.500 at step 2" in best.stop_reason()
    assert sorted(os.listdir(run.path)) == sorted([rundir.BEST_ADAPTER, rundir.BEST])  # no partial folders left

    run.append(rundir.METRICS, {"step": 3, "reward": 0.1, "eval/pass@1": 0.5})  # --resume after step 3
    again = BestCheckpoint(run, model, tokenizer, tiny_config)
    assert (again.state.step, again.state.success, again.state.evals_since) == (2, 0.5, 1)


# --- the reward-hacking alert ------------------------------------------------------------------------

def rows(rewards: list[float], evals: dict[int, float]) -> list[dict]:
    return [{"step": i + 1, "reward": r, "success": 0.5, **({"eval/pass@1": evals[i + 1]} if i + 1 in evals else {})}
            for i, r in enumerate(rewards)]


def test_reward_rising_while_held_out_success_falls_is_an_alert():
    rising = [0.2 + 0.05 * i for i in range(12)]
    found = diagnostics.held_out_falling(rows(rising, {4: 0.5, 8: 0.625, 12: 0.375}))
    assert found["kind"] == "held_out_falling" and found["level"] == "alert" and found["step"] == 12
    assert "held-out success fell from 0.625 (step 8) to 0.375 (step 12)" in found["message"]
    found = diagnostics.findings(rows(rising, {4: 0.5, 8: 0.625, 12: 0.375}))
    assert any(f["kind"] == "held_out_falling" for f in found)
    assert "held_out_falling" in rundir.SIGNAL_KINDS  # counted as a learning-signal alert, not a reward fault


@pytest.mark.parametrize("rewards, evals", [
    ([0.2 + 0.05 * i for i in range(12)], {4: 0.5, 8: 0.625, 12: 0.5625}),  # fell by less than HELD_OUT_DROP
    ([0.5] * 12, {4: 0.5, 8: 0.625, 12: 0.375}),  # reward flat: over-fitting or noise, not hacking
    ([0.2 + 0.05 * i for i in range(12)], {4: 0.5, 8: 0.625, 12: 0.75}),  # held-out success still rising
    ([0.2 + 0.05 * i for i in range(12)], {12: 0.0}),  # one eval
])
def test_no_alert_without_both_signs(rewards, evals):
    assert diagnostics.held_out_falling(rows(rewards, evals)) is None


# --- a real run -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def early_stopped_run(tiny_model_dir, tmp_path_factory) -> tuple[str, dict]:
    """The random tiny model (held-out success 0 at every eval), eval every step, early stop after 2 evals
    without improvement: the best is step 1 and training stops after step 3 of 6."""
    out = str(tmp_path_factory.mktemp("best") / "run")
    code = cli.main(["train", "--model", tiny_model_dir, "--backend", "hf", "--task", "arithmetic", "--num-train", "16",
                     "--num-heldout", "4", "--num-generations", "4", "--per-device-train-batch-size", "8",
                     "--max-completion-length", "8", "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
                     "--learning-rate", "0.01", "--max-steps", "6", "--save-steps", "2", "--p-ref-samples", "0",
                     "--eval-steps", "1", "--eval-prompts", "2", "--early-stop-evals", "2", "--output", out, "--json"])
    assert code == 0
    with open(os.path.join(out, rundir.SUMMARY), encoding="utf-8") as fh:
        return out, json.load(fh)


def test_a_run_with_eval_steps_names_its_best_checkpoint_and_stops_early(early_stopped_run):
    out, summary = early_stopped_run
    assert summary["best"] == {"step": 1, "held_out_success": 0.0, "prompts": 2, "adapter": rundir.BEST_ADAPTER}
    assert summary["early_stop"]["step"] == 3 and "not improved for 2 evals" in summary["early_stop"]["reason"]
    run = rundir.RunDir.open(out)
    assert [m["step"] for m in run.metrics()] == [1, 2, 3] and summary["steps"] == 3
    assert os.path.isfile(os.path.join(run.file(rundir.BEST_ADAPTER), "adapter_config.json"))
    assert [e["step"] for e in run.events() if e.get("kind") == "early_stop"] == [3]
    text = cli_summary(summary)
    assert "stopped early after step 3" in text and "best checkpoint: step 1, held-out success 0.000" in text


def cli_summary(summary: dict) -> str:
    from local_grpo.train import format_summary

    return format_summary(summary)


def test_eval_takes_the_best_checkpoint_by_default_and_says_so(early_stopped_run, capsys):
    out, _ = early_stopped_run
    assert cli.main(["eval", "--run", out, "--samples", "0", "--n", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["adapter"] == os.path.join(out, rundir.BEST_ADAPTER)
    assert ("local-grpo: eval: the best checkpoint: step 1, held-out success 0.000 on 2 prompts "
            f"({rundir.BEST_ADAPTER}/; --checkpoint final") in captured.err
    assert cli.main(["eval", "--run", out, "--samples", "0", "--n", "2", "--json", "--checkpoint", "final"]) == 0
    assert json.loads(capsys.readouterr().out)["adapter"] == os.path.join(out, rundir.ADAPTER)


def test_export_takes_the_best_checkpoint_by_default(early_stopped_run, tmp_path):
    out, _ = early_stopped_run
    best = export.export_run(out, "lora", str(tmp_path / "best"), verify_prompts=0)
    assert best["checkpoint"]["which"] == "best" and best["checkpoint"]["step"] == 1
    weights = "adapter_model.safetensors"
    assert filecmp.cmp(tmp_path / "best" / weights, os.path.join(out, rundir.BEST_ADAPTER, weights), shallow=False)
    card = (tmp_path / "best" / "README.md").read_text()
    assert "- Adapter: the best held-out checkpoint, step 1 (greedy success 0.000" in card
    final = export.export_run(out, "lora", str(tmp_path / "final"), verify_prompts=0, checkpoint="final")
    assert final["checkpoint"]["which"] == "final"
    assert filecmp.cmp(tmp_path / "final" / weights, os.path.join(out, rundir.ADAPTER, weights), shallow=False)


def test_a_run_without_a_best_checkpoint_uses_the_final_adapter(trained_tiny_run):
    run = rundir.RunDir.open(trained_tiny_run)
    assert run.choose_adapter(None)["which"] == "final" and run.adapter_dir == run.file(rundir.ADAPTER)
    with pytest.raises(UserError, match="^--checkpoint best: .* kept no best adapter .*--eval-steps"):
        run.choose_adapter("best")
    with pytest.raises(UserError, match="^--checkpoint: 'latest' is not one of best, final"):
        run.choose_adapter("latest")
