"""The calibrated success forecast: pooled p_ref, the fitted step size, and the live hook (synthetic data)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from local_grpo import dynamics, forecast, rundir
from local_grpo.config import Config
from local_grpo.rundir import RunDir
from local_grpo.train import p_ref

TRL_EPS = dynamics.mapping_from_trl(1.0, "group", 8)["eps"]


# --- pooled p_ref ------------------------------------------------------------------------------

def test_zero_of_four_on_every_prompt_is_small_but_not_zero():
    pool = forecast.pool_p_ref([0] * 8, [4] * 8)
    assert all(0.0 < p < 0.1 for p in pool.per_prompt)
    assert 0.0 < pool.mean < 0.1
    assert pool.weights.sum() == pytest.approx(1.0)
    assert float(pool.nodes @ pool.weights) == pytest.approx(pool.mean, abs=0.01)


def test_all_successes_pool_just_below_one():
    pool = forecast.pool_p_ref([4] * 8, [4] * 8)
    assert all(0.9 < p < 1.0 for p in pool.per_prompt)


def test_pooled_estimate_recovers_the_population_and_shrinks_each_prompt():
    rng = np.random.default_rng(3)
    q = rng.beta(2.0, 18.0, size=60)  # population mean 0.1
    counts = rng.binomial(20, q)
    pool = forecast.pool_p_ref(counts.tolist(), [20] * len(counts))
    assert pool.mean == pytest.approx(0.1, abs=0.02)
    for k, estimate in zip(counts, pool.per_prompt):  # between the prompt's own fraction and the pooled mean
        raw = k / 20
        assert min(raw, pool.mean) - 1e-9 <= estimate <= max(raw, pool.mean) + 1e-9


def test_pool_rejects_counts_that_are_not_counts():
    with pytest.raises(ValueError):
        forecast.pool_p_ref([5], [4])


def test_pool_measurement_keeps_the_raw_fraction_and_reads_old_files():
    measured = {"k": 4, "per_prompt": [{"prompt": "a", "p_ref": 0.0, "successes": 0, "samples": 4},
                                       {"prompt": "b", "p_ref": 0.25, "successes": 1, "samples": 4}],
                "mean": 0.125, "seconds": 1.0}
    pooled = p_ref.pool_measurement(measured)
    assert [p["p_ref_raw"] for p in pooled["per_prompt"]] == [0.0, 0.25]
    assert 0.0 < pooled["per_prompt"][0]["p_ref"] < pooled["per_prompt"][1]["p_ref"]
    assert pooled["successes"] == 1 and pooled["samples"] == 8 and pooled["mean_raw"] == 0.125
    old_format = {"k": 4, "per_prompt": [{"prompt": "a", "p_ref": 0.0}, {"prompt": "b", "p_ref": 0.25}]}
    assert p_ref.held_out_counts(old_format) == [(0, 4), (1, 4)]


# --- the vectorised recurrence -----------------------------------------------------------------

@pytest.mark.parametrize("kl", dynamics.KL_CHOICES)
@pytest.mark.parametrize("norm", dynamics.NORM_CHOICES)
def test_trajectories_match_trajectory(kl, norm):
    p_refs, betas = [0.0, 1e-6, 0.02, 0.4, 0.97, 1.0], [0.05, 1.0, 40.0]
    paths = dynamics.trajectories(p_refs, betas, kl=kl, norm=norm, steps=25)
    assert paths.shape == (3, 6, 26)
    for i, beta in enumerate(betas):
        for j, p in enumerate(p_refs):
            assert paths[i, j].tolist() == pytest.approx(dynamics.trajectory(p, beta, kl=kl, norm=norm, steps=25),
                                                         rel=1e-12, abs=1e-15)


# --- the fitted step size ----------------------------------------------------------------------

def synthetic_groups(beta, norm, rng, steps=10, groups_per_step=40, group_size=8):
    """Groups drawn from the model itself: prompts q ~ Beta(1, 9), each at p_{n-1}(q; beta)."""
    q = rng.beta(1.0, 9.0, size=4000)
    paths = dynamics.trajectories(q, [beta], kl="none", norm=norm, eps=TRL_EPS, steps=40)[0]
    held_out = rng.binomial(8, q[:16])
    groups = [(n, int(rng.binomial(group_size, paths[i, n - 1])), group_size)
              for n in range(1, steps + 1) for i in rng.integers(len(q), size=groups_per_step)]
    return paths.mean(axis=0), [(int(k), 8) for k in held_out], groups


@pytest.mark.parametrize("norm,true_beta", [("meanstd", 20.0), ("mean", 8.0)])
def test_fit_recovers_a_known_step_size_and_its_band_covers_the_truth(norm, true_beta):
    truth, held_out, groups = synthetic_groups(true_beta, norm, np.random.default_rng(7))
    fit = forecast.fit_step_size(held_out, groups, steps=40, kl="none", norm=norm, eps=TRL_EPS)
    beta = fit.beta_quantiles(level=0.98)
    assert beta["low"] <= true_beta <= beta["high"]
    assert math.log(beta["median"] / true_beta) == pytest.approx(0.0, abs=0.35)
    band, wide = fit.band(), fit.band(level=0.98)
    for n in (10, 20, 39):
        assert wide["low"][n] <= truth[n] <= wide["high"][n]
        assert wide["low"][n] <= band["low"][n] <= band["median"][n] <= band["high"][n] <= wide["high"][n]


def test_without_groups_the_step_size_is_its_prior():
    fit = forecast.fit_step_size([(1, 4), (0, 4)], [], steps=5)
    assert fit.betas.tolist() == forecast.BETA_GRID.tolist()
    assert fit.beta_posterior.tolist() == pytest.approx([1 / len(forecast.BETA_GRID)] * len(forecast.BETA_GRID))


def test_band_points_are_a_deterministic_sample_that_keeps_every_cells_probability():
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.full(50 * 40, 0.3)).reshape(50, 40)
    rows, columns, weights = forecast._systematic_sample(probabilities, 4096)
    sampled = np.zeros_like(probabilities)
    sampled[rows, columns] = weights
    assert weights.sum() == pytest.approx(1.0)
    assert np.abs(sampled - probabilities).max() < 1 / 4096  # each cell gets its share, to within one draw
    again = forecast._systematic_sample(probabilities, 4096)
    assert all(np.array_equal(x, y) for x, y in zip((rows, columns, weights), again))


# --- the live hook -----------------------------------------------------------------------------

def _records(step, successes_per_group):
    return [{"step": step, "prompt": f"s{step}-g{g}", "success": int(i < k)}
            for g, k in enumerate(successes_per_group) for i in range(8)]


def _kl_none_run(tmp_path, max_steps):
    """A kl-none config, a fresh run directory and a pooled p_ref of 8 prompts at 0/4."""
    config = Config()
    config.grpo.beta, config.grpo.max_steps = 0.0, max_steps
    run = RunDir.create(str(tmp_path / "run"))
    measured = p_ref.pool_measurement({"k": 4, "per_prompt": [{"prompt": f"h{i}", "p_ref": 0.0, "successes": 0,
                                                              "samples": 4} for i in range(8)]})
    return config, run, measured


def test_success_forecast_fits_on_the_first_steps_then_stays(tmp_path):
    config, run, measured = _kl_none_run(tmp_path, 20)
    hook = p_ref.SuccessForecast(measured, config, run, fit_steps=4)
    logged = []
    for step in range(1, 9):
        hook.observe(step, _records(step, [min(8, step), min(8, step + 1)]))
        logged.append(hook(step))
    before_any_step = forecast.fit_step_size(p_ref.held_out_counts(measured), [], steps=20).band()
    assert logged[0]["success_predicted"] == pytest.approx(before_any_step["median"][0], abs=1e-6)
    assert all(v["success_predicted_low"] <= v["success_predicted"] <= v["success_predicted_high"] for v in logged)
    saved = run.read_json(rundir.FORECAST)
    assert saved["fit_steps"] == 4 and len(saved["success_predicted"]) == 20
    assert logged[-1]["success_predicted"] == pytest.approx(saved["success_predicted"][7], abs=1e-6)

    for step in range(1, 5):  # --resume: the groups of the fitted steps come back from completions.jsonl
        for record in _records(step, [min(8, step), min(8, step + 1)]):
            run.append(rundir.COMPLETIONS, record)
    resumed = p_ref.SuccessForecast(measured, config, run, fit_steps=4)
    assert resumed.at_step(15) == pytest.approx(hook.at_step(15))


def test_success_forecast_refits_when_the_fitted_steps_double_and_at_the_last_fit_step(tmp_path):
    config, run, measured = _kl_none_run(tmp_path, 16)
    hook = p_ref.SuccessForecast(measured, config, run, fit_steps=10)
    fitted_through = []
    for step in range(1, 14):
        hook.observe(step, _records(step, [min(8, step // 2), 1]))
        hook(step)
        fitted_through.append(run.read_json(rundir.FORECAST)["fit_steps"])
    assert fitted_through == [1, 2, 2, 4, 4, 4, 4, 8, 8, 10, 10, 10, 10]


def test_kl_runs_keep_the_papers_prediction_and_kl_none_gets_the_forecast(tmp_path):
    measured = {"k": 4, "per_prompt": [{"prompt": "a", "p_ref": 0.25}]}
    config = Config()
    config.grpo.max_steps = 5
    for beta, expected, name in ((0.1, p_ref.PredictedSuccess, "ref"), (0.0, p_ref.SuccessForecast, "none")):
        config.grpo.beta = beta
        callback, recorder = SimpleNamespace(metric_hooks=[]), SimpleNamespace(on_scored=[])
        p_ref.attach_prediction(RunDir.create(str(tmp_path / name)), config, measured, recorder, callback)
        assert [type(h) for h in callback.metric_hooks] == [expected]
        assert recorder.on_scored == ([callback.metric_hooks[0].observe] if name == "none" else [])


def test_studio_success_panel_draws_the_band_and_the_forecast_ahead(tmp_path):
    from apps import runs

    run = RunDir.create(str(tmp_path / "run"))
    run.append(rundir.METRICS, {"step": 1, "success": 0.1, "success_predicted": 0.08,
                                "success_predicted_low": 0.05, "success_predicted_high": 0.12})
    run.write_json(rundir.FORECAST, {"steps": [1, 2, 3], "success_predicted": [0.08, 0.2, 0.3],
                                     "success_predicted_low": [0.05, 0.1, 0.2], "success_predicted_high": [0.12, 0.3, 0.5]})
    frame = runs.curve_frames(run.metrics(), forecast=run.forecast())["success"]
    band_low = frame[frame["series"] == "forecast band (low)"]
    assert band_low["step"].tolist() == [2, 3, 1] and band_low["value"].tolist() == [0.1, 0.2, 0.05]
    assert set(frame["series"]) == {"success", "success (predicted)", "forecast band (low)", "forecast band (high)"}
    assert RunDir(str(tmp_path)).forecast() is None


def test_summary_reports_the_forecast_at_the_last_step_and_over_the_last_steps(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    run.write_json(rundir.FORECAST, {"fit_steps": 10, "level": 0.8, "beta": {"median": 31.0}, "steps": [1, 2, 3, 4],
                                     "success_predicted": [0.1, 0.2, 0.3, 0.4],
                                     "success_predicted_low": [0.0, 0.1, 0.2, 0.3],
                                     "success_predicted_high": [0.2, 0.3, 0.4, 0.6]})
    metrics = [{"step": s, "success": 0.1 * s} for s in (1, 2, 3, 4)]
    summary = p_ref.forecast_summary(run, metrics, window=2)
    assert summary["step"] == 4 and (summary["predicted"], summary["low"], summary["high"]) == (0.4, 0.3, 0.6)
    assert summary["window_predicted"] == pytest.approx(0.35) and summary["window_high"] == pytest.approx(0.5)
    [line] = p_ref.forecast_lines(summary)
    assert "steps 1-10" in line and "step 4: 0.400 [0.300, 0.600] (80% band)" in line
    assert p_ref.forecast_summary(RunDir.create(str(tmp_path / "kl-run")), metrics, window=2) is None
    assert p_ref.forecast_lines(None) == []


def test_kl_none_training_logs_the_forecast_band_and_summarises_it(tiny_config, one_torch_thread):
    from local_grpo import train

    g = tiny_config.grpo
    g.beta, g.p_ref_samples, g.p_ref_prompts = 0.0, 2, 2
    summary = train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)
    measured = run.read_json(rundir.P_REF)
    assert all(0.0 < row["p_ref"] < 1.0 and "p_ref_raw" in row for row in measured["per_prompt"])
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["success_predicted_low"] <= m["success_predicted"] <= m["success_predicted_high"]
    saved = run.read_json(rundir.FORECAST)
    assert saved["fit_steps"] == 2 and saved["steps"] == [1, 2] and saved["params"]["norm"] == p_ref.FORECAST_NORM
    assert summary["forecast"]["step"] == 2 and "success forecast" in train.format_summary(summary)
