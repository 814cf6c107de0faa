"""The success-amplification predictor: properties from the paper, closed forms, and the CLI."""

import argparse
import json
import math
import sys

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from local_grpo import dynamics
from local_grpo.dynamics import fixed_points, limit, limit_info, logit, predict, predict_dataset, sigmoid, trajectory
from local_grpo.errors import UserError
from local_grpo.cli.predict import register_cli

FAST = settings(max_examples=60, deadline=None)

p_refs = st.floats(min_value=1e-6, max_value=1 - 1e-6)
betas = st.floats(min_value=0.01, max_value=100.0)
alphas = st.floats(min_value=0.05, max_value=1.0)
norms = st.sampled_from(["meanstd", "mean"])


# --- Properties that hold for every variant ----------------------------------------------------


@FAST
@given(p_ref=p_refs, beta=betas, norm=norms, alpha=alphas, kl=st.sampled_from(["ref", "both", "mirror", "none"]))
def test_every_iterate_is_above_p_ref(p_ref, beta, norm, alpha, kl):
    path = trajectory(p_ref, beta, kl=kl, norm=norm, alpha=alpha, steps=20)
    assert path[0] == p_ref
    assert all(p > p_ref for p in path[1:])


@FAST
@given(p_ref=p_refs, beta=betas, norm=norms, alpha=alphas, kl=st.sampled_from(["ref", "both"]))
def test_every_fixed_point_is_above_p_ref_and_is_fixed(p_ref, beta, norm, alpha, kl):
    points = fixed_points(p_ref, beta, kl=kl, norm=norm, alpha=alpha)
    assert len(points) % 2 == 1  # F(0) > 0 > F(D_max): an odd number of crossings
    for point in points:
        assert point["p"] > p_ref
        h = dynamics.step(point["p"], p_ref, beta, kl=kl, norm=norm, alpha=alpha)
        assert h == pytest.approx(point["p"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("kl", ["ref", "mirror", "both", "none"])
@pytest.mark.parametrize("norm", ["meanstd", "mean"])
def test_p_ref_zero_is_absorbing(kl, norm):
    result = predict(0.0, 0.1, kl=kl, norm=norm, steps=10)
    assert result["trajectory"] == [0.0] * 11
    assert result["p_star"] == 0.0
    assert result["fixed_points"] == [{"p": 0.0, "stable": True}]


@FAST
@given(p_ref=p_refs, beta=betas, norm=norms, kl=st.sampled_from(["mirror", "none"]))
@example(p_ref=0.99999, beta=1.1953125, norm="mean", kl="mirror")  # saturates at 1 − 2⁻⁵² by step 30
def test_mirror_increases_monotonically_to_one(p_ref, beta, norm, kl):
    path = trajectory(p_ref, beta, kl=kl, norm=norm, steps=30)
    assert all(b >= a for a, b in zip(path, path[1:]))
    # strictly rising until p is within float resolution of 1 (1 − p below a few ulps stops moving)
    assert all(b > a or 1.0 - b < 4 * sys.float_info.epsilon for a, b in zip(path, path[1:]))
    assert limit(p_ref, beta, kl=kl, norm=norm) == 1.0
    assert fixed_points(p_ref, beta, kl=kl, norm=norm) == [{"p": 1.0, "stable": True}]
    assert trajectory(p_ref, beta, kl="none", norm=norm, steps=30) == trajectory(p_ref, beta, kl="mirror", norm=norm, steps=30)


# --- Dr. GRPO closed forms -------------------------------------------------------------------


def test_worked_check_dr_grpo_ref():
    # σ(logit 0.2 + 1) = σ(−1.3863 + 1) = 0.4046, reached after one step
    result = predict(0.2, 1.0, kl="ref", norm="mean", steps=5)
    assert result["p_star"] == pytest.approx(0.4046, abs=1e-4)
    assert result["trajectory"][1:] == [result["p_star"]] * 5
    assert result["fixed_points"] == [{"p": pytest.approx(result["p_star"], rel=1e-12), "stable": True}]


@FAST
@given(p_ref=p_refs, beta=betas)
def test_dr_grpo_ref_reaches_its_fixed_point_in_one_step(p_ref, beta):
    expected = sigmoid(logit(p_ref) + 1 / beta)
    path = trajectory(p_ref, beta, kl="ref", norm="mean", steps=4)
    assert path[1:] == pytest.approx([expected] * 4, rel=1e-12)
    assert limit(p_ref, beta, kl="ref", norm="mean") == pytest.approx(expected, rel=1e-12)


@FAST
@given(p_ref=st.floats(0.01, 0.99), beta=st.floats(1.0, 100.0))
def test_dr_grpo_mirror_is_linear_in_log_odds(p_ref, beta):
    path = trajectory(p_ref, beta, kl="mirror", norm="mean", steps=10)
    for n, p in enumerate(path):
        assert logit(p) == pytest.approx(logit(p_ref) + n / beta, rel=1e-9, abs=1e-9)


@FAST
@given(p_ref=st.floats(0.01, 0.99), beta=st.floats(0.5, 100.0), alpha=st.floats(0.1, 1.0))
def test_dr_grpo_both_contracts_geometrically(p_ref, beta, alpha):
    logit_ref = logit(p_ref)
    logit_star = logit_ref + 1 / (alpha * beta)
    path = trajectory(p_ref, beta, kl="both", norm="mean", alpha=alpha, steps=10)
    for n, p in enumerate(path):
        assert logit(p) - logit_star == pytest.approx((1 - alpha) ** n * (logit_ref - logit_star), rel=1e-7, abs=1e-8)
    assert limit(p_ref, beta, kl="both", norm="mean", alpha=alpha) == pytest.approx(sigmoid(logit_star), rel=1e-10)


# --- Fixed points, stability, oscillation (mean+std) ------------------------------------------


def test_three_fixed_points_stable_unstable_stable():
    # small p_ref: a stable point near p_ref, an unstable one, and a stable one near 1
    points = fixed_points(0.05, 1.0, kl="ref", norm="meanstd")
    assert [p["stable"] for p in points] == [True, False, True]
    low, middle, high = (p["p"] for p in points)
    assert 0.05 < low < 0.5 < middle < high
    assert low == pytest.approx(0.3127, abs=1e-4)
    assert high > 1 - 1e-9
    # the iteration from p_ref stops at the lower stable point, not at 1
    assert limit(0.05, 1.0) == pytest.approx(low, rel=1e-9)


def test_fixed_points_extremely_close_to_one_are_found():
    # β small: log-odds gain ≈ 316/β, so 1 − p* ≈ e^−3000 (p* rounds to 1.0); it must still be listed
    points = fixed_points(0.3, 0.1)
    assert points == [{"p": 1.0, "stable": True}]
    assert limit(0.3, 0.1) == 1.0


@FAST
@given(p=st.floats(0.01, 0.99), p_ref=st.floats(0.01, 0.99), beta=st.floats(0.3, 50.0), alpha=alphas,
       norm=norms, kl=st.sampled_from(["ref", "both", "mirror"]))
def test_analytic_derivative_matches_finite_differences(p, p_ref, beta, alpha, norm, kl):
    h = 1e-6
    args = dict(p_ref=p_ref, beta=beta, kl=kl, norm=norm, alpha=alpha)
    numeric = (dynamics.step(p + h, **args) - dynamics.step(p - h, **args)) / (2 * h)
    assert dynamics.step_derivative(p, **args) == pytest.approx(numeric, rel=1e-4, abs=1e-7)


def test_derivative_is_the_docs_formula_for_ref_meanstd():
    p, p_ref, beta, eps = 0.3, 0.1, 0.7, 1e-5
    h = dynamics.step(p, p_ref, beta)
    expected = -h * (1 - h) * (1 - 2 * p) / (2 * beta * (p * (1 - p) + eps) ** 1.5)
    assert dynamics.step_derivative(p, p_ref, beta) == pytest.approx(expected, rel=1e-12)


@FAST
@given(p_ref=st.floats(0.001, 0.9), beta=st.floats(0.3, 30.0), alpha=alphas, kl=st.sampled_from(["ref", "both"]))
def test_stability_agrees_with_the_derivative(p_ref, beta, alpha, kl):
    for point in fixed_points(p_ref, beta, kl=kl, alpha=alpha):
        if point["p"] < 1 - 1e-6:
            slope = abs(dynamics.step_derivative(point["p"], p_ref, beta, kl=kl, alpha=alpha))
            if abs(slope - 1) > 1e-6:
                assert point["stable"] == (slope < 1)


def test_both_has_the_fixed_points_of_ref_at_alpha_beta():
    # a·D* = Ω/β: same points as KL-to-ref with strength αβ; the mirror part only adds damping
    both = fixed_points(0.05, 2.0, kl="both", alpha=0.5)
    ref = fixed_points(0.05, 1.0, kl="ref")
    assert [p["p"] for p in both] == pytest.approx([p["p"] for p in ref], rel=1e-9)


def test_mirror_part_damps_an_oscillation():
    # KL to ref alone: the point near p_ref has h′ < −1 and the iteration settles on a 2-cycle
    info = limit_info(0.001, 3.0, kl="ref")
    assert not info["converged"] and len(info["cycle"]) == 2
    a, b = info["cycle"]
    assert dynamics.step(a, 0.001, 3.0) == pytest.approx(b, rel=1e-9)
    assert dynamics.step(b, 0.001, 3.0) == pytest.approx(a, rel=1e-9)
    assert info["p_star"] == pytest.approx((a + b) / 2)
    # the same fixed point with half the weight on the reference (β doubled so αβ matches) is stable
    damped = limit_info(0.001, 6.0, kl="both", alpha=0.5)
    assert damped["converged"]
    assert damped["p_star"] == pytest.approx(fixed_points(0.001, 3.0)[0]["p"], rel=1e-9)


# --- Datasets and the TRL mapping ------------------------------------------------------------


def test_dataset_prediction_averages_per_prompt_not_p_ref():
    result = predict_dataset([0.0, 1.0], beta=1.0, norm="mean", steps=3)
    assert result["p_ref_mean"] == 0.5
    assert result["p_star"] == 0.5  # both prompts are absorbing
    assert result["trajectory"] == [0.5] * 4
    assert predict(0.5, 1.0, norm="mean")["p_star"] == pytest.approx(sigmoid(1.0))  # what averaging first would say
    assert [row["p_star"] for row in result["per_prompt"]] == [0.0, 1.0]


def test_dataset_trajectory_is_the_mean_of_prompt_trajectories():
    p_refs = [0.1, 0.4, 0.4, 0.7]
    result = predict_dataset(p_refs, beta=0.5, steps=10)
    paths = [trajectory(p, 0.5, steps=10) for p in p_refs]
    assert result["trajectory"] == pytest.approx([sum(col) / 4 for col in zip(*paths)], rel=1e-12)
    assert result["p_star"] == pytest.approx(sum(limit(p, 0.5) for p in p_refs) / 4)
    assert len(result["per_prompt"]) == 4


def test_mapping_from_trl():
    assert dynamics.mapping_from_trl(0.04, "none", 8) == {"beta": 0.04, "eps": 1e-5, "norm": "mean"}
    mapped = dynamics.mapping_from_trl(0.1, "group", 16)
    assert mapped["norm"] == "meanstd"
    assert mapped["beta"] == pytest.approx(0.1 * math.sqrt(16 / 15))
    assert mapped["eps"] == pytest.approx(1e-8 * 15 / 16)
    assert dynamics.mapping_from_trl(0.1, "batch", 16) == mapped
    with pytest.raises(UserError, match="scale_rewards"):
        dynamics.mapping_from_trl(0.1, "std", 16)


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        (dict(p_ref=1.5, beta=1.0), "--p-ref"),
        (dict(p_ref=-0.1, beta=1.0), "--p-ref"),
        (dict(p_ref=0.2, beta=0.0), "--beta"),
        (dict(p_ref=0.2, beta=-1.0), "--beta"),
        (dict(p_ref=0.2, beta=1.0, kl="forward"), "--kl"),
        (dict(p_ref=0.2, beta=1.0, norm="std"), "--norm"),
        (dict(p_ref=0.2, beta=1.0, kl="both", alpha=0.0), "--alpha"),
        (dict(p_ref=0.2, beta=1.0, eps=0.0), "--eps"),
        (dict(p_ref=0.2, beta=1.0, steps=-1), "--steps"),
    ],
)
def test_bad_input_is_a_one_line_user_error_naming_the_flag(kwargs, flag):
    with pytest.raises(UserError) as caught:
        predict(**kwargs)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert flag in message and "\n" not in message


# --- The CLI ---------------------------------------------------------------------------------


def run_cli(argv, capsys):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["predict", *argv])
    code = args.func(args)
    return code, capsys.readouterr().out


def test_cli_json_is_one_object(capsys):
    code, out = run_cli(["--p-ref", "0.2", "--beta", "1", "--norm", "mean", "--steps", "4", "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    assert result["p_star"] == pytest.approx(0.4046, abs=1e-4)
    assert result["fixed_points"] == [{"p": pytest.approx(result["p_star"]), "stable": True}]
    assert len(result["trajectory"]) == 5 and result["trajectory"][0] == 0.2


def test_cli_summary_is_readable(capsys):
    code, out = run_cli(["--p-ref", "0.05", "--beta", "1"], capsys)
    assert code == 0
    assert "p* 0.3127" in out and "unstable" in out and "trajectory (50 steps)" in out


def test_cli_needs_p_ref_and_beta(capsys):
    with pytest.raises(UserError, match="--beta"):
        run_cli(["--p-ref", "0.2"], capsys)
    with pytest.raises(UserError, match="--p-ref"):
        run_cli(["--beta", "0.2"], capsys)
    with pytest.raises(UserError, match="--kl"):
        run_cli(["--p-ref", "0.2", "--beta", "1", "--kl", "reverse"], capsys)


def write_run(run_dir, config=None, p_ref=None, completions=None):
    run_dir.mkdir(exist_ok=True)
    if config is not None:
        (run_dir / "config.yaml").write_text(config)
    if p_ref is not None:
        (run_dir / "p_ref.json").write_text(json.dumps(p_ref))
    if completions is not None:
        (run_dir / "completions.jsonl").write_text(completions)
    return run_dir


def test_cli_from_run_uses_p_ref_json_and_config(tmp_path, capsys):
    run_dir = write_run(
        tmp_path / "run",
        config="grpo:\n  beta: 0.1\n  kl: ref\n  scale_rewards: none\n  num_generations: 8\n",
        p_ref={"k": 8, "per_prompt": [{"prompt": "1+1", "p_ref": 0.25}, {"prompt": "2+3", "p_ref": 0.75}], "mean": 0.5},
    )
    code, out = run_cli(["--from-run", str(run_dir), "--steps", "3", "--json"], capsys)
    assert code == 0
    result = json.loads(out)
    expected = [sigmoid(logit(p) + 1 / 0.1) for p in (0.25, 0.75)]  # Dr. GRPO, β = 0.1, one step
    assert [row["p_star"] for row in result["per_prompt"]] == pytest.approx(expected)
    assert [row["prompt"] for row in result["per_prompt"]] == ["1+1", "2+3"]
    assert result["p_star"] == pytest.approx(sum(expected) / 2)
    assert result["p_ref_mean"] == 0.5
    assert result["trajectory"][0] == 0.5


def test_cli_from_run_falls_back_to_first_step_and_skips_a_torn_line(tmp_path, capsys):
    def line(step, prompt, success):
        return json.dumps({"step": step, "prompt": prompt, "completion": "...", "answer": "2",
                           "rewards": {"correct": success}, "total": success, "success": success})

    completions = "\n".join([line(0, "a", 1), line(0, "a", 0), line(0, "b", 0), line(0, "b", 0),
                             line(1, "a", 1), line(1, "b", 1)]) + '\n{"step": 1, "prom'
    run_dir = write_run(tmp_path / "run", completions=completions,
                        config="grpo:\n  beta: 0.04\n  scale_rewards: group\n  num_generations: 4\n")
    code, out = run_cli(["--from-run", str(run_dir), "--json"], capsys)
    result = json.loads(out)
    assert code == 0
    assert [row["p_ref"] for row in result["per_prompt"]] == [0.5, 0.0]
    assert "no p_ref.json" in result["source"]
    assert result["params"]["beta"] == pytest.approx(0.04 * math.sqrt(4 / 3))

    code, out = run_cli(["--from-run", str(run_dir)], capsys)
    assert "no p_ref.json" in out and "2 prompts" in out


def test_cli_from_run_with_beta_zero_needs_a_step_size(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run", config="grpo:\n  beta: 0.0\n",
                        p_ref={"k": 4, "per_prompt": [{"prompt": "x", "p_ref": 0.5}], "mean": 0.5})
    with pytest.raises(UserError, match="--beta"):
        run_cli(["--from-run", str(run_dir)], capsys)
    code, out = run_cli(["--from-run", str(run_dir), "--beta", "2", "--json"], capsys)
    assert json.loads(out)["params"]["kl"] == "none"
    assert json.loads(out)["p_star"] == 1.0


def test_cli_from_run_without_data_is_a_user_error(tmp_path, capsys):
    with pytest.raises(UserError, match="p_ref.json"):
        run_cli(["--from-run", str(write_run(tmp_path / "empty"))], capsys)
    with pytest.raises(UserError, match="not a directory"):
        run_cli(["--from-run", str(tmp_path / "missing")], capsys)


def test_cli_from_run_reads_kl_both_and_resolves_kl_null(tmp_path, capsys):
    p_ref = {"k": 4, "per_prompt": [{"prompt": "x", "p_ref": 0.25}], "mean": 0.25}
    both = write_run(tmp_path / "both", p_ref=p_ref,
                     config="grpo:\n  beta: 0.5\n  kl: both\n  kl_alpha: 0.25\n  scale_rewards: none\n")
    params = json.loads(run_cli(["--from-run", str(both), "--json"], capsys)[1])["params"]
    assert (params["kl"], params["alpha"], params["beta"], params["norm"]) == ("both", 0.25, 0.5, "mean")

    null = write_run(tmp_path / "null", p_ref=p_ref, config="grpo:\n  beta: 0.5\n  kl: null\n")
    assert json.loads(run_cli(["--from-run", str(null), "--json"], capsys)[1])["params"]["kl"] == "ref"


def test_cli_from_run_without_config_needs_beta(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run", p_ref={"k": 4, "per_prompt": [{"prompt": "x", "p_ref": 0.5}], "mean": 0.5})
    with pytest.raises(UserError, match="--beta"):
        run_cli(["--from-run", str(run_dir)], capsys)
    result = json.loads(run_cli(["--from-run", str(run_dir), "--beta", "1", "--norm", "mean", "--json"], capsys)[1])
    assert result["p_star"] == pytest.approx(sigmoid(1.0))
