"""The calibrated success forecast: pooled p_ref, the fitted step size, and the live hook (synthetic data)."""

import json
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
        [hook] = callback.metric_hooks
        assert isinstance(hook, p_ref.ShownForecast) and type(hook.predictor) is expected
        fitted = [hook.predictor.observe] if name == "none" else []
        assert recorder.on_scored == [*fitted, hook.observe]


# --- honest or quiet: the rule --------------------------------------------------------------------

def test_a_band_wider_than_half_is_too_early_whatever_is_measured():
    view = forecast.judge_forecast(forecast.Band(0.249, 0.098, 1.0), measured=forecast.MeasuredSuccess(90, 160), step=80)
    assert not view.shown and "0.90 wide" in view.reason
    # quiet: neither the point nor the too-wide band is printed, only why and the measurement
    assert view.describe().startswith(forecast.TOO_EARLY) and "0.249" not in view.describe()
    assert "1.000" not in view.describe() and "0.098" not in view.describe() and "measured 0.562" in view.describe()
    # the band beside the measurement counts too, and so does an unmeasured forecast's
    narrow, wide = forecast.Band(0.3, 0.2, 0.4), forecast.Band(0.3, 0.1, 0.7)
    assert not forecast.judge_forecast(narrow, wide, forecast.MeasuredSuccess(5, 16)).shown
    assert not forecast.judge_forecast(wide).shown
    assert forecast.judge_forecast(forecast.Band(0.3, 0.05, 0.55)).shown  # exactly 0.5 wide


def test_a_band_the_measured_success_contradicts_is_too_early():
    # the 12-step quickstart: a narrow band around little learning beside a measured 0.27
    view = forecast.judge_forecast(forecast.Band(0.078, 0.048, 0.137), measured=forecast.MeasuredSuccess(43, 160),
                                   step=12, window_steps=5)
    assert not view.shown and "0.132 above the band: more than 0.1" in view.reason
    assert "0.048" not in view.describe() and "0.078" not in view.describe() and "measured 0.269" in view.describe()
    # less than 0.1 off but beyond the measurement's own Wilson interval (0.205-0.344): contradicted
    view = forecast.judge_forecast(forecast.Band(0.17, 0.12, 0.19), measured=forecast.MeasuredSuccess(43, 160))
    assert not view.shown and "beyond its sampling error" in view.reason
    # more than 0.1 off always contradicts, however few samples (1 of 4 has a Wilson interval up to 0.7)
    assert not forecast.judge_forecast(forecast.Band(0.5, 0.4, 0.6), measured=forecast.MeasuredSuccess(1, 4)).shown


def test_a_narrow_band_the_measurement_agrees_with_is_shown():
    view = forecast.judge_forecast(forecast.Band(0.3, 0.2, 0.4), measured=forecast.MeasuredSuccess(43, 160),
                                   step=80, window_steps=5)
    assert view.shown and view.reason == ""
    assert view.describe() == ("step 80: 0.300 [0.200, 0.400] (80% band); last 5 steps: 0.300 [0.200, 0.400], "
                               "measured 0.269 [0.205, 0.344] (43/160)")
    # outside the band by less than its sampling error: not contradicted (0 of 80 reaches up to 0.048)
    assert forecast.judge_forecast(forecast.Band(0.05, 0.03, 0.1), measured=forecast.MeasuredSuccess(0, 80)).shown
    assert forecast.judge_forecast(forecast.Band(0.3, 0.2, 0.4)).shown  # nothing measured yet cannot contradict


def test_a_prediction_without_a_band_is_held_to_its_point():
    """A KL run's success_predicted (the paper's recurrence) has no band: a band of width 0."""
    agreeing = forecast.judge_forecast(forecast.Band(0.3), measured=forecast.MeasuredSuccess(5, 16))
    assert agreeing.shown and "(no band)" in agreeing.describe()
    far = forecast.judge_forecast(forecast.Band(0.83), measured=forecast.MeasuredSuccess(29, 160))
    assert not far.shown and "above the prediction" not in far.reason and "below the prediction" in far.reason


def test_wilson_interval_is_not_empty_at_zero_or_all():
    assert forecast.MeasuredSuccess(0, 80).interval() == pytest.approx((0.0, 4 / 84))
    low, high = forecast.MeasuredSuccess(80, 80).interval()
    assert high == pytest.approx(1.0) and low == pytest.approx(80 / 84)


def test_judged_from_the_logged_lines_and_the_completions_of_the_last_steps():
    lines = [{"step": s, "reward": 0.1, "success_predicted": 0.1 * s, "success_predicted_low": 0.1 * s - 0.05,
              "success_predicted_high": 0.1 * s + 0.05} for s in (2, 4, 6)]
    lines.insert(1, {"step": 3, "loss": 0.2})  # a line without a forecast is not one of the window's
    records = [{"step": s, "success": int(i < s)} for s in range(1, 7) for i in range(8)]
    counts = forecast.success_counts(records)
    assert counts[3] == (3, 8) and counts[6] == (6, 8)
    view = forecast.judge_logged(lines, counts, steps=2)
    # window: the lines of steps 4 and 6, so the completions of steps 3-6 (after the line of step 2)
    assert view.step == 6 and view.window_steps == 2
    assert (view.measured.successes, view.measured.samples) == (3 + 4 + 5 + 6, 32)
    assert (view.at.predicted, view.at.low, view.at.high) == pytest.approx((0.6, 0.55, 0.65))
    assert view.beside.predicted == pytest.approx(0.5) and view.beside.bounds == pytest.approx((0.45, 0.55))
    assert view.shown  # measured 18/32 = 0.5625, Wilson [0.39, 0.72] reaches the band
    assert forecast.judge_logged([{"step": 1, "reward": 0.1}], counts) is None
    # by default the window is the train summary's: a quarter of the measured lines, at least 1, at most 5
    assert [forecast.recent_steps(n) for n in (1, 7, 8, 12, 20, 80)] == [1, 1, 2, 3, 5, 5]
    assert forecast.judge_logged(lines, counts).window_steps == 1
    # a line whose step reused a batch (no completions since the line before) is not a measured step
    reused = [*lines, {"step": 7, "success_predicted": 0.7, "success_predicted_low": 0.65, "success_predicted_high": 0.75}]
    view = forecast.judge_logged(reused, counts, steps=2)
    assert view.step == 7 and view.at.predicted == 0.7 and view.measured.samples == 32
    point_only = forecast.judge_logged([{"step": 1, "success_predicted": 0.2}], {1: (1, 8)})
    assert point_only.beside == forecast.Band(0.2) and point_only.shown


def test_the_hook_flags_each_line_as_the_files_would_judge_it(tmp_path):
    config, run, measured = _kl_none_run(tmp_path, 12)
    callback, recorder = SimpleNamespace(metric_hooks=[]), SimpleNamespace(on_scored=[])
    p_ref.attach_prediction(run, config, measured, recorder, callback)
    [hook] = callback.metric_hooks
    lines = []
    for step in range(1, 9):
        records = _records(step, [min(8, step), 8 if step > 4 else 0])
        for record in records:
            run.append(rundir.COMPLETIONS, record)
        for observe in recorder.on_scored:
            observe(step, records)
        values = hook(step)
        lines.append({"step": step, "reward": 0.0, **values})
        run.append(rundir.METRICS, lines[-1])
        assert values["forecast_shown"] == forecast.judge_logged(lines, forecast.success_counts(run.completions())).shown
    assert {line["forecast_shown"] for line in lines} == {True, False}  # this run has both
    resumed = p_ref.ShownForecast(hook.predictor, run)  # --resume: the lines and counts come back from the files
    assert resumed.lines == [m for m in run.metrics()] and resumed.counts == hook.counts


# --- honest or quiet: the consumers ---------------------------------------------------------------

def test_studio_success_panel_draws_the_band_and_the_forecast_only_where_it_may_be_shown(tmp_path):
    from apps import runs
    from apps.tabs import watch

    run = RunDir.create(str(tmp_path / "run"))
    band = {"success_predicted_low": 0.05, "success_predicted_high": 0.12}
    run.append(rundir.METRICS, {"step": 1, "success": 0.1, "success_predicted": 0.08, **band, "forecast_shown": True})
    run.append(rundir.METRICS, {"step": 2, "success": 0.1, "success_predicted": 0.09, **band, "forecast_shown": False})
    run.append(rundir.METRICS, {"step": 3, "success": 0.1, "success_predicted": 0.09, **band})  # from before the flag
    run.write_json(rundir.FORECAST, {"steps": [1, 2, 3, 4, 5], "success_predicted": [0.08, 0.09, 0.09, 0.1, 0.2],
                                     "success_predicted_low": [0.05, 0.05, 0.05, 0.06, 0.0],
                                     "success_predicted_high": [0.12, 0.12, 0.12, 0.14, 0.9]})
    for step in (1, 2, 3):
        for i in range(16):
            run.append(rundir.COMPLETIONS, {"step": step, "prompt": "p", "success": int(i < 2)})
    view = watch.forecast_view(run.metrics(), run.completions())
    assert view.shown and view.measured.mean == pytest.approx(0.125)
    frame = runs.curve_frames(run.metrics(), forecast=run.forecast(), verdict=view)["success"]

    def series(name):
        rows = frame[frame["series"] == name]
        return sorted(zip(rows["step"].tolist(), rows["value"].tolist()))

    assert [s for s, _ in series("forecast band (low)")] == [1, 2, 3, 4, 5]  # the band always
    # the point: where the line says so, and ahead where that step's band allows (step 5's is 0.9 wide)
    assert series("success (predicted)") == [(1, 0.08), (4, 0.1)]
    assert series("forecast band (high)")[-1] == (5, 0.9)
    no_view = runs.curve_frames(run.metrics(), forecast=run.forecast())["success"]
    assert no_view[no_view["series"] == "success (predicted)"]["step"].tolist() == [1]  # without a view: none ahead
    overview = runs.run_overview(run.path, run.metrics(), [], view)
    assert "success forecast: step 3: 0.090 [0.050, 0.120] (80% band)" in overview
    contradicted = watch.forecast_view(run.metrics(), [{"step": 3, "success": 1}] * 16)
    assert not contradicted.shown and forecast.TOO_EARLY in runs.run_overview(run.path, run.metrics(), [], contradicted)
    ahead = runs.curve_frames(run.metrics(), forecast=run.forecast(), verdict=contradicted)["success"]
    assert set(ahead[ahead["series"] == "success (predicted)"]["step"]) == {1}
    assert RunDir(str(tmp_path)).forecast() is None


def _write_forecast_run(tmp_path, successes_per_step):
    run = RunDir.create(str(tmp_path / "run"))
    run.write_json(rundir.FORECAST, {"fit_steps": 10, "level": 0.8, "beta": {"median": 31.0}, "steps": [1, 2, 3, 4],
                                     "success_predicted": [0.1, 0.2, 0.3, 0.4],
                                     "success_predicted_low": [0.0, 0.1, 0.2, 0.3],
                                     "success_predicted_high": [0.2, 0.3, 0.4, 0.6]})
    data = run.forecast()
    metrics = [{"step": s, "reward": 0.1, **{k: data[k][s - 1] for k in ("success_predicted", "success_predicted_low",
                                                                           "success_predicted_high")}} for s in (1, 2, 3, 4)]
    for step, k in zip((1, 2, 3, 4), successes_per_step):
        for i in range(16):
            run.append(rundir.COMPLETIONS, {"step": step, "prompt": "p", "success": int(i < k)})
    return run, metrics


def test_summary_shows_a_forecast_the_measurement_agrees_with(tmp_path):
    run, metrics = _write_forecast_run(tmp_path, [2, 3, 5, 6])  # measured 16/64 = 0.25 over steps 1-4
    summary = p_ref.forecast_summary(run, metrics)
    assert summary["shown"] and summary["step"] == 4 and (summary["predicted"], summary["low"], summary["high"]) == (0.4, 0.3, 0.6)
    # 4 logged steps: "the last steps" are the last one, as in the summary's success line
    assert summary["window_steps"] == 1 and summary["window_predicted"] == pytest.approx(0.4)
    assert summary["window_high"] == pytest.approx(0.6) and summary["measured"] == 0.375
    [line] = p_ref.forecast_lines(summary)
    assert "steps 1-10" in line and "step 4: 0.400 [0.300, 0.600] (80% band)" in line and "measured 0.375" in line
    assert p_ref.forecast_summary(RunDir.create(str(tmp_path / "kl-run")), [{"step": 1, "reward": 0.1}]) is None
    assert p_ref.forecast_lines(None) == []


def test_summary_says_too_early_when_the_measurement_contradicts_the_forecast(tmp_path):
    run, metrics = _write_forecast_run(tmp_path, [12, 13, 14, 15])  # measured 0.84: far above every band
    summary = p_ref.forecast_summary(run, metrics)
    assert not summary["shown"] and "above the band" in summary["reason"]
    [line] = p_ref.forecast_lines(summary)
    assert forecast.TOO_EARLY in line and "[0.300, 0.600]" not in line and "0.400" not in line


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
    counts = forecast.success_counts(run.completions())
    for i, m in enumerate(metrics):
        assert m["success_predicted_low"] <= m["success_predicted"] <= m["success_predicted_high"]
        assert m["forecast_shown"] == forecast.judge_logged(metrics[:i + 1], counts).shown  # the rule, per line
    saved = run.read_json(rundir.FORECAST)
    assert saved["fit_steps"] == 2 and saved["steps"] == [1, 2] and saved["params"]["norm"] == p_ref.FORECAST_NORM
    # the summary line obeys the rule, and agrees with the last line's flag
    shown = summary["forecast"]["shown"]
    assert summary["forecast"]["step"] == 2 and shown == metrics[-1]["forecast_shown"]
    [line] = [s for s in train.format_summary(summary).splitlines() if "success forecast" in s]
    if shown:
        assert summary["forecast"]["high"] - summary["forecast"]["low"] <= forecast.MAX_BAND_WIDTH
        assert summary["forecast"]["window_low"] - forecast.MAX_MISS <= summary["forecast"]["measured"]
        assert summary["forecast"]["measured"] <= summary["forecast"]["window_high"] + forecast.MAX_MISS
        assert f"step 2: {summary['forecast']['predicted']:.3f}" in line
    else:
        assert forecast.TOO_EARLY in line and f"{summary['forecast']['predicted']:.3f} [" not in line


# --- the calibration bench ------------------------------------------------------------------------

def _finished_run(path, steps, successes_per_step, band, fit_steps=10, seed=1):
    """A run directory as training leaves it: config, forecast.json fitted on steps 1-fit_steps, metrics, completions."""
    run = RunDir.create(str(path))
    with open(run.file(rundir.CONFIG), "w") as fh:
        fh.write(f"data: {{task: arithmetic}}\ngrpo: {{seed: {seed}, max_steps: {steps}, beta: 0.0}}\n")
    low, high = band
    run.write_json(rundir.FORECAST, {"fit_steps": fit_steps, "level": 0.8, "beta": {"median": 50.0},
                                     "p_ref": {"population_mean": 0.04}, "steps": list(range(1, steps + 1)),
                                     "success_predicted": [(low + high) / 2] * steps,
                                     "success_predicted_low": [low] * steps, "success_predicted_high": [high] * steps})
    for step in range(1, steps + 1):
        run.append(rundir.METRICS, {"step": step, "reward": 0.1, "success": successes_per_step / 8,
                                    "success_predicted": (low + high) / 2, "success_predicted_low": low,
                                    "success_predicted_high": high})
        for i in range(8):
            run.append(rundir.COMPLETIONS, {"step": step, "prompt": "p", "success": int(i < successes_per_step)})
    return run.path


def test_calibration_bench_scores_the_band_from_steps_1_to_10_against_the_last_10_steps(tmp_path):
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(
        "forecast_calibration", os.path.join(os.path.dirname(os.path.dirname(__file__)), "bench", "forecast_calibration.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    inside = bench.score(_finished_run(tmp_path / "a", 24, 2, (0.1, 0.4)))
    assert inside["window"] == [15, 24] and inside["measured_window"] == 0.25 and inside["measured_samples"] == 80
    assert inside["contained"] and inside["width_window"] == pytest.approx(0.3) and inside["shown_at_end"]
    outside = bench.score(_finished_run(tmp_path / "b", 24, 6, (0.1, 0.4), seed=2))
    assert not outside["contained"] and not outside["shown_at_end"] and "above the band" in outside["shown_reason"]
    short = bench.score(_finished_run(tmp_path / "c", 12, 2, (0.1, 0.4)))
    assert "overlap steps 1-10" in short["excluded"]
    early = bench.score(_finished_run(tmp_path / "d", 24, 2, (0.1, 0.4), fit_steps=4))
    assert "1-4, not 1-10" in early["excluded"]
    summary = bench.summarize([inside, outside, short, early])
    assert (summary["runs"], summary["runs_scored"], summary["contained"], summary["coverage"]) == (4, 2, 1, 0.5)
    assert summary["tasks"] == ["arithmetic"] and not summary["met"]
    assert "excluded: " in bench.markdown([inside, short]) and "| **yes** |" in bench.markdown([inside])
    # a stored bench/forecast_coverage.py result scores the same as the run directory it came from
    curve = RunDir(inside["run_dir"]).forecast()
    stored = tmp_path / "coverage.json"
    stored.write_text(json.dumps({"runs": [{"run_dir": "a", "seed": 1, "fit_steps": 10, "beta": curve["beta"],
                                            "measured": [0.25] * 24, "forecast": {
                                                k: curve[k] for k in ("success_predicted", "success_predicted_low",
                                                                      "success_predicted_high")}}]}))
    [replayed] = bench.stored_rows(str(stored), completions_per_step=8)
    same = ("window", "forecast_window", "width_window", "measured_window", "measured_samples", "contained", "shown_at_end")
    assert {k: replayed[k] for k in same} == {k: inside[k] for k in same}
