"""Design rewards: edit reward code, load or generate samples, score, probe for hacks, compare with a
reference reward, save a reward file (and send it to the Train tab), and check a reward set on the base
model before training (apps.checks)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import gradio as gr

from local_grpo.errors import UserError

from apps import checks, designer, generate
from apps.tabs.common import Studio, user_errors
from apps.tabs.train import parse_weights

CHECK_STAGES = {"generate": "sampling the base model", "score": "scoring", "probe": "soundness probe"}


def code_sources(studio: Studio) -> list[str]:
    import rewards

    return ["template", *rewards.names(), *designer.saved_reward_specs(studio.rewards_dir)]


def load_code(studio: Studio, source: str) -> str:
    import rewards

    from apps import runs

    if not source or source == "template":
        return designer.TEMPLATE
    if source in rewards.names():
        return designer.builtin_template(source)
    path = runs.resolve_under(studio.rewards_dir, source.rsplit(":", 1)[0], "reward file")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def generate_samples(model: str, prompts_text: str, answers_text: str, n: float, max_tokens: float) -> str:
    prompts = [p.strip() for p in (prompts_text or "").splitlines() if p.strip()]
    answers = [a.strip() or None for a in (answers_text or "").splitlines()]
    samples = generate.generate_samples({"model": model or "embedded", "prompts": prompts, "answers": answers,
                                         "n": int(n or 4), "max_new_tokens": int(max_tokens or 64)})
    return designer.samples_to_text(samples)


def score(code: str, samples_text: str, timeout_s: float, chat: bool):
    try:
        samples = designer.parse_samples(samples_text)
    except UserError as error:
        result = designer.ScoreResult(problem=str(error))
    else:
        result = designer.score_code(code, samples, timeout_s=float(timeout_s or designer.DEFAULT_TIMEOUT_S),
                                     chat=bool(chat))
    return designer.summary_markdown(result), designer.results_table(result), designer.histogram_frame(result)


def probe_rewards(code: str, samples_text: str):
    """The hack battery (rewards.probe) on the edited functions, with the samples' prompts and gold answers."""
    from rewards.probe import EXAMPLE_ROWS, format_table, probe_source

    try:
        names = designer.reward_functions(code)
        samples = designer.parse_samples(samples_text) if (samples_text or "").strip() else []
    except (designer.CodeProblem, UserError) as error:
        return f"**Cannot probe:** {error}"
    rows = {s["prompt"]: s["answer"] for s in samples if s.get("prompt") and s.get("answer") not in (None, "")}
    rows = dict(list(rows.items())[:20]) or EXAMPLE_ROWS
    report = probe_source(code, names, list(rows), list(rows.values()))
    return "```\n" + format_table(report) + "\n```"


def reference_sources(studio: Studio) -> list[str]:
    import rewards

    return [*rewards.names(), *designer.saved_reward_specs(studio.rewards_dir)]


def compare(code: str, samples_text: str, reference: str, timeout_s: float, chat: bool):
    """The edited functions' scores beside a reference reward's, on the samples where they disagree."""
    samples = designer.parse_samples(samples_text)
    timeout_s = float(timeout_s or designer.DEFAULT_TIMEOUT_S)
    result = designer.score_code(code, samples, timeout_s=timeout_s, chat=bool(chat))
    if result.problem:
        return designer.compare_markdown(result, {}), None
    reference_scores, reference_max = designer.score_reference(reference, samples, timeout_s=timeout_s, chat=bool(chat))
    found = designer.disagreements(result, reference.strip(), reference_scores, reference_max)
    return (designer.compare_markdown(result, found),
            designer.compare_table(result, reference.strip(), reference_scores, found))


def saved_specs_text(studio: Studio, file_name: str) -> str:
    """`path.py:function: 1` lines for every function of the saved file named in the Save-as box."""
    from apps import runs

    stem = (file_name or "").strip().removesuffix(".py")
    path = runs.resolve_under(studio.rewards_dir, stem + ".py", "file name")
    if not stem or not os.path.isfile(path):
        raise UserError(f"file name: {stem or '(empty)'}.py is not saved yet in {studio.rewards_dir}: "
                        "press Save reward file first")
    specs = [spec for spec in designer.saved_reward_specs(studio.rewards_dir) if spec.rsplit(":", 1)[0] == path]
    if not specs:
        raise UserError(f"file name: {path} has no reward function")
    return "\n".join(f"{spec}: 1" for spec in specs)


def check_request(model, preset, task, dataset, rewards_text, num_generations, max_tokens, prompts, fresh):
    return checks.CheckRequest(model=model or "embedded", preset=preset or "", task=task or "arithmetic",
                               dataset=dataset or "", rewards=parse_weights(rewards_text, "check rewards"),
                               num_generations=int(num_generations) if num_generations else None,  # 0/empty: preset
                               max_completion_length=int(max_tokens) if max_tokens else None,
                               prompts=8 if prompts in (None, "") else int(prompts), fresh=bool(fresh))


def check_outputs(result: dict):
    return (checks.verdict_markdown(result), checks.reward_stats_table(result), checks.histogram_frame(result),
            checks.shares_frame(result), checks.per_prompt_table(result), checks.agreement_table(result),
            checks.disagreement_examples(result), checks.probe_table(result))


def check_layout(studio: Studio) -> dict:
    """The "Check rewards" panel: the Train form's kind of inputs, then the check's numbers and verdict."""
    from local_grpo import tasks
    from local_grpo.presets import PRESETS

    with gr.Accordion("Check rewards: will this reward set teach the base model? (before training)", open=True,
                      elem_id="check-panel"):
        gr.Markdown("Samples G completions for each of K held-out prompts from the *base* model (cached under "
                    "the runs folder's `.reward-check-cache/`), scores them with the reward set and says whether GRPO "
                    "gets a learning signal. Same as `local-grpo rewards check` (docs/reward-check.md).")
        with gr.Row():
            check_model = gr.Textbox("embedded", label="Model", info="embedded, a local folder, or a hub id",
                                     elem_id="check-model")
            check_preset = gr.Dropdown(["", *PRESETS], value="cpu", label="Preset", elem_id="check-preset")
            check_task = gr.Dropdown(tasks.builtin_names(), value="arithmetic", label="Task")
            check_dataset = gr.Textbox(label="Dataset (instead of a task)")
        check_rewards_box = gr.Textbox(label="Rewards (one per line: name: weight; empty = the task's defaults)", lines=3,
                                       placeholder="format_soft: 0.2\ncorrect_numeric: 1.0", elem_id="check-rewards")
        with gr.Row():
            check_g = gr.Number(None, label="num-generations (G; 0 = preset)", precision=0, elem_id="check-g")
            check_tokens = gr.Number(None, label="max-completion-length (0 = preset)", precision=0,
                                     elem_id="check-tokens")
            check_prompts = gr.Number(8, label="held-out prompts (K)", precision=0, elem_id="check-k")
            check_fresh = gr.Checkbox(False, label="fresh samples (ignore the cache)")
        with gr.Row():
            check_from_train_btn = gr.Button("Use the Train tab's settings")
            check_btn = gr.Button("Check rewards", variant="primary", elem_id="check-rewards-btn")
        check_verdict = gr.Markdown(elem_id="check-verdict")
        check_stats = gr.Dataframe(checks.reward_stats_table({}), label="Per reward", interactive=False, elem_id="check-stats")
        with gr.Row():
            check_histogram = gr.BarPlot(None, x="bin", y="count", color="reward", title="Score histograms (10 bins, "
                                         "each reward's own range)", height=240, elem_id="check-histogram")
            check_shares = gr.BarPlot(None, x="reward", y="share", title="Share of the advantage variance", height=240,
                                      elem_id="check-shares")
        check_prompts_df = gr.Dataframe(checks.per_prompt_table({}), label="Per prompt: p_ref (pass rate at G) and the group's total",
                                        interactive=False, wrap=True, elem_id="check-per-prompt")
        with gr.Row():
            check_agreement = gr.Dataframe(checks.agreement_table({}), label="Agreement on success between rewards", interactive=False,
                                           elem_id="check-agreement")
            check_probe = gr.Dataframe(checks.probe_table({}), label="Soundness probe (correctness rewards)", interactive=False)
        check_examples = gr.Dataframe(checks.disagreement_examples({}), label="Disagreements: example completions", interactive=False, wrap=True,
                                      max_height=300)
        with gr.Row():
            check_cache = gr.Dropdown(checks.cache_files(studio.runs_root), label="Cached check samples", scale=3,
                                      elem_id="check-cache")
            check_samples_btn = gr.Button("Load into the samples box", scale=1)
    return {k: v for k, v in locals().items() if k.startswith("check_")}


def layout(studio: Studio) -> SimpleNamespace:
    with gr.Row():
        with gr.Column(scale=3):
            with gr.Row():
                source = gr.Dropdown(code_sources(studio), value="template", label="Start from",
                                     info="the template, a built-in reward's source, or a saved file",
                                     allow_custom_value=True, scale=3)
                load_code_btn = gr.Button("Load into editor", scale=1)
            code = gr.Code(designer.TEMPLATE, language="python", lines=24, max_lines=40,
                           label="Reward functions (each public function is one reward)", elem_id="reward-code")
            with gr.Row():
                file_name = gr.Textbox("my_rewards", label="Save as (file name)", scale=2)
                save_btn = gr.Button("Save reward file", scale=1)
                train_with_btn = gr.Button("Train with these rewards", scale=1, elem_id="train-with")
            save_message = gr.Markdown()
            with gr.Row():
                reference = gr.Dropdown(reference_sources(studio), value="correct_numeric", allow_custom_value=True,
                                        label="Compare with (a built-in or saved reward)", scale=3)
                compare_btn = gr.Button("Compare", scale=1, elem_id="compare")
        with gr.Column(scale=2):
            with gr.Row():
                sample_run = gr.Dropdown(studio.run_choices(), label="Samples from a run", allow_custom_value=True,
                                         scale=3)
                sample_steps = gr.Number(2, label="last steps", precision=0, scale=1)
            samples_from_run_btn = gr.Button("Load completions from run")
            with gr.Accordion("Generate samples with a model", open=False):
                gen_model = gr.Textbox("embedded", label="Model", info="embedded, a local folder, or a hub id")
                gen_prompts = gr.Textbox(label="Prompts (one per line)", lines=3)
                gen_answers = gr.Textbox(label="Gold answers (one per line, optional)", lines=2)
                with gr.Row():
                    gen_n = gr.Number(4, label="completions per prompt", precision=0)
                    gen_tokens = gr.Number(64, label="max new tokens", precision=0)
                generate_btn = gr.Button("Generate")
            samples = gr.Textbox(label="Samples (JSONL: completion, prompt, answer, group — or paste "
                                 "completions separated by lines of ---)", lines=10, max_lines=16, elem_id="samples")
            with gr.Row():
                timeout = gr.Slider(0.5, 30, value=designer.DEFAULT_TIMEOUT_S, step=0.5, label="time limit per reward (s)")
                chat = gr.Checkbox(True, label="completions as chat messages (as in training)")
            score_btn = gr.Button("Score", variant="primary", elem_id="score")
            probe_btn = gr.Button("Probe for reward hacks", elem_id="probe")
    score_summary = gr.Markdown(elem_id="score-summary")
    score_table = gr.Dataframe(label="Scores: completion × reward", wrap=True, max_height=420, elem_id="score-table")
    histogram = gr.BarPlot(None, x="bin", y="count", color="reward", title="Score histogram", height=260,
                           elem_id="histogram")
    probe_report = gr.Markdown(elem_id="probe-report")
    compare_summary = gr.Markdown(elem_id="compare-summary")
    compare_df = gr.Dataframe(label="Where the edited code and the reference disagree on success", wrap=True,
                              max_height=420, interactive=False, elem_id="compare-table")
    panel = check_layout(studio)
    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("studio", "panel")}, **panel)


def wire(studio: Studio, ui: SimpleNamespace) -> None:
    d = ui.design

    @user_errors
    def on_samples_from_run(run: str, steps: float) -> str:
        return designer.samples_to_text(designer.samples_from_run(studio.run_path(run), steps=int(steps or 2)))

    @user_errors
    def on_save(code: str, file_name: str):
        path, specs = designer.save_reward_file(code, studio.rewards_dir, file_name)
        listed = "\n".join(f"- `{spec}`" for spec in specs)
        message = (f"Saved **{path}**. Use it in training as:\n{listed}\n\n"
                   f"e.g. `local-grpo train --rewards {specs[0]}:1.0`")
        return message, gr.update(choices=code_sources(studio)), gr.update(choices=reference_sources(studio))

    def on_check(model, preset, task, dataset, rewards_text, num_generations, max_tokens, prompts, fresh,
                 progress=gr.Progress()):
        try:
            request = check_request(model, preset, task, dataset, rewards_text, num_generations, max_tokens,
                                    prompts, fresh)
            progress(0, desc="starting the check")
            result = checks.run_check(request, studio.runs_root, progress=lambda stage, done, total: progress(
                (done, total), desc=CHECK_STAGES.get(stage, stage), unit="completions"))
        except UserError as error:
            raise gr.Error(str(error), print_exception=False) from None
        cache_name = os.path.basename(result["cache"]["path"])
        return (*check_outputs(result), gr.update(choices=checks.cache_files(studio.runs_root), value=cache_name))

    @user_errors
    def on_check_samples(cache_name: str) -> str:
        from apps import runs

        if not cache_name:
            raise UserError("check samples: run a check first, or choose a cached sample file")
        folder = os.path.join(studio.runs_root, checks.CACHE_FOLDER)
        return designer.samples_to_text(checks.cached_samples(runs.resolve_under(folder, cache_name, "check samples")))

    @user_errors
    def on_train_with(file_name: str):
        text = saved_specs_text(studio, file_name)
        return text, gr.Tabs(selected="train"), ("Filled the **Train** tab's rewards with the saved file's functions "
                                                  "(weight 1 each; edit them there).")

    d.load_code_btn.click(user_errors(lambda source: load_code(studio, source)), d.source, d.code, api_name="load_code")
    d.samples_from_run_btn.click(on_samples_from_run, [d.sample_run, d.sample_steps], d.samples,
                                 api_name="samples_from_run")
    d.generate_btn.click(user_errors(generate_samples), [d.gen_model, d.gen_prompts, d.gen_answers, d.gen_n,
                                                         d.gen_tokens], d.samples, api_name="generate_samples")
    d.score_btn.click(score, [d.code, d.samples, d.timeout, d.chat], [d.score_summary, d.score_table, d.histogram],
                      api_name="score_rewards")
    d.probe_btn.click(probe_rewards, [d.code, d.samples], [d.probe_report], api_name="probe_rewards")
    d.save_btn.click(on_save, [d.code, d.file_name], [d.save_message, d.source, d.reference], api_name="save_rewards")
    d.compare_btn.click(user_errors(compare), [d.code, d.samples, d.reference, d.timeout, d.chat],
                        [d.compare_summary, d.compare_df], api_name="compare_rewards")
    d.train_with_btn.click(on_train_with, d.file_name, [ui.train.train_rewards, ui.tabs, d.save_message],
                           api_name="train_with_rewards")
    check_inputs = [d.check_model, d.check_preset, d.check_task, d.check_dataset, d.check_rewards_box, d.check_g,
                    d.check_tokens, d.check_prompts, d.check_fresh]
    check_results = [d.check_verdict, d.check_stats, d.check_histogram, d.check_shares, d.check_prompts_df,
                     d.check_agreement, d.check_examples, d.check_probe, d.check_cache]
    d.check_btn.click(on_check, check_inputs, check_results, api_name="check_rewards")
    d.check_samples_btn.click(on_check_samples, d.check_cache, d.samples, api_name="check_samples")
    t = ui.train
    d.check_from_train_btn.click(lambda *values: values, [t.model, t.preset, t.task, t.dataset, t.train_rewards],
                                 check_inputs[:5], api_name="check_settings_from_train")
