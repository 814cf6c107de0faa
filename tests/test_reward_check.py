"""`rewards check`: its numbers on hand-made samples with known answers, and one real run on the tiny model."""

from __future__ import annotations

import json
import os

import pytest

from local_grpo import reward_check
from local_grpo.reward_check import ScoredSample


def samples_from(groups: list[list[dict]], texts: list[list[str]] | None = None) -> list[ScoredSample]:
    """ScoredSamples from per-group lists of score dicts (completion text 'g<group>s<index>' unless given)."""
    return [ScoredSample(group=g, completion=texts[g][j] if texts else f"g{g}s{j}", scores=scores)
            for g, members in enumerate(groups) for j, scores in enumerate(members)]


# --- zero-std fraction --------------------------------------------------------------------

def test_zero_std_fraction_counts_groups_with_one_total():
    samples = samples_from([
        [{"c": 1.0}, {"c": 1.0}, {"c": 1.0}],  # all right: no signal
        [{"c": 0.0}, {"c": 1.0}, {"c": 0.0}],  # mixed
        [{"c": 0.2}, {"c": 0.2}, {"c": 0.2}],  # all the same partial score: no signal
    ])
    assert reward_check.zero_std_fraction(samples, {"c": 1.0}) == pytest.approx(2 / 3)


def test_zero_std_fraction_uses_the_weighted_total_and_counts_none_as_zero():
    # c is constant in the group, f varies: the total varies unless f's weight is 0
    group = [{"c": 0.0, "f": 1.0}, {"c": 0.0, "f": 0.0}]
    assert reward_check.zero_std_fraction(samples_from([group]), {"c": 1.0, "f": 0.2}) == 0.0
    assert reward_check.zero_std_fraction(samples_from([group]), {"c": 1.0, "f": 0.0}) == 1.0
    # None and 0.0 give the same total (TRL's nansum)
    assert reward_check.zero_std_fraction(samples_from([[{"c": None}, {"c": 0.0}]]), {"c": 1.0}) == 1.0
    assert reward_check.zero_std_fraction([], {"c": 1.0}) is None


# --- variance shares ----------------------------------------------------------------------

def test_variance_shares_of_one_group_by_hand():
    # centred a: [.5, -.5, .5, -.5], centred b: [.25, .25, -.25, -.25], total T = a + b
    # sum(a*T) = 1.0, sum(b*T) = 0.25, sum(T^2) = 1.25  ->  shares 0.8 and 0.2
    group = [{"a": 1, "b": 0.5}, {"a": 0, "b": 0.5}, {"a": 1, "b": 0}, {"a": 0, "b": 0}]
    shares = reward_check.variance_shares(samples_from([group]), {"a": 1.0, "b": 1.0}, scale="none")
    assert shares == {"a": pytest.approx(0.8), "b": pytest.approx(0.2)}


def test_variance_shares_follow_the_weights_and_sum_to_one():
    group = [{"a": 1, "b": 0.5}, {"a": 0, "b": 0.5}, {"a": 1, "b": 0}, {"a": 0, "b": 0}]
    # weight 2 on b: centred 2b = [.5, .5, -.5, -.5], T = [1, 0, 0, -1]
    # sum(a*T) = 1.0, sum(2b*T) = 1.0, sum(T^2) = 2  ->  0.5 and 0.5
    shares = reward_check.variance_shares(samples_from([group]), {"a": 1.0, "b": 2.0}, scale="none")
    assert shares == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}
    assert sum(shares.values()) == pytest.approx(1.0)


def test_group_scaling_weighs_every_varying_group_the_same():
    # group 0: only a varies, with std 0.5; group 1: only b varies, with std 0.05 (10x smaller)
    groups = [[{"a": 1, "b": 0}, {"a": 0, "b": 0}], [{"a": 0, "b": 0.1}, {"a": 0, "b": 0.0}]]
    weights = {"a": 1.0, "b": 1.0}
    unscaled = reward_check.variance_shares(samples_from(groups), weights, scale="none")
    # none: raw variances 0.5 (a) and 0.005 (b)  ->  a = 0.5 / 0.505
    assert unscaled["a"] == pytest.approx(0.5 / 0.505)
    scaled = reward_check.variance_shares(samples_from(groups), weights, scale="group")
    assert scaled == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}


def test_variance_shares_negative_for_a_term_against_the_total_and_none_without_variance():
    # b falls when a rises, by half as much: centred a = [.5, -.5], b = [-.25, .25], T = [.25, -.25]
    # sum(a*T) = .25, sum(b*T) = -.125, sum(T^2) = .125  ->  2.0 and -1.0
    shares = reward_check.variance_shares(samples_from([[{"a": 1, "b": 0}, {"a": 0, "b": 0.5}]]),
                                          {"a": 1.0, "b": 1.0}, scale="none")
    assert shares == {"a": pytest.approx(2.0), "b": pytest.approx(-1.0)}
    flat = samples_from([[{"a": 1, "b": 0}, {"a": 1, "b": 0}]])
    assert reward_check.variance_shares(flat, {"a": 1.0, "b": 1.0}) == {"a": None, "b": None}


# --- agreement, pass rates, stats -----------------------------------------------------------

def test_agreement_tables_count_each_cell_and_keep_examples():
    scores = [{"c": 1, "f": 1}, {"c": 1, "f": 0}, {"c": 0, "f": 1}, {"c": 0, "f": 1},
              {"c": 0, "f": 0}, {"c": None, "f": 1}, {"c": 0, "f": 0.5}]
    texts = [["both", "c only", "f only 1", "f only 2", "neither", "c None, f only", "f half: neither"]]
    tables = reward_check.agreement_tables(samples_from([scores], texts), {"c": 1.0, "f": 1.0}, examples=2)
    [table] = tables
    assert (table.a, table.b) == ("c", "f")
    assert (table.both, table.a_only, table.b_only, table.neither) == (1, 1, 3, 2)
    assert [e["completion"] for e in table.examples["a_only"]] == ["c only"]
    assert [e["completion"] for e in table.examples["b_only"]] == ["f only 1", "f only 2"]  # capped at 2
    assert table.examples["b_only"][0]["scores"] == {"c": 0, "f": 1}


def test_agreement_tables_cover_every_pair_with_each_reward_maximum():
    samples = samples_from([[{"x": 2.0, "y": 1.0, "z": 0.0}]])
    tables = reward_check.agreement_tables(samples, {"x": 2.0, "y": 1.0, "z": 1.0})
    assert [(t.a, t.b) for t in tables] == [("x", "y"), ("x", "z"), ("y", "z")]
    assert [(t.both, t.a_only, t.b_only, t.neither) for t in tables] == [(1, 0, 0, 0), (0, 1, 0, 0), (0, 1, 0, 0)]


def test_pass_rates_per_group_by_the_success_threshold():
    samples = samples_from([[{"c": 1.0}, {"c": 0.9985}, {"c": None}, {"c": 0.999}], [{"c": 0.0}, {"c": 0.0}]])
    assert reward_check.pass_rates(samples, "c") == [0.5, 0.0]


def test_reward_stats_mean_std_none_and_histogram():
    stats = reward_check.reward_stats([0.0, 1.0, 1.0, None], bins=2)
    assert stats["mean"] == pytest.approx(2 / 3)
    assert stats["std"] == pytest.approx((2 / 9) ** 0.5)
    assert stats["fraction_none"] == 0.25
    assert stats["histogram"] == {"edges": [0.0, 0.5, 1.0], "counts": [1, 2]}
    assert reward_check.reward_stats([None, None])["histogram"] == {"edges": [], "counts": []}


# --- verdicts -------------------------------------------------------------------------------

SOUND = {"c": {"false_positive_rate": 0.0, "false_negative_rate": 0.0}}
WEIGHTS = {"c": 1.0, "f": 0.2}


def verdict(zero_std=0.25, p_refs=(0.25, 0.5, 0.0, 0.75), shares=None, probe=None, weights=None):
    return reward_check.decide_verdict(zero_std, list(p_refs), shares or {"c": 0.9, "f": 0.1}, "c",
                                       SOUND if probe is None else probe, weights or WEIGHTS, 8)


def test_verdict_learnable_when_correctness_varies_within_groups():
    result = verdict()
    assert result.kind == "learnable"
    assert "3 of 4 prompts" in result.reason and "90%" in result.reason


def test_verdict_too_hard_when_nothing_passes_even_if_format_varies():
    result = verdict(zero_std=0.0, p_refs=(0.0, 0.0, 0.0), shares={"c": None, "f": 1.0})
    assert result.kind == "no_signal_too_hard"
    assert result.text == "no signal (too hard at G=8)"


def test_verdict_too_easy_when_everything_passes():
    assert verdict(zero_std=1.0, p_refs=(1.0, 1.0)).kind == "no_signal_too_easy"


def test_verdict_no_signal_when_most_groups_are_flat():
    assert verdict(zero_std=0.9, p_refs=(0.0,) * 8 + (1.0, 0.5)).kind == "no_signal_too_hard"
    assert verdict(zero_std=0.9, p_refs=(1.0,) * 8 + (0.0, 0.5)).kind == "no_signal_too_easy"
    assert verdict(zero_std=0.8, p_refs=(0.0,) * 8 + (1.0, 0.5)).kind != "no_signal_too_hard"


def test_verdict_a_term_dominates():
    result = verdict(shares={"c": 0.2, "f": 0.8})
    assert result.kind == "term_dominates"
    assert "f carries 80%" in result.reason
    assert verdict(shares={"c": 0.8, "f": 0.2}).kind == "learnable"  # correctness dominating is the goal


def test_verdict_unsound_comes_first_and_only_for_rewards_that_train():
    hackable = {"c": {"false_positive_rate": 0.3, "false_negative_rate": 0.0}}
    result = verdict(zero_std=1.0, p_refs=(0.0,), probe=hackable)
    assert result.kind == "unsound" and "credits 30%" in result.reason
    side = {**SOUND, "g": {"false_positive_rate": 0.4, "false_negative_rate": 0.0}}
    assert verdict(probe=side, weights={"c": 1.0, "f": 0.2, "g": 0.0}).kind == "learnable"  # g is only logged
    misses = verdict(probe={"c": {"false_positive_rate": 0.0, "false_negative_rate": 0.9}})
    assert misses.kind == "learnable" and "misses 90%" in misses.warnings[0]


def test_forecast_says_when_its_speed_is_not_calibrated():
    from local_grpo.config import Config

    config = Config()
    config.grpo.max_steps = 10
    nominal = reward_check.forecast([0.0, 0.5], config)
    assert nominal["speed_calibrated"] is False and "no calibrated speed" in nominal["note"]
    assert len(nominal["trajectory"]) == 11 and nominal["p_ref_mean"] == 0.25
    config.grpo.beta = 0.04
    assert reward_check.forecast([0.0, 0.5], config)["speed_calibrated"] is True


# --- end to end on the tiny model, through the CLI ----------------------------------------------

JSON_KEYS = {"model", "task", "num_generations", "prompts", "samples", "seed", "max_new_tokens", "temperature",
             "cache", "seconds", "rewards", "zero_std_fraction", "per_prompt", "p_ref", "forecast", "variance_scale",
             "variance_shares", "agreement", "probe", "truncation", "verdict"}


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from local_grpo.cli import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_on_the_tiny_model_json_and_cache_reuse(tiny_model_dir, tmp_path, capsys, monkeypatch, one_torch_thread):
    cache = tmp_path / "cache"
    argv = ["rewards", "check", "--model", tiny_model_dir, "--backend", "hf", "--task", "arithmetic",
            "--max-seq-length", "128", "--max-completion-length", "8", "--num-generations", "4", "--prompts", "2",
            "--rewards", "correct_numeric,format_soft:0.2", "--cache-dir", str(cache), "--json"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    result = json.loads(out)  # stdout holds exactly one JSON object
    assert set(result) == JSON_KEYS
    assert (result["samples"], result["prompts"], result["num_generations"]) == (8, 2, 4)
    assert [r["name"] for r in result["rewards"]] == ["correct_numeric", "format_soft"]
    assert set(result["rewards"][0]) >= {"mean", "std", "fraction_none", "histogram"}
    assert [(t["a"], t["b"]) for t in result["agreement"]] == [("correct_numeric", "format_soft")]
    table = result["agreement"][0]
    assert table["both"] + table["a_only"] + table["b_only"] + table["neither"] == 8
    assert set(result["probe"]) == {"correct_numeric"}  # format rewards are not correctness rewards
    assert result["probe"]["correct_numeric"]["false_positive_rate"] == 0.0
    assert result["verdict"]["kind"] in ("learnable", "no_signal_too_hard", "no_signal_too_easy", "term_dominates")
    assert len(result["per_prompt"]) == 2 and result["cache"]["hit"] is False
    cut = result["truncation"]  # the random model rarely ends before the 8-token cap
    assert (cut["cap"], cut["samples"]) == (8, 8) and 0 <= cut["cut_failed"] <= cut["cut"] <= 8
    warned = any(w.startswith("the length cap is the problem: try --max-completion-length 16")
                 for w in result["verdict"]["warnings"])
    assert warned == (cut["advice"] is not None and result["verdict"]["kind"] == "no_signal_too_hard")
    path = result["cache"]["path"]
    assert os.path.dirname(path) == str(cache)
    with open(path, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh]
    assert len(lines) == 9 and set(lines[1]) == {"group", "prompt", "answer", "completion", "tokens"}

    def no_generation(*args, **kwargs):
        raise AssertionError("the second check must read the cached samples")

    monkeypatch.setattr("local_grpo.reward_check.generate_samples", no_generation)
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    again = json.loads(out)
    assert again["cache"] == {"path": path, "hit": True}
    assert again["rewards"] == result["rewards"] and again["verdict"] == result["verdict"]

    code, out, _ = run_cli([a for a in argv if a != "--json"], capsys)
    lines = out.strip().splitlines()
    verdict_at = max(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert code == 0 and "read from the cache" in lines[0]
    assert lines[verdict_at + 1].startswith("  because ")  # the report ends with the verdict and its reasons
    assert all(line.startswith("  ") for line in lines[verdict_at + 1:])


def test_check_bad_inputs_give_one_line_and_exit_2(tmp_path, capsys):
    for argv, flag in ((["--prompts", "0"], "--prompts"), (["--rewards", "nope"], "rewards[0]"),
                       (["--task", "countdown", "--dataset", "x.jsonl"], "--task"),
                       (["--num-generations", "1"], "num_generations"), (["--config", str(tmp_path / "no.yaml")], "--config")):
        code, out, err = run_cli(["rewards", "check", "--cache-dir", str(tmp_path), *argv], capsys)
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and flag in err
