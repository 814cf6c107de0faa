"""Live success measurement (p_ref, success_predicted), signal diagnostics and zero-std filtering."""

import json
import math

import pytest

from local_grpo import dynamics, rundir
from local_grpo.train import diagnostics, filtering
from local_grpo.train import p_ref as success
from local_grpo.config import Config, RewardSpec
from local_grpo.rundir import RunDir


# --- the predictor's parameters and step mapping -------------------------------------------

def test_predictor_params_map_trl_settings():
    config = Config()
    config.grpo.beta, config.grpo.num_generations = 0.2, 8
    params = success.predictor_params(config)
    assert params["kl"] == "ref" and params["norm"] == "meanstd"
    assert params["beta"] == pytest.approx(0.2 * math.sqrt(8 / 7))
    config.grpo.beta, config.grpo.scale_rewards = 0.0, "none"
    params = success.predictor_params(config)
    assert params == {"kl": "none", "alpha": 0.5, "beta": success.NONE_STEP_BETA, "eps": 1e-5, "norm": "mean"}


def test_success_logged_at_step_n_is_compared_with_p_n_minus_1():
    config = Config()
    config.grpo.beta, config.grpo.max_steps = 1.0, 5
    p_ref = {"k": 4, "per_prompt": [{"prompt": "a", "p_ref": 0.25}, {"prompt": "b", "p_ref": 0.0}], "mean": 0.125}
    predicted = success.PredictedSuccess(p_ref, config)
    expected = dynamics.predict_dataset([0.25, 0.0], steps=5, **success.predictor_params(config))["trajectory"]
    assert predicted(1) == {"success_predicted": pytest.approx(0.125)}
    assert predicted(3)["success_predicted"] == pytest.approx(expected[2], abs=1e-6)
    assert predicted(99)["success_predicted"] == pytest.approx(expected[-1], abs=1e-6)


def test_measure_p_ref_judges_k_samples_per_prompt(tiny_config):
    from local_grpo import backends, data

    loaded = backends.load(tiny_config)
    _, held_out = data.load_examples(tiny_config)
    seen = {}

    def every_third_correct(completions, **kwargs):
        seen.update(kwargs)
        return [1.0 if i % 3 == 0 else 0.0 for i in range(len(completions))]

    was_training = loaded.model.training
    result = success.measure_p_ref(loaded.model, loaded.tokenizer, held_out[:2], every_third_correct,
                                   samples=3, max_new_tokens=4)
    assert result["k"] == 3 and [p["p_ref"] for p in result["per_prompt"]] == pytest.approx([1 / 3, 1 / 3])
    assert result["per_prompt"][0]["prompt"] == held_out[0]["question"]
    assert seen["answer"] == [held_out[0]["answer"]] * 3 + [held_out[1]["answer"]] * 3
    assert loaded.model.training == was_training


def test_existing_p_ref_is_reused_on_resume(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    saved = {"k": 2, "per_prompt": [{"prompt": "q", "p_ref": 0.5}], "mean": 0.5}
    run.write_json("p_ref.json", saved)
    assert success.ensure_p_ref(run, Config(), loaded=None, held_out=[], success_fn=None) == saved


# --- diagnostics ------------------------------------------------------------------------------

def _rows(n, **columns):
    """n metric lines; each column is a constant or a function of the step."""
    return [{"step": s, **{k.replace("__", "/"): (v(s) if callable(v) else v) for k, v in columns.items()}}
            for s in range(1, n + 1)]


def test_no_signal_streak_alert():
    rows = _rows(6, reward=0.0, frac_reward_zero_std=lambda s: 1.0 if s >= 2 else 0.5)
    found = diagnostics.alerts(rows)
    assert [a["kind"] for a in found] == ["no_signal_streak"] and found[0]["step"] == 4
    assert diagnostics.signal_summary(rows)["longest_no_signal_streak"] == 5


def test_alerts_are_written_once_and_not_again_on_resume(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    rows = _rows(4, reward=0.0, frac_reward_zero_std=1.0)
    diagnostics.AlertLog(run).update(rows)
    diagnostics.AlertLog(run).update(rows)  # resumed
    alerts = [e for e in run.events() if e["type"] == "alert"]
    assert [(a["kind"], a["step"]) for a in alerts] == [("no_signal_streak", 3)]


def test_length_drift_reward_hacking_and_format_saturation():
    rows = _rows(20, reward=lambda s: s / 20, success=0.0, frac_reward_zero_std=0.0,
                 completions__mean_length=lambda s: 20 + 5 * s, rewards__format_soft__mean=0.95)
    kinds = {a["kind"] for a in diagnostics.alerts(rows, ["format_soft"])}
    assert kinds == {"length_drift", "reward_without_success", "format_without_correctness"}
    healthy = _rows(20, reward=lambda s: s / 20, success=lambda s: s / 20, frac_reward_zero_std=0.2,
                    completions__mean_length=40, rewards__format_soft__mean=0.95)
    assert diagnostics.alerts(healthy, ["format_soft"]) == []
    lines = diagnostics.summary_lines(diagnostics.signal_summary(rows, ["format_soft"]))
    assert any("zero-std groups: 0%" in line for line in lines)
    assert any("signal alerts: format_without_correctness, length_drift, reward_without_success" in line for line in lines)


def _quickstart_like(n=40, success_end=0.74):
    """Length falls 41 -> 26 tokens while success goes 0.06 -> success_end (the quickstart's shape)."""
    return _rows(n, reward=lambda s: s / n, frac_reward_zero_std=0.2,
                 success=lambda s: 0.06 + (success_end - 0.06) * (s - 1) / (n - 1),
                 completions__mean_length=lambda s: 41 - 15 * (s - 1) / (n - 1))


def test_length_drift_while_success_rises_is_info_not_an_alert():
    rows = _quickstart_like()
    found = diagnostics.findings(rows)
    assert [(f["kind"], f["level"]) for f in found] == [("length_drift", "info")]
    assert "while success rose" in found[0]["message"] and diagnostics.alerts(rows) == []
    signal = diagnostics.signal_summary(rows)
    assert signal["alerts"] == [] and len(signal["info"]) == 1
    lines = diagnostics.summary_lines(signal)
    assert not any("signal alerts" in line for line in lines)
    assert any(line.startswith("  signal info: completion length moved from 40 to 27 tokens") for line in lines)


@pytest.mark.parametrize("success_end", [0.06, 0.0])  # flat, falling
def test_length_drift_while_success_is_flat_or_falling_is_an_alert(success_end):
    found = [f for f in diagnostics.findings(_quickstart_like(success_end=success_end)) if f["kind"] == "length_drift"]
    assert [f["level"] for f in found] == ["alert"] and "did not rise" in found[0]["message"]


def test_events_sort_into_reward_faults_and_signal_findings():
    cases = [
        ({"type": "reward_fault", "reward": "boom", "kind": "exception"}, "reward_fault"),
        ({"type": "alert", "reward": "boom", "message": "failed on every completion"}, "reward_fault"),
        ({"type": "alert", "source": "audit", "message": "reward audit: 2 of 4 wrong"}, "reward_fault"),
        ({"type": "alert", "kind": "no_signal_streak"}, "signal_alert"),
        ({"type": "alert", "kind": "length_drift"}, "signal_alert"),
        ({"type": "info", "kind": "length_drift"}, "signal_info"),
        ({"type": "info", "message": "training started"}, None),
        ({"type": "reward_reloaded", "reward": "boom", "message": "changed: syntax error"}, None),
        ({"type": "warning", "message": "grpo.kl mirror ..."}, None),
    ]
    assert [rundir.event_category(event) for event, _ in cases] == [expected for _, expected in cases]


def test_live_length_drift_is_info_then_an_alert_once_success_stops_rising(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    log = diagnostics.AlertLog(run)
    rows = _quickstart_like(20)
    for n in range(1, len(rows) + 1):
        log.update(rows[:n])
    # then success falls back while length stays short: the same kind, now an alert
    for step in range(21, 61):
        rows.append({**rows[19], "step": step, "success": 0.0})
        log.update(rows)
    diagnostics.AlertLog(run).update(rows)  # resumed: nothing new
    written = [(e["type"], e["kind"]) for e in run.events() if e.get("kind") == "length_drift"]
    assert written == [("info", "length_drift"), ("alert", "length_drift")]


def test_train_summary_counts_reward_faults_apart_from_signal_findings(tmp_path):
    from types import SimpleNamespace

    from local_grpo.tasks import fill_defaults
    from local_grpo.train import run as train

    run = RunDir.create(str(tmp_path / "run"))
    for row in _quickstart_like():
        run.append("metrics.jsonl", row)
    run.event("reward_fault", "ValueError: bad", step=3, reward="correct_numeric", kind="exception")
    run.event("alert", "completion length drifted", step=10, kind="length_drift")  # live, before success rose
    config = fill_defaults(Config())
    summary = train.summarize(run, config, SimpleNamespace(backend="hf", device="cpu"), seconds=1.0)
    assert (summary["reward_faults"], summary["signal_alerts"]) == (1, 0)
    text = train.format_summary(summary)
    assert "  reward faults: 1 (" in text and "signal alerts" not in text
    assert "signal info: completion length moved from 40 to 27 tokens while success rose 0.09 -> 0.71" in text


# --- zero-std filtering ----------------------------------------------------------------------

class FakeRepeatSampler:
    """TRL's RepeatSampler layout: batch_size prompts, each repeated mini_repeat_count times."""

    batch_size, mini_repeat_count, repeat_count = 2, 3, 1

    def __init__(self, n):
        self.order = list(range(n))

    def __iter__(self):
        for i in range(0, len(self.order) - len(self.order) % self.batch_size, self.batch_size):
            for index in self.order[i:i + self.batch_size]:
                yield from [index] * self.mini_repeat_count

    def __len__(self):
        return len(self.order) * self.mini_repeat_count


def test_prompts_retired_after_zero_std_visits_are_skipped(tmp_path):
    run = RunDir.create(str(tmp_path / "run"))
    rows = [{"question": f"q{i}"} for i in range(6)]
    zero_std_filter = filtering.ZeroStdFilter(run, rows)
    same, mixed = [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    for step in (1, 2):  # q1 all-same twice: retired; q2 mixed once: kept
        zero_std_filter(step, [{"prompt": "q1", "total": t} for t in same] + [{"prompt": "q2", "total": t} for t in mixed])
    assert zero_std_filter.retired == {1}
    assert any(e.get("kind") == "prompt_retired" for e in run.events())

    sampler = filtering.SkipRetiredSampler(FakeRepeatSampler(6), zero_std_filter.retired)
    indices = list(sampler)
    assert indices == [0, 0, 0, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 1, 1, 1]  # 1 moved to the end of the epoch
    assert sampler.skipped == 1 and len(indices) == len(sampler)

    everything = filtering.SkipRetiredSampler(FakeRepeatSampler(4), {0, 1, 2, 3})
    assert list(everything) == list(FakeRepeatSampler(4))  # all retired: same epoch, training never stalls


# --- end to end on the tiny model ------------------------------------------------------------

def test_train_writes_p_ref_predicted_success_and_signal_summary(tiny_config):
    from local_grpo import train

    g = tiny_config.grpo
    g.kl, g.beta, g.num_iterations = "mirror", 0.5, 2
    g.p_ref_samples, g.p_ref_prompts = 2, 2
    g.filter_zero_std = True
    tiny_config.rewards = [RewardSpec("length_target", 1.0, {"min": 1000, "max": 2000, "unit": "chars"}),
                           RewardSpec("correct_numeric", 1.0)]
    summary = train.train(tiny_config, progress=False)
    run = RunDir.open(tiny_config.output_dir)

    p_ref = json.loads(open(run.file("p_ref.json")).read())
    assert p_ref["k"] == 2 and len(p_ref["per_prompt"]) == 2
    assert p_ref["predicted"]["params"]["kl"] == "mirror"

    metrics = run.metrics()
    assert metrics[0]["success_predicted"] == pytest.approx(p_ref["mean"])
    assert [m["step"] for m in metrics] == [1, 2]  # step 2 reuses step 1's batch: loss and kl_mirror, no reward
    assert "success" in metrics[0] and all("success_predicted" in m for m in metrics)
    # num_iterations 2: step 1 is the first pass over a batch (same policy), step 2 follows an update
    assert metrics[0]["kl_mirror"] == pytest.approx(0.0, abs=1e-6)
    assert metrics[1]["kl_mirror"] > 0

    assert set(summary["signal"]) >= {"frac_zero_std", "longest_no_signal_streak", "alerts"}
    assert "zero-std groups" in train.format_summary(summary)
