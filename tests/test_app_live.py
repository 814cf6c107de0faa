"""The studio served for real: gradio_client calls its named endpoints, Chromium drives its UI.

One module-scoped setup: a finished tiny run (3 CPU steps) in a runs folder, and the app launched
on a free localhost port. The browser test writes its screenshots to a temporary folder (or to
$STUDIO_SCREENSHOTS when set); copying them to docs/images/ is a deliberate step, not a test's.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

import pytest

from conftest import make_tiny_config
from local_grpo.config import Config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LOOPING_AND_RAISING = (
    "def forever(completions, **kwargs):\n    while True:\n        pass\n\n\n"
    "def raises(completions, **kwargs):\n    return [1 / 0 for c in completions]\n\n\n"
    "def length(completions, **kwargs):\n    return [float(len(str(c))) for c in completions]\n"
)


def tiny_run_config(model_dir: str, output_dir: str, steps: int = 3) -> Config:
    """The tiny model on arithmetic, a few fast CPU steps."""
    return make_tiny_config(model_dir, output_dir, steps=steps, save_steps=10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def runs_root(tiny_model_dir, tmp_path_factory) -> str:
    """A runs folder holding one finished tiny run, `tiny`."""
    from local_grpo import train

    root = tmp_path_factory.mktemp("runs")
    train.train(tiny_run_config(tiny_model_dir, str(root / "tiny")), progress=False)
    return str(root)


@pytest.fixture(scope="module")
def studio(runs_root):
    """The app launched on a free port; yields its URL."""
    from apps.studio import build_app

    app = build_app(runs_root)
    app.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True, share=False)
    yield app.local_url
    app.close()


@pytest.fixture(scope="module")
def client(studio):
    from gradio_client import Client

    return Client(studio, verbose=False)


def rows(table: dict) -> list[dict]:
    """A Dataframe value from gradio_client as a list of row dicts."""
    return [dict(zip(table["headers"], row)) for row in table["data"]]


def plot(output: dict) -> dict:
    """A plot's value from gradio_client, whether the app sent the plot or an update of it (colours, visibility)."""
    return output.get("value", output) if output.get("__type__") == "update" else output


def sent(output) -> bool:
    """False for an output the handler left out (gradio_client gets a bare update for it)."""
    return output != {"__type__": "update"}


def points(output: dict, series: str) -> list[tuple]:
    """(step, value) points of one series of a LinePlot output."""
    return [(row[0], row[1]) for row in plot(output)["data"] if row[2] == series]


CHECK_FORM = ("", "arithmetic", "", "", 4, 8, 2, False)  # preset, task, dataset, rewards, G, tokens, K, fresh


# --- gradio_client ------------------------------------------------------------------------

def test_every_event_is_named(tmp_path):
    from apps.studio import build_app

    app = build_app(str(tmp_path))
    names = [fn.api_name for fn in app.fns.values()]
    assert all(names) and len(names) == len(set(names))
    assert {"score_rewards", "list_runs", "load_run", "refresh_run", "start_training", "stop_training",
            "set_weights", "export_run", "save_rewards", "samples_from_run", "generate_samples", "check_rewards",
            "check_samples", "check_settings_from_train", "compare_rewards", "train_with_rewards", "smooth_curves",
            "prompt_history"} <= set(names)


def test_list_and_load_a_finished_run(client):
    table, _choices = client.predict(api_name="/list_runs")
    listed = {row["run"]: row for row in rows(table)}
    assert listed["tiny"]["status"] == "finished" and listed["tiny"]["steps"] == 3
    (overview, reward, success, length, kl, zero_std, step_time, kl_note, completions, alerts, evals, prompt,
     prompt_table, prompt_curve, weights) = client.predict("tiny", "latest", 2, None, api_name="/load_run")
    assert "finished" in overview and "step 3 of 3" in overview
    assert {row[0] for row in plot(reward)["data"]} == {1, 2, 3}  # a total-reward point per step
    assert {row[2] for row in plot(reward)["data"]} >= {"total reward", "total reward (raw)"}
    raw, smooth = points(length, "mean length (tokens) (raw)"), points(length, "mean length (tokens)")
    assert len(raw) == len(smooth) == 3 and smooth[1][1] == pytest.approx((raw[0][1] + raw[1][1]) / 2)
    assert reward["color_map"]["total reward (raw)"].startswith(reward["color_map"]["total reward"])
    assert kl["visible"] is False and "grpo.beta: 0" in kl_note["value"]  # the tiny run trains without KL
    assert rows(completions) and all(row["step"] == 3 for row in rows(completions))
    assert any(row["type"] == "info" for row in rows(alerts))
    assert prompt["value"] and rows(prompt_table) and plot(prompt_curve)["data"]
    assert "correct_numeric" in weights
    phases = {row[2] for row in plot(step_time)["data"]}  # the stacked step-time panel, never smoothed
    assert phases == {"generation", "rewards", "train (forward, backward, optimizer)", "other"}
    *curves, note = client.predict("tiny", 1, api_name="/smooth_curves")
    assert {row[2] for row in plot(curves[2])["data"]} == {"mean length (tokens)"}  # smoothing off: raw only


def test_one_prompt_across_steps(client, runs_root):
    from local_grpo.rundir import RunDir

    completions = RunDir(os.path.join(runs_root, "tiny")).completions()
    prompt = completions[0]["prompt"]
    table, curve = client.predict("tiny", prompt, api_name="/prompt_history")
    expected = sorted(r["step"] for r in completions if r["prompt"] == prompt)
    assert [row["step"] for row in rows(table)] == expected
    assert {row[2] for row in plot(curve)["data"]} == {"success rate", "mean total reward"}


def test_score_samples_from_a_run(client):
    from apps.designer import TEMPLATE

    samples = client.predict("tiny", 1, api_name="/samples_from_run")
    assert len(samples.splitlines()) == 8  # one step: 2 prompts x 4 generations
    summary, table, histogram = client.predict(TEMPLATE, samples, 5, True, api_name="/score_rewards")
    scored = rows(table)
    assert len(scored) == 8 and {"ends_with_answer", "matches_gold", "total"} <= set(scored[0])
    assert "Zero-std groups:" in summary and "of 2" in summary
    assert histogram["data"]


def test_looping_and_raising_rewards_are_reported_in_time_and_the_app_keeps_serving(client):
    samples = "\n".join(json.dumps({"completion": f"Answer: {i}", "prompt": "p", "group": "g"}) for i in range(4))
    started = time.monotonic()
    summary, table, _hist = client.predict(LOOPING_AND_RAISING, samples, 1.0, False, api_name="/score_rewards")
    assert time.monotonic() - started < 10
    assert "**forever** — timeout" in summary and "took longer than 1s" in summary
    assert "**raises** — exception: ZeroDivisionError" in summary
    assert [row["forever"] for row in rows(table)] == ["fault"] * 4
    assert [row["length"] for row in rows(table)] == [9.0] * 4
    table, _ = client.predict(api_name="/list_runs")  # still serving
    assert rows(table)
    summary, _table, _hist = client.predict("def broken(:\n", samples, 1.0, False, api_name="/score_rewards")
    assert "syntax error at line 1" in summary


def test_paths_outside_the_runs_folder_are_refused(client):
    from gradio_client.exceptions import AppError

    for bad in ("../../etc", "/etc"):
        with pytest.raises(AppError, match="outside the runs folder"):
            client.predict(bad, "latest", 5, None, api_name="/load_run")
    with pytest.raises(AppError, match="export folder"):
        client.predict("tiny", "lora", "../../outside", api_name="/export_run")


def test_save_weights_and_export(client, runs_root):
    import rewards
    from apps.designer import TEMPLATE

    message, _source, _reference = client.predict(TEMPLATE, "my_rewards", api_name="/save_rewards")
    path = os.path.join(runs_root, "reward_files", "my_rewards.py")
    assert path in message and rewards.get(f"{path}:ends_with_answer")(["Answer: 3"]) == [1.0]
    specs, message = client.predict("my_rewards", api_name="/train_with_rewards")  # and the Train tab is shown
    assert specs.splitlines() == [f"{path}:ends_with_answer: 1", f"{path}:matches_gold: 1"] and "Train" in message
    message = client.predict("tiny", "correct_numeric: 2\nformat_soft: 0", api_name="/set_weights")
    with open(os.path.join(runs_root, "tiny", "control.json")) as fh:
        assert json.load(fh) == {"weights": {"correct_numeric": 2.0, "format_soft": 0.0}}
    assert "control.json" in message
    message = client.predict("tiny", "lora", "", api_name="/export_run")
    assert os.path.isfile(os.path.join(runs_root, "exports", "tiny-lora", "adapter_config.json")), message


def test_check_rewards_on_the_tiny_model_then_its_samples_in_the_designer(client, tiny_model_dir, runs_root):
    from apps.designer import TEMPLATE

    outputs = client.predict(tiny_model_dir, *CHECK_FORM, api_name="/check_rewards")
    assert all(sent(output) for output in outputs)  # the handler fills every output it is wired to
    verdict, stats, histogram, shares, per_prompt, agreement, examples, probe, cache = outputs
    assert "Verdict:" in verdict and "2 held-out prompts × G=4 = 8 completions" in verdict
    assert {row["reward"] for row in rows(stats)} >= {"correct_numeric", "format_soft"}
    assert len(rows(per_prompt)) == 2 and {"p_ref", "zero std"} <= set(rows(per_prompt)[0])
    assert rows(agreement) and rows(agreement)[0]["both"] + rows(agreement)[0]["neither"] <= 8
    assert rows(probe)[0]["reward"] == "correct_numeric"
    assert sum(row[1] for row in histogram["data"]) == 8 * len(rows(stats))  # every score in one bin
    assert os.path.isfile(os.path.join(runs_root, ".reward-check-cache", cache["value"]))
    again = client.predict(tiny_model_dir, *CHECK_FORM, api_name="/check_rewards")
    assert "read from the cache" in again[0] and again[8]["value"] == cache["value"]
    samples = client.predict(cache["value"], api_name="/check_samples")
    assert len(samples.splitlines()) == 8 and '"group": "prompt 0' in samples
    summary, table, _hist = client.predict(TEMPLATE, samples, 5, True, api_name="/score_rewards")
    assert len(rows(table)) == 8 and "of 2" in summary  # 2 groups of 4


def test_check_rewards_bad_input_names_the_field(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="prompts"):
        client.predict("embedded", "", "arithmetic", "", "", 4, 8, 0, False, api_name="/check_rewards")
    with pytest.raises(AppError, match=r"rewards\[0\].*no_such_reward"):  # the check's own one line, from its process
        client.predict("embedded", "", "arithmetic", "", "no_such_reward: 1", 4, 8, 2, False, api_name="/check_rewards")


def test_compare_with_a_builtin_reference(client):
    code = ("def says_two(completions, **kwargs):\n"
            "    return [1.0 if '2' in c[-1]['content'] else 0.0 for c in completions]\n")
    samples = "\n".join(json.dumps({"completion": c, "prompt": "1+1", "answer": "2", "group": "g"})
                        for c in ("Answer: 2", "Answer: 12", "the answer is 2", "Answer: 5"))
    summary, table = client.predict(code, samples, "correct_numeric", 5, True, api_name="/compare_rewards")
    assert "**1** completions differ" in summary
    assert [row["completion"] for row in rows(table)] == ["Answer: 12"]
    assert rows(table)[0]["says_two"] == 1.0 and rows(table)[0]["reference: correct_numeric"] == 0.0


def test_generate_samples_with_a_local_model(client, tiny_model_dir):
    samples = client.predict(tiny_model_dir, "What is 2 + 3?", "5", 2, 6, api_name="/generate_samples")
    lines = [json.loads(line) for line in samples.splitlines()]
    assert len(lines) == 2 and lines[0]["answer"] == "5" and lines[0]["group"] == "What is 2 + 3?"


def test_train_from_the_app_with_a_live_weight_change(client, runs_root, tiny_model_dir):
    """Start a run (its own process), change a weight while it runs, see the trainer record it."""
    extras = [4, 8, 12, None, None, None, "", 4, "", True]  # num-generations, batch, completion length, ..., lora-r,
    # then "Train anyway": the random tiny model succeeds on nothing, so the learnability gate would stop it
    message, watch_run, export_runs = client.predict("live", tiny_model_dir, "arithmetic", "",
                                                     "format_soft: 0.5\ncorrect_numeric: 1", "cpu", 3, *extras,
                                                     api_name="/start_training")
    assert "Started **live**" in message
    assert watch_run == "live" and "choices" in export_runs  # Watch opens the run; Export's list is refreshed
    run_dir = os.path.join(runs_root, "live")
    deadline = time.monotonic() + 120
    while not os.path.isfile(os.path.join(run_dir, "config.yaml")) and time.monotonic() < deadline:
        time.sleep(0.2)
    client.predict("live", "format_soft: 0\ncorrect_numeric: 1", api_name="/set_weights")
    log = ""
    while "not running" not in log and time.monotonic() < deadline:  # the trainer process has exited
        time.sleep(0.5)
        log = client.predict("live", api_name="/training_log")
    assert os.path.isfile(os.path.join(run_dir, "summary.json")), log
    with open(os.path.join(run_dir, "events.jsonl")) as fh:
        events = [json.loads(line) for line in fh]
    changed = [e for e in events if e["type"] == "weights_changed"]
    assert changed and changed[0]["weights"] == {"format_soft": 0.0, "correct_numeric": 1.0}
    assert "not running" in client.predict("live", api_name="/stop_training")


# --- a real browser -----------------------------------------------------------------------

@pytest.mark.browser
def test_browser_design_score_check_and_watch(studio, tiny_model_dir, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium), as .ci/run does")
    from playwright.sync_api import expect, sync_playwright

    images = os.environ.get("STUDIO_SCREENSHOTS") or str(tmp_path)  # never docs/images: copying there is deliberate
    os.makedirs(images, exist_ok=True)
    code = ('def _text(c):\n    return c[-1]["content"] if isinstance(c, list) else c\n\n\n'
            'def has_digit(completions, **kwargs):\n'
            '    """1.0 when the completion contains a digit."""\n'
            '    return [1.0 if any(ch.isdigit() for ch in _text(c)) else 0.0 for c in completions]\n\n\n'
            'def short(completions, **kwargs):\n'
            '    """Shorter is better: 1 at 0 characters, 0 at 40 or more."""\n'
            '    return [max(0.0, 1 - len(_text(c)) / 40) for c in completions]\n')
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1500})
        page.goto(studio)
        expect(page.get_by_text("local-grpo studio")).to_be_visible(timeout=30000)

        # Design rewards: samples from the tiny run, the typed functions, Score -> the table.
        page.locator("input[aria-label='Samples from a run']").fill("tiny")
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Load completions from run").click()
        expect(page.locator("#samples textarea")).to_have_value(re.compile('"completion"'), timeout=20000)
        editor = page.locator("#reward-code .cm-content")
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.press("Delete")
        page.keyboard.insert_text(code)
        expect(editor).to_contain_text("def short(completions")
        page.locator("#score").click()
        table = page.locator("#score-table")
        expect(table).to_contain_text("has_digit", timeout=30000)
        expect(table).to_contain_text("total")
        expect(page.locator("#score-summary")).to_contain_text("Zero-std groups")
        expect(page.locator("#histogram").locator("canvas, svg").first).to_be_visible(timeout=20000)
        page.wait_for_timeout(1500)  # let the histogram finish drawing
        page.screenshot(path=os.path.join(images, "studio-designer.png"), full_page=True)

        # Check rewards: the tiny model, 2 prompts x G=4, then its samples into the samples box.
        page.locator("#check-model").locator("input, textarea").first.fill(tiny_model_dir)
        for box, value in (("#check-g", "4"), ("#check-tokens", "8"), ("#check-k", "2")):
            page.locator(f"{box} input").first.fill(value)
        page.locator("#check-rewards-btn").click()
        expect(page.locator("#check-verdict")).to_contain_text("Verdict:", timeout=180000)
        expect(page.locator("#check-verdict")).to_contain_text("2 held-out prompts × G=4")
        expect(page.locator("#check-stats")).to_contain_text("correct_numeric")
        expect(page.locator("#check-agreement")).to_contain_text("format_soft")
        expect(page.locator("#check-histogram").locator("canvas, svg").first).to_be_visible(timeout=20000)
        page.get_by_role("button", name="Load into the samples box").click()
        expect(page.locator("#samples textarea")).to_have_value(re.compile('"group": "prompt 0'), timeout=20000)
        page.wait_for_timeout(1500)
        page.locator("#check-panel").screenshot(path=os.path.join(images, "studio-check.png"))

        # Watch: open the finished run and see its curves.
        page.get_by_role("tab", name="Watch").click()
        page.locator("input[aria-label='Run']").first.fill("tiny")
        page.keyboard.press("Enter")
        expect(page.locator("#run-overview")).to_contain_text("finished", timeout=20000)
        curve = page.locator("#curve-reward")
        expect(curve.locator("canvas, svg").first).to_be_visible(timeout=20000)
        expect(page.locator("#completions")).to_contain_text("correct_numeric")
        expect(page.get_by_label("Reward weights (live: applied at the next step)")).to_have_value(
            re.compile(r"correct_numeric: \d"), timeout=10000)
        expect(page.locator("#kl-note")).to_contain_text("grpo.beta: 0")  # no empty KL plot: why it is not drawn
        expect(page.locator("#curve-kl")).to_be_hidden()
        expect(page.locator("#prompt-history")).to_contain_text("completion", timeout=20000)
        expect(page.locator("#prompt-curve").locator("canvas, svg").first).to_be_visible(timeout=20000)
        # the step-time panel: the run's time/<phase>_s stacked per step
        expect(page.locator("#curve-step_time").locator("canvas, svg").first).to_be_visible(timeout=20000)
        page.wait_for_timeout(1500)  # let the plots finish drawing
        page.screenshot(path=os.path.join(images, "studio-watch.png"), full_page=True)
        assert all(os.path.getsize(os.path.join(images, f"studio-{n}.png")) > 10000 for n in ("designer", "check", "watch"))
        browser.close()
