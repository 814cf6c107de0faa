"""The studio's pure functions on real files: run tables and curves, the reward designer, the launcher."""

from __future__ import annotations

import json
import os
import sys

import pytest

from apps import designer, launcher, runs
from local_grpo.cli.app import is_loopback
from apps.tabs.common import parse_weights
from apps.tabs.train import form_overrides
from local_grpo.errors import UserError
from local_grpo.rundir import RunDir


def write_run(path, steps: int = 4, finished: bool = True, torn: bool = True) -> str:
    """A run directory with the files train.py writes: config, metrics, completions, events, summary."""
    run = RunDir.create(str(path))
    with open(run.file("config.yaml"), "w") as fh:
        fh.write("model: {name: embedded}\ndata: {task: arithmetic}\n"
                 "rewards:\n- {name: format_soft, weight: 0.5, params: {}}\n- {name: correct_numeric, weight: 1.0, params: {}}\n"
                 "grpo: {max_steps: 4}\n")
    for step in range(1, steps + 1):
        run.append("metrics.jsonl", {"step": step, "reward": 0.2 * step, "reward_std": 0.3,
                                     "rewards/format_soft/mean": 0.1 * step, "rewards/correct_numeric/mean": 0.05 * step,
                                     "frac_reward_zero_std": 0.5 - 0.1 * step, "completions/mean_length": 30 + step,
                                     "kl": 0.01 * step, "success": 0.1 * step, "success_predicted": 0.09 * step,
                                     "forecast_shown": True, "time": 1.5 * step})
        for i in range(4):
            correct = None if (step == 2 and i == 0) else float(i % 2)
            total = 0.5 * 0.25 * i + (correct or 0.0)
            run.append("completions.jsonl", {"step": step, "prompt": f"What is {step} + {i}?", "completion": f"Answer: {step + i}",
                                             "answer": str(step + i), "rewards": {"format_soft": 0.25 * i, "correct_numeric": correct},
                                             "total": total, "success": int(correct == 1.0)})
    run.event("info", "training started", step=0)
    run.event("reward_fault", "ValueError: bad", step=2, reward="correct_numeric", kind="exception")
    run.event("alert", "reward correct_numeric failed on every completion", step=3, reward="correct_numeric")
    if finished:
        run.write_json("summary.json", {"steps": steps})
        os.makedirs(run.adapter_dir)
        with open(os.path.join(run.adapter_dir, "adapter_config.json"), "w") as fh:
            fh.write("{}")
    if torn:
        with open(run.file("metrics.jsonl"), "a") as fh:
            fh.write('{"step": 99, "rew')  # a writer killed mid-line
    return run.path


SAMPLES = [
    {"prompt": "1+1", "answer": "2", "completion": "Answer: 2", "group": "a"},
    {"prompt": "1+1", "answer": "2", "completion": "Answer: 3", "group": "a"},
    {"prompt": "2+2", "answer": "4", "completion": "I think 4", "group": "b"},
    {"prompt": "2+2", "answer": "4", "completion": "no idea", "group": "b"},
]


# --- runs.py ------------------------------------------------------------------------------

def test_runs_table_lists_runs_with_status_and_last_metrics(tmp_path):
    write_run(tmp_path / "done")
    write_run(tmp_path / "group" / "live", finished=False)
    (tmp_path / "not-a-run").mkdir()
    table = runs.runs_table(str(tmp_path))
    by_run = {row["run"]: row for row in table.to_dict("records")}
    assert set(by_run) == {"done", os.path.join("group", "live")}
    assert by_run["done"]["status"] == "finished"
    assert by_run[os.path.join("group", "live")]["status"] == "running"  # files just written
    assert by_run["done"]["steps"] == 4 and by_run["done"]["reward"] == pytest.approx(0.8)


def test_curve_frames_are_long_format_per_panel(tmp_path):
    metrics = RunDir(write_run(tmp_path / "r")).metrics()  # the torn last line is skipped
    frames = runs.curve_frames(metrics)
    assert set(frames) == {"reward", "success", "length", "kl", "zero_std", "step_time"}
    reward = frames["reward"]
    assert list(reward.columns) == ["step", "value", "series"]
    assert set(reward["series"]) == {"total reward", "format_soft", "correct_numeric"}
    assert len(reward) == 12
    assert set(frames["success"]["series"]) == {"success", "success (predicted)"}
    assert frames["kl"]["value"].tolist() == pytest.approx([0.01, 0.02, 0.03, 0.04])


def test_curve_frames_without_optional_metrics_are_empty():
    frames = runs.curve_frames([{"step": 1, "reward": 0.5}])
    assert frames["kl"].empty and frames["success"].empty
    assert frames["reward"]["value"].tolist() == [0.5]


def test_completions_table_views(tmp_path):
    completions = RunDir(write_run(tmp_path / "r")).completions()
    latest = runs.completions_table(completions, "latest")
    assert set(latest["step"]) == {4} and len(latest) == 4
    assert list(latest.columns) == ["step", "prompt", "answer", "completion", "format_soft", "correct_numeric", "total", "success"]
    best = runs.completions_table(completions, "best", limit=3)
    assert best["total"].tolist() == sorted(best["total"].tolist(), reverse=True)
    worst = runs.completions_table(completions, "worst", limit=3)
    assert worst["total"].iloc[0] == 0.0
    faults = runs.completions_table(completions, "faults")
    assert len(faults) == 1 and faults["correct_numeric"].iloc[0] == "fault"
    with pytest.raises(UserError, match="view"):
        runs.completions_table(completions, "random")


def test_alerts_newest_first_and_overview(tmp_path):
    path = write_run(tmp_path / "r")
    events = RunDir(path).events()
    alerts = runs.alerts_table(events)
    assert alerts["type"].tolist() == ["alert", "reward_fault", "info"]
    overview = runs.run_overview(path, RunDir(path).metrics(), events)
    assert "finished" in overview and "step 4 of 4" in overview and "⚠ 2 reward fault(s)" in overview
    assert "learning-signal" not in overview  # no signal finding in this run


def test_overview_counts_signal_alerts_apart_and_an_info_finding_as_neither(tmp_path):
    path = write_run(tmp_path / "r")
    run = RunDir(path)
    run.event("alert", "completion length moved while success did not rise", step=10, kind="length_drift")
    run.event("info", "completion length moved while success rose", step=20, kind="length_drift")
    assert runs.signal_alerts(run.events()) == []  # the latest length_drift finding is info
    run.event("alert", "no learning signal for 3 steps", step=22, kind="no_signal_streak")
    assert runs.signal_alerts(run.events()) == ["no_signal_streak"]
    overview = runs.run_overview(path, run.metrics(), run.events())
    assert "⚠ 2 reward fault(s)" in overview and "⚠ 1 learning-signal alert(s): no_signal_streak" in overview
    assert "forecast" not in overview  # no view given


def test_eval_compare_table_reads_the_written_schema(tmp_path):
    path = write_run(tmp_path / "r")
    assert runs.eval_compare_table(path).empty
    with open(os.path.join(path, "eval_compare.json"), "w") as fh:
        json.dump({"base": {"pass@1": 0.1, "format": 0.2}, "trained": {"pass@1": 0.4, "format": 0.9}}, fh)
    table = runs.eval_compare_table(path)
    assert table.set_index("metric").loc["pass@1", "change"] == pytest.approx(0.3)
    with open(os.path.join(path, "eval_compare.json"), "w") as fh:
        json.dump({"success": {"base": 0.2, "trained": 0.5}, "k": 4}, fh)  # not the schema eval writes
    assert runs.eval_compare_table(path).empty


def test_resolve_under_rejects_traversal(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    root = str(tmp_path / "runs")
    assert runs.resolve_under(root, "a") == os.path.realpath(os.path.join(root, "a"))
    for bad in ("../etc", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(UserError, match="run"):
            runs.resolve_under(root, bad, "run")
    os.symlink("/tmp", os.path.join(root, "escape"))
    with pytest.raises(UserError, match="outside the runs folder"):
        runs.resolve_under(root, "escape", "run")


def test_configured_weights_follow_control_json(tmp_path):
    path = write_run(tmp_path / "r")
    assert runs.configured_weights(path) == {"format_soft": 0.5, "correct_numeric": 1.0}
    launcher.write_weights(path, {"format_soft": 0.0})
    assert runs.configured_weights(path)["format_soft"] == 0.0
    assert launcher.read_control(path) == {"weights": {"format_soft": 0.0}}


def test_configured_weights_key_repeated_rewards_like_the_trainer(tmp_path):
    path = write_run(tmp_path / "r")
    with open(os.path.join(path, "config.yaml"), "w") as fh:
        fh.write("rewards:\n- {name: format_soft, weight: 1.0}\n- {name: format_soft, weight: 10.0, params: {scale: 0.5}}\n")
    assert runs.configured_weights(path) == {"format_soft": 1.0, "format_soft#2": 10.0}


# --- designer.py --------------------------------------------------------------------------

def test_template_scores_table_totals_histogram_and_zero_std():
    result = designer.score_code(designer.TEMPLATE, SAMPLES)
    assert result.problem is None and result.functions == ["ends_with_answer", "matches_gold"]
    table = designer.results_table(result)
    assert table["total"].tolist() == [2.0, 1.0, 0.0, 0.0]
    assert designer.zero_std_groups(result.totals, [s["group"] for s in SAMPLES]) == (1, 2)
    hist = designer.histogram_frame(result)
    assert set(hist["reward"]) == {"ends_with_answer", "matches_gold", "total"}
    assert hist.groupby("reward")["count"].sum().to_dict() == {"ends_with_answer": 4, "matches_gold": 4, "total": 4}
    assert "Zero-std groups: 1 of 2 (50%)" in designer.summary_markdown(result)


def test_syntax_error_is_reported_with_its_line():
    code = "def ok(completions, **kw):\n    return [1.0] * len(completions)\n\ndef bad(completions, **kw):\n    return [1.0 for c in completions\n"
    result = designer.score_code(code, SAMPLES)
    assert result.problem.startswith("syntax error at line 5")
    assert "Cannot score" in designer.summary_markdown(result)


def test_exception_and_timeout_are_faults_within_the_limit():
    import time

    code = ("def boom(completions, **kw):\n    raise ValueError('no gold here')\n\n"
            "def forever(completions, **kw):\n    while True:\n        pass\n\n"
            "def fine(completions, **kw):\n    return [0.5] * len(completions)\n")
    started = time.monotonic()
    result = designer.score_code(code, SAMPLES, timeout_s=1.0)
    assert time.monotonic() - started < 8
    kinds = {f["reward"]: f["kind"] for f in result.faults}
    assert kinds == {"boom": "exception", "forever": "timeout"}
    assert "ValueError: no gold here" in designer.summary_markdown(result)
    assert designer.results_table(result)["boom"].tolist() == ["fault"] * 4
    assert result.scores["fine"] == [0.5] * 4


def test_user_code_runs_in_a_child_process(tmp_path):
    # the score is the pid (the reward sandbox keeps user code from writing a marker file outside its temp dir)
    code = "import os\n\ndef who(completions, **kw):\n    return [float(os.getpid())] * len(completions)\n"
    pid = designer.score_code(code, SAMPLES[:1]).scores["who"][0]
    assert pid is not None and int(pid) != os.getpid()


def test_chat_completions_as_in_training():
    code = "def is_chat(completions, **kw):\n    return [1.0 if isinstance(c, list) else 0.0 for c in completions]\n"
    assert designer.score_code(code, SAMPLES, chat=True).scores["is_chat"] == [1.0] * 4
    assert designer.score_code(code, SAMPLES, chat=False).scores["is_chat"] == [0.0] * 4


def test_builtin_template_is_editable_and_scores():
    code = designer.builtin_template("format_soft")
    assert designer.reward_functions(code) == ["my_format_soft"]
    result = designer.score_code(code, SAMPLES)
    assert not result.faults and result.scores["my_format_soft"][0] == 1.0


def test_samples_from_run_and_pasted(tmp_path):
    path = write_run(tmp_path / "r")
    samples = designer.samples_from_run(path, steps=2)
    assert len(samples) == 8 and len({s["group"] for s in samples}) == 8
    assert designer.parse_samples(designer.samples_to_text(samples)) == samples
    pasted = designer.parse_samples("first answer\n---\nsecond\nanswer\n")
    assert [s["completion"] for s in pasted] == ["first answer", "second\nanswer"]
    with pytest.raises(UserError, match="line 2"):
        designer.parse_samples('{"completion": "a"}\n{"oops"')
    with pytest.raises(UserError, match="samples"):
        designer.parse_samples("  ")


def test_saved_file_is_a_trainer_reward(tmp_path):
    import rewards

    path, specs = designer.save_reward_file(designer.TEMPLATE, str(tmp_path / "rewards"), "mine")
    assert specs == [f"{path}:ends_with_answer", f"{path}:matches_gold"]
    assert designer.saved_reward_specs(str(tmp_path / "rewards")) == specs
    reward = rewards.get(specs[0])  # what the trainer does with path/file.py:function
    assert reward(["Answer: 4"]) == [1.0]
    for bad in ("../evil", "a/b", ""):
        with pytest.raises(UserError, match="file name"):
            designer.save_reward_file(designer.TEMPLATE, str(tmp_path / "rewards"), bad)
    with pytest.raises(UserError, match="syntax error at line 1"):
        designer.save_reward_file("def (", str(tmp_path / "rewards"), "broken")


# --- launcher, export, cli helpers --------------------------------------------------------

def test_train_command_from_the_form(tmp_path):
    request = launcher.TrainRequest(run_name="r1", model="embedded", task="countdown",
                                    rewards={"format_soft": 0.5, "/x/my.py:f": 1}, preset="cpu", max_steps=3,
                                    overrides={"num-generations": 4, "load-in-4bit": False, "loss-type": ""})
    command = launcher.train_command(request, str(tmp_path))
    m = command.index("-m")
    assert command[0] == sys.executable and command[m:m + 3] == ["-m", "local_grpo.cli", "train"]
    text = " ".join(command)
    assert f"--output {os.path.realpath(tmp_path)}/r1" in text
    assert "--task countdown" in text and "--preset cpu" in text and "--max-steps 3" in text
    assert "--rewards format_soft:0.5,/x/my.py:f:1" in text
    assert "--num-generations 4" in text and "--no-load-in-4bit" in text and "--loss-type" not in text
    assert "--force" not in command
    forced = launcher.train_command(launcher.TrainRequest(run_name="r2", force=True), str(tmp_path))
    assert forced[-1] == "--force"
    with pytest.raises(UserError, match="run name"):
        launcher.train_command(launcher.TrainRequest(run_name="../up"), str(tmp_path))


def test_train_command_is_accepted_by_the_cli_parser(tmp_path):
    from local_grpo.cli import build_parser

    request = launcher.TrainRequest(run_name="r1", rewards={"format_soft": 0.5}, preset="cpu", max_steps=3,
                                    overrides={"num-generations": 4, "learning-rate": 0.001}, force=True)
    command = launcher.train_command(request, str(tmp_path))
    args = build_parser().parse_args(command[command.index("local_grpo.cli") + 1:])
    assert args.command == "train" and args.cfg__num_generations == 4 and args.rewards == "format_soft:0.5"
    assert args.force


def test_form_helpers():
    assert parse_weights("format_soft: 0.5\n/x/f.py:fn\n# comment\nb:2", "rewards") == {
        "format_soft": 0.5, "/x/f.py:fn": 1.0, "b": 2.0}
    assert form_overrides([4, None, "", 0.001]) == {"num-generations": 4, "learning-rate": 0.001}
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")


def test_export_tab_goes_through_the_verified_export(tmp_path):
    from apps.tabs.export import export

    path = write_run(tmp_path / "r")
    with pytest.raises(UserError, match="--format"):
        export(path, "onnx", str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


# --- Watch: smoothing, KL note, eval, one prompt across steps ------------------------------

def test_moving_average_is_trailing_and_starts_short():
    assert runs.moving_average([1, 2, 3, 4, 5], 3) == pytest.approx([1.0, 1.5, 2.0, 3.0, 4.0])
    assert runs.moving_average([1, 5], 1) == [1.0, 5.0]


def test_smoothed_curves_keep_the_raw_line_faint(tmp_path):
    metrics = RunDir(write_run(tmp_path / "r")).metrics()
    frames = runs.curve_frames(metrics, smoothing=2)
    length = frames["length"]
    raw = length[length["series"] == "mean length (tokens) (raw)"]["value"].tolist()
    smooth = length[length["series"] == "mean length (tokens)"]["value"].tolist()
    assert raw == [31.0, 32.0, 33.0, 34.0] and smooth == [31.0, 31.5, 32.5, 33.5]
    success = frames["success"]
    assert set(success["series"]) == {"success", "success (raw)", "success (predicted)"}  # the forecast is not smoothed
    colors = runs.curve_colors(success)
    assert colors["success (raw)"] == colors["success"] + runs.RAW_ALPHA
    assert set(runs.curve_frames(metrics, smoothing=1)["length"]["series"]) == {"mean length (tokens)"}


def test_eval_pass_at_1_is_drawn_beside_success():
    metrics = [{"step": 1, "success": 0.1}, {"step": 2, "success": 0.2}, {"step": 2, "eval/pass@1": 0.25},
               {"step": 4, "success": 0.3, "eval/pass@1": 0.5}]
    success = runs.curve_frames(metrics, smoothing=3)["success"]
    evals = success[success["series"] == "held-out pass@1 (eval)"]
    assert evals["step"].tolist() == [2, 4] and evals["value"].tolist() == [0.25, 0.5]  # as logged


def test_kl_note_says_why_the_kl_plot_is_empty(tmp_path):
    path = write_run(tmp_path / "r")  # its config has no grpo.beta: the default 0
    empty = runs.curve_frames([{"step": 1, "reward": 0.1}])["kl"]
    assert "grpo.beta: 0" in runs.kl_note(path, empty)
    assert runs.kl_note(path, runs.curve_frames([{"step": 1, "kl": 0.1}])["kl"]) == ""
    with open(os.path.join(path, "config.yaml"), "a") as fh:
        fh.write("grpo: {max_steps: 4, beta: 0.04}\n")
    assert runs.kl_note(path, empty) == "**KL:** no value logged yet."


def test_one_prompt_across_steps(tmp_path):
    completions = [{"step": s, "prompt": p, "completion": f"{p} at {s}", "rewards": {"r": float(s > 1)},
                    "total": float(s > 1), "success": s > 1} for s in (1, 2, 3) for p in ("a", "b") if (p, s) != ("b", 3)]
    completions.append({"step": 3, "prompt": "a", "completion": "again", "rewards": {"r": 0.0}, "total": 0.0,
                        "success": False})
    choices = runs.prompt_choices(completions)
    assert [value for _label, value in choices] == ["a", "b"] and choices[0][0] == "a (3 steps)"
    history = runs.prompt_history(completions, "a")
    assert history["step"].tolist() == [1, 2, 3, 3] and "prompt" not in history.columns
    assert history["completion"].tolist()[:2] == ["a at 1", "a at 2"]
    curve = runs.prompt_curve(completions, "a")
    rate = curve[curve["series"] == "success rate"]
    assert rate["step"].tolist() == [1, 2, 3] and rate["value"].tolist() == [0.0, 1.0, 0.5]
    assert runs.prompt_history(completions, "missing").empty


# --- the rewards check panel (apps.checks) ------------------------------------------------

def check_result() -> dict:
    """A result in the documented --json shape (docs/reward-check.md), with hand-picked numbers."""
    histogram = {"edges": [0.0, 0.5, 1.0], "counts": [6, 2]}
    return {
        "model": "embedded", "task": "arithmetic", "num_generations": 4, "prompts": 2, "samples": 8, "seed": 0,
        "max_new_tokens": 12, "temperature": 1.0, "cache": {"path": "/x/abc.jsonl", "hit": True},
        "seconds": {"generate": 0.0, "score": 0.1, "probe": 0.1, "total": 1.2},
        "rewards": [{"name": "correct_numeric", "weight": 1.0, "success_threshold": 0.999, "mean": 0.25, "std": 0.433,
                     "fraction_none": 0.0, "histogram": histogram, "faults": {}},
                    {"name": "format_soft", "weight": 0.2, "success_threshold": 0.999, "mean": 0.5, "std": 0.5,
                     "fraction_none": 0.125, "histogram": histogram, "faults": {"exception": 1}}],
        "zero_std_fraction": 0.5,
        "per_prompt": [{"index": 0, "question": "1+1", "answer": "2", "p_ref": 0.5, "total_mean": 0.6, "total_std": 0.5,
                        "zero_std": False},
                       {"index": 1, "question": "2+2", "answer": "4", "p_ref": 0.0, "total_mean": 0.0, "total_std": 0.0,
                        "zero_std": True}],
        "p_ref": {"reward": "correct_numeric", "threshold": 0.999, "mean": 0.25},
        "forecast": {"steps": 40, "p_ref_mean": 0.25, "p_star": 0.5, "success_at_max_steps": 0.4, "note": "beta > 0"},
        "variance_scale": "group", "variance_shares": {"correct_numeric": 0.8, "format_soft": 0.2},
        "agreement": [{"a": "correct_numeric", "b": "format_soft", "both": 1, "a_only": 1, "b_only": 3, "neither": 3,
                       "examples": {"a_only": [{"group": 0, "completion": "2", "scores": {"correct_numeric": 1.0,
                                                                                          "format_soft": 0.0}}],
                                    "b_only": []}}],
        "probe": {"correct_numeric": {"false_positive_rate": 0.0, "false_negative_rate": 0.1, "battery": "numeric",
                                      "completions": 120}},
        "verdict": {"kind": "learnable", "text": "learnable", "reason": "1 of 2 prompts vary", "warnings": []},
    }


def test_check_tables_render_the_documented_keys():
    from apps import checks

    result = check_result()
    text = checks.verdict_markdown(result)
    assert "Verdict: learnable" in text and "1 of 2 prompts vary" in text and "Zero-std groups: 1/2 (50%)" in text
    assert "read from the cache" in text
    stats = checks.reward_stats_table(result).set_index("reward")
    assert stats.loc["correct_numeric", "variance share"] == 0.8 and stats.loc["format_soft", "faults"] == "exception: 1"
    assert stats.loc["format_soft", "histogram range"] == "0 to 1"
    bins = checks.histogram_frame(result)
    assert bins[bins["reward"] == "format_soft"][["bin", "count"]].values.tolist() == [["01", 6], ["02", 2]]
    assert checks.shares_frame(result)["share"].tolist() == [0.8, 0.2]
    assert checks.per_prompt_table(result)["zero std"].tolist() == [False, True]
    agreement = checks.agreement_table(result).iloc[0]
    assert (agreement["both"], agreement["only a"], agreement["only b"], agreement["neither"]) == (1, 1, 3, 3)
    examples = checks.disagreement_examples(result)
    assert examples[["only", "completion"]].values.tolist() == [["correct_numeric", "2"]]
    assert checks.probe_table(result)["false negative rate"].tolist() == [0.1]


def test_check_progress_lines_are_the_clis():
    from apps import checks
    from local_grpo.cli.reward_check import StderrProgress

    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        for stage, done, total in (("generate", 8, 64), ("score", 64, 64), ("probe", 1, 1)):
            StderrProgress()(stage, done, total)
    parsed = [checks.parse_progress(line) for line in err.getvalue().splitlines()]
    assert parsed == [("generate", 8, 64), ("score", 64, 64), ("probe", 1, 1)]
    assert checks.parse_progress("Loading weights 3/10") is None


def test_check_config_from_the_form_and_its_errors(tmp_path):
    from apps import checks

    config = checks.check_config(checks.CheckRequest(preset="cpu", task="countdown", num_generations=6,
                                                     rewards={"countdown": 1.0, "format_soft": 0.2}))
    assert config.data.task == "countdown" and config.grpo.num_generations == 6
    assert config.grpo.per_device_train_batch_size % 6 == 0  # the cpu preset's 16 rounded up to whole groups
    assert [(r.name, r.weight) for r in config.rewards] == [("countdown", 1.0), ("format_soft", 0.2)]
    assert config.success_reward == "countdown" and config.preset == "cpu"
    defaults = checks.check_config(checks.CheckRequest(task="arithmetic"))
    assert [r.name for r in defaults.rewards] and defaults.success_reward == "correct_numeric"  # the task's defaults
    with pytest.raises(UserError, match="prompts"):
        checks.check_config(checks.CheckRequest(prompts=0))
    with pytest.raises(UserError, match="preset"):
        checks.check_config(checks.CheckRequest(preset="9gb"))
    with pytest.raises(UserError, match="num_generations"):
        checks.check_config(checks.CheckRequest(num_generations=0))


def test_cached_check_samples_load_into_the_designer(tmp_path):
    from apps import checks
    from local_grpo.reward_check import write_cache

    folder = tmp_path / checks.CACHE_FOLDER
    key = {"model": "/m/tiny", "prompts": ["1+1", "2+2"], "num_generations": 2}
    samples = [{"group": g, "prompt": p, "answer": a, "completion": f"Answer: {c}", "tokens": 3}
               for g, (p, a) in enumerate((("1+1", "2"), ("2+2", "4"))) for c in (a, "0")]
    write_cache(str(folder / "abc.jsonl"), key, samples, 1.0)
    [(label, name)] = checks.cache_files(str(tmp_path))
    assert name == "abc.jsonl" and "tiny · 2 prompts × G=2" in label
    loaded = checks.cached_samples(str(folder / name))
    assert len(loaded) == 4 and loaded[0]["group"] == loaded[1]["group"] != loaded[2]["group"]
    result = designer.score_code(designer.TEMPLATE, designer.parse_samples(designer.samples_to_text(loaded)))
    assert result.scores["matches_gold"] == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(UserError, match="cache"):
        checks.cached_samples(str(tmp_path / "missing.jsonl"))


# --- Compare with a reference reward ------------------------------------------------------

def test_compare_lists_only_the_disagreements():
    code = ("def says_two(completions, **kwargs):\n"
            "    return [1.0 if '2' in c[-1]['content'] else 0.0 for c in completions]\n")
    samples = [dict(s) for s in SAMPLES]  # Answer: 2 (right), Answer: 3, I think 4 (right), no idea
    result = designer.score_code(code, samples)
    scores, maximum = designer.score_reference("correct_numeric", samples)
    assert maximum == 1.0
    found = designer.disagreements(result, "correct_numeric", scores, maximum)
    assert found["counts"]["says_two"] == {"both": 1, "edited_only": 0, "reference_only": 1, "neither": 2}
    assert found["rows"] == [2]
    table = designer.compare_table(result, "correct_numeric", scores, found)
    assert table["completion"].tolist() == ["I think 4"]
    assert table[["says_two", "reference: correct_numeric"]].values.tolist() == [[0.0, 1.0]]
    assert "**1** completions differ" in designer.compare_markdown(result, found)
    with pytest.raises(UserError, match="reference"):
        designer.score_reference("no_such_reward", samples)


def test_step_time_panel_stacks_the_four_phases_and_a_running_run_shows_an_eta(tmp_path):
    path = str(tmp_path / "live")
    run = RunDir.create(path)
    with open(os.path.join(path, "config.yaml"), "w") as fh:
        fh.write("grpo: {max_steps: 10}\n")
    for step in (1, 2, 3):
        run.append("metrics.jsonl", {"step": step, "reward": 0.1, "time": 10.0 * step, "time/generation_s": 6.0,
                                     "time/rewards_s": 0.5, "time/train_s": 3.0, "time/other_s": 0.5})
    metrics = run.metrics()
    frame = runs.curve_frames(metrics, smoothing=5)["step_time"]
    assert set(frame["series"]) == {"generation", "rewards", "train (forward, backward, optimizer)", "other"}
    assert len(frame) == 12  # never smoothed, so no raw twins
    assert frame.groupby("step")["value"].sum().tolist() == pytest.approx([10.0, 10.0, 10.0])
    overview = runs.run_overview(path, metrics, [])
    assert "running" in overview and "ETA 1 min 10 s" in overview  # 7 steps left at 10 s a step
    assert runs.format_duration(3725) == "1 h 02 min" and runs.format_duration(40) == "40 s"
