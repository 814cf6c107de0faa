"""Per-prompt success (train/prompt_stats.py), difficulty-targeted sampling (grpo.prompt_sampling difficulty,
train/difficulty.py), the `row` of each completion, grpo.max_minutes, and their config checks."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from conftest import make_tiny_config
from transformers import TrainerCallback

from local_grpo import cli, data, rundir
from local_grpo import config as cfg
from local_grpo.errors import UserError
from local_grpo.train import prompt_stats as ps
from local_grpo.train.difficulty import DifficultySampler, signal_weight
from local_grpo.train.prompt_stats import PromptStats
from local_grpo.train.run import check_scale_out, time_limit


def group(row: int | None, successes: int, size: int = 8) -> list[dict]:
    """The CompletionRecords (as written to completions.jsonl) of one group; `row` None: a record without one."""
    extra = {} if row is None else {"row": row}
    return [{"prompt": f"q{row}", "total": 1.0, "success": int(i < successes), **extra} for i in range(size)]


# --- PromptStats ------------------------------------------------------------------------------

def test_the_prior_is_centred_on_p_ref_with_its_weight():
    stats = PromptStats(4, prior_mean=0.25)
    assert stats.prior == pytest.approx((0.25 * ps.PRIOR_WEIGHT, 0.75 * ps.PRIOR_WEIGHT))
    assert [stats.mean(row) for row in range(4)] == pytest.approx([0.25] * 4)
    assert PromptStats(4).mean(0) == pytest.approx(ps.PRIOR_MEAN)  # p_ref not measured


@pytest.mark.parametrize("measured, mean", [(0.0, ps.MEAN_FLOOR), (1.0, 1.0 - ps.MEAN_FLOOR)])
def test_a_p_ref_of_0_or_1_is_floored_so_the_prior_stays_proper(measured, mean):
    stats = PromptStats(2, prior_mean=measured)
    alpha, beta = stats.prior
    assert alpha > 0 and beta > 0
    assert stats.mean(0) == pytest.approx(mean)


def test_scored_groups_update_the_posterior_of_their_row():
    stats = PromptStats(4, prior_mean=0.25)
    a, b = stats.prior
    stats(1, group(1, 2) + group(2, 0))
    assert stats.posterior(1) == pytest.approx((a + 2, b + 6))
    assert stats.posterior(2) == pytest.approx((a, b + 8))
    assert stats.posterior(0) == pytest.approx((a, b))  # not scored: the prior
    stats(2, group(1, 8, size=4))  # a second visit adds to the counts
    assert stats.posterior(1) == pytest.approx((a + 6, b + 6))
    assert stats.step == 2


def test_records_without_a_valid_row_are_ignored():
    stats = PromptStats(3)
    stats(1, group(None, 4) + group(7, 4) + group(-1, 4))  # no row; rows outside the training set
    assert stats.attempts == [0, 0, 0] and stats.latest == {}


def test_last_group_failed_reads_the_latest_group_only():
    stats = PromptStats(3)
    assert not stats.last_group_failed(0)  # never scored
    stats(1, group(0, 0) + group(1, 3))
    assert stats.last_group_failed(0) and not stats.last_group_failed(1)
    stats(2, group(0, 1) + group(1, 0))
    assert not stats.last_group_failed(0) and stats.last_group_failed(1)


def test_a_completion_record_keeps_its_row_and_omits_it_when_absent():
    fields = {"step": 1, "prompt": "q", "completion": "4", "answer": "4", "rewards": {"r": 1.0}, "total": 1.0,
              "success": 1}
    assert rundir.CompletionRecord(**fields, row=0).to_json()["row"] == 0  # row 0 is kept, not taken for absent
    assert "row" not in rundir.CompletionRecord(**fields).to_json()


# --- signal_weight ------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha, beta", [(0.1, 1.9), (2.1, 7.9), (0.5, 0.5), (5.0, 1.0), (0.02, 9.98)])
def test_signal_weight_is_the_beta_mean_of_p_times_1_minus_p(alpha, beta):
    try:
        from scipy import integrate, stats

        expected, _ = integrate.quad(lambda p: p * (1 - p) * stats.beta.pdf(p, alpha, beta), 0, 1)
        tolerance = 1e-6
    except ImportError:  # a Monte Carlo with a fixed seed: its standard error is below 1e-3 at 10^6 draws
        import numpy as np

        p = np.random.default_rng(0).beta(alpha, beta, size=1_000_000)
        expected, tolerance = float(np.mean(p * (1 - p))), 2e-3
    assert signal_weight(alpha, beta) == pytest.approx(expected, abs=tolerance)


def test_signal_weight_favours_a_prompt_with_a_success_over_an_all_fail_one():
    stats = PromptStats(3, prior_mean=0.05)
    stats(1, group(0, 2) + group(1, 0))
    some, failed, unseen = (signal_weight(*stats.posterior(row)) for row in range(3))
    assert some > unseen > failed > 0  # an unseen prompt keeps the prior's weight; a failed one fades, never to 0


# --- DifficultySampler ------------------------------------------------------------------------

def repeat_sampler(rows: int, num_generations: int, prompts_per_batch: int, repeat_count: int, seed: int = 0):
    """TRL's own RepeatSampler, laid out as GRPOTrainer._get_train_sampler builds it."""
    from trl.trainer.utils import RepeatSampler

    return RepeatSampler(list(range(rows)), mini_repeat_count=num_generations, batch_size=prompts_per_batch,
                         repeat_count=repeat_count, seed=seed)


@pytest.mark.parametrize("rows, generations, prompts, repeats", [(16, 4, 2, 1), (10, 3, 4, 2), (7, 2, 3, 4)])
def test_the_sampler_keeps_trls_layout_and_length(rows, generations, prompts, repeats):
    base = repeat_sampler(rows, generations, prompts, repeats)
    sampler = DifficultySampler(base, PromptStats(rows), seed=3)
    indices = list(sampler)
    assert len(indices) == len(sampler) == len(base) == len(list(base))
    chunk_size = prompts * generations
    chunks = [indices[i:i + chunk_size] for i in range(0, len(indices), chunk_size)]
    for start in range(0, len(chunks), repeats):
        batch = chunks[start]
        assert all(chunks[start + r] == batch for r in range(repeats))  # each batch repeat_count times
        prompts_in_batch = batch[::generations]
        assert batch == [p for p in prompts_in_batch for _ in range(generations)]  # each prompt G times in a row
        assert len(set(prompts_in_batch)) == prompts  # distinct prompts within a batch
        assert all(0 <= p < rows for p in prompts_in_batch)
    assert sampler.batches_drawn == len(chunks) // repeats


def batches_holding(seed: int, draws: int = 400) -> Counter:
    """How many of `draws` batches (2 prompts of 16) hold each row, after a step where row 3 had 2 of 8
    successes and every other row 0 of 8."""
    stats = PromptStats(16, prior_mean=0.05)
    stats(1, [record for row in range(16) for record in group(row, 2 if row == 3 else 0)])
    sampler = DifficultySampler(repeat_sampler(16, 8, 2, 1), stats, seed=seed)
    return Counter(row for _ in range(draws) for row in sampler.draw())


def test_a_prompt_with_a_success_is_drawn_far_more_often_than_an_all_fail_one():
    held = batches_holding(seed=7)
    failed = max(count for row, count in held.items() if row != 3)
    # weights: row 3 0.151, each failed row 0.009 (15 of them 0.135); 2 prompts a batch
    assert held[3] > 250 and held[3] >= 5 * failed
    assert batches_holding(seed=7) == held  # deterministic with the seed


# --- config and launch checks -------------------------------------------------------------------

@pytest.mark.parametrize(
    "change, field",
    [
        (lambda g: setattr(g, "prompt_sampling", "hardest"), "grpo.prompt_sampling"),
        (lambda g: (setattr(g, "prompt_sampling", "difficulty"), setattr(g, "filter_zero_std", True)),
         "grpo.prompt_sampling"),
        (lambda g: setattr(g, "resample_all_fail", -1), "grpo.resample_all_fail"),
        (lambda g: setattr(g, "max_minutes", -0.5), "grpo.max_minutes"),
    ],
)
def test_validation_names_the_field(change, field):
    config = cfg.Config()
    change(config.grpo)
    with pytest.raises(UserError) as err:
        cfg.validate(config)
    message = str(err.value)
    assert message.startswith(field) and "\n" not in message


def test_the_new_fields_validate_on_and_off():
    config = cfg.Config()
    g = config.grpo
    assert (g.prompt_sampling, g.resample_all_fail, g.hints, g.max_minutes) == ("uniform", 0, False, 0.0)
    g.prompt_sampling, g.resample_all_fail, g.hints, g.max_minutes = "difficulty", 2, True, 1.5
    assert cfg.validate(config) is config


@pytest.mark.parametrize("field, value", [("prompt_sampling", "difficulty"), ("resample_all_fail", 1), ("hints", True)])
def test_a_multi_process_launch_refuses_per_prompt_remedies(monkeypatch, field, value):
    config = cfg.Config()
    setattr(config.grpo, field, value)
    check_scale_out(config)  # one process: fine
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match=f"^grpo.{field}: works in single-process runs only"):
        check_scale_out(config)
    setattr(config.grpo, field, getattr(cfg.GRPOSettings(), field))
    check_scale_out(config)  # off again: allowed


def test_the_cli_flags_reach_the_config_and_a_bad_value_exits_2(capsys, tmp_path):
    flags = cfg.override_fields()
    assert flags["max-minutes"][:3] == ("grpo", "max_minutes", float)
    assert flags["prompt-sampling"][:3] == ("grpo", "prompt_sampling", str)
    code = cli.main(["train", "--task", "arithmetic", "--prompt-sampling", "hardest",
                     "--output", str(tmp_path / "run")])
    assert code == 2
    assert capsys.readouterr().err.count("grpo.prompt_sampling") == 1


def test_time_limit_reads_the_clock():
    assert time_limit(10.0)() is None
    assert time_limit(0.0)() == "grpo.max_minutes: 0 minutes of training reached"


# --- real runs on the tiny model ------------------------------------------------------------------

class SamplerSpy(TrainerCallback):
    """Keeps the sampler under the trainer's DataLoader (accelerate wraps it)."""

    def __init__(self):
        self.sampler = None

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        loader = train_dataloader
        self.sampler = getattr(loader.batch_sampler, "sampler", None) or loader.sampler


def test_a_run_with_difficulty_sampling_trains_and_keeps_each_completions_row(tiny_model_dir, tmp_path,
                                                                                one_torch_thread):
    from local_grpo import train

    config = make_tiny_config(tiny_model_dir, str(tmp_path / "run"), max_completion_length=8)
    g = config.grpo
    g.prompt_sampling = "difficulty"
    g.p_ref_samples, g.p_ref_prompts = 2, 2  # a measured p_ref for the prior; too few for the gate to judge
    spy = SamplerSpy()
    summary = train.train(config, progress=False, callbacks=[spy])
    assert summary["steps"] == 2
    assert isinstance(spy.sampler, DifficultySampler) and spy.sampler.batches_drawn >= 2
    run = rundir.RunDir.open(config.output_dir)
    records = run.completions()
    assert len(records) == 2 * g.per_device_train_batch_size
    rows = [r["row"] for r in records]
    assert all(isinstance(row, int) and 0 <= row < config.data.num_train for row in rows)
    for step in (1, 2):
        step_rows = [r["row"] for r in records if r["step"] == step]
        assert Counter(step_rows) == {row: g.num_generations for row in set(step_rows)}  # whole groups
        assert len(set(step_rows)) == g.per_device_train_batch_size // g.num_generations  # distinct prompts
    train_rows, _ = data.load_examples(config)
    for record in records:  # the row is the prompt's own index in the training rows
        assert record["answer"] == train_rows[record["row"]]["answer"]
    stats = spy.sampler.stats
    assert sum(stats.attempts) == len(records) and stats.step == 2


def test_max_minutes_stops_training_after_the_first_step(tiny_model_dir, tmp_path, one_torch_thread):
    out = str(tmp_path / "run")
    code = cli.main(["train", "--model", tiny_model_dir, "--backend", "hf", "--task", "arithmetic", "--num-train", "16",
                     "--num-heldout", "4", "--num-generations", "4", "--per-device-train-batch-size", "8",
                     "--max-completion-length", "8", "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
                     "--learning-rate", "0.01", "--max-steps", "3", "--save-steps", "3", "--p-ref-samples", "0",
                     "--max-minutes", "0.001", "--output", out, "--json"])
    assert code == 0
    with open(os.path.join(out, rundir.SUMMARY), encoding="utf-8") as fh:
        summary = json.load(fh)
    assert summary["early_stop"] == {"step": 1, "reason": "grpo.max_minutes: 0.001 minutes of training reached"}
    assert summary["steps"] == 1
    run = rundir.RunDir.open(out)
    assert [m["step"] for m in run.metrics()] == [1]
    assert [e["step"] for e in run.events() if e.get("kind") == "early_stop"] == [1]
    assert os.path.isfile(os.path.join(run.adapter_dir, "adapter_config.json"))


def test_chance_all_fail_is_the_beta_moment():
    stats = PromptStats(1, prior_mean=0.5)  # Beta(1, 1): E[(1 - p)^n] = 1 / (n + 1)
    assert [round(stats.chance_all_fail(0, n), 12) for n in (0, 1, 4, 8)] == [1.0, 0.5, 0.2, round(1 / 9, 12)]
    stats(1, [{"row": 0, "success": s} for s in (1, 1, 0, 0)])  # Beta(3, 3): (3·4)/(6·7) for n = 2
    assert abs(stats.chance_all_fail(0, 2) - 12 / 42) < 1e-12
