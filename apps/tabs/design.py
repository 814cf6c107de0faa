"""Design rewards: edit reward code, load or generate samples, score, probe for hacks, compare with a
reference reward, save a reward file (and send it to the Train tab), and check a reward set on the base
model before training (the panel of apps.tabs.check_panel)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from local_grpo.errors import UserError

from apps import designer, generate, runs
from apps.tabs import check_panel
from apps.tabs.common import Studio, user_errors
from apps.tabs.train import TAB_ID as TRAIN_TAB_ID, TrainTab

TITLE, TAB_ID = "Design rewards", "design"


def code_sources(studio: Studio) -> list[str]:
    import rewards

    return ["template", *rewards.names(), *designer.saved_reward_specs(studio.rewards_dir)]


def load_code(studio: Studio, source: str) -> str:
    import rewards

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


def score(code: str, samples_text: str, timeout_s: float, chat: bool) -> designer.ScoreResult:
    """The edited functions on the pasted samples; bad samples are the result's problem, not an error."""
    try:
        samples = designer.parse_samples(samples_text)
    except UserError as error:
        return designer.ScoreResult(problem=str(error))
    return designer.score_code(code, samples, timeout_s=float(timeout_s or designer.DEFAULT_TIMEOUT_S), chat=bool(chat))


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


def saved_specs_text(studio: Studio, file_name: str) -> str:
    """`path.py:function: 1` lines for every function of the saved file named in the Save-as box."""
    stem = (file_name or "").strip().removesuffix(".py")
    path = runs.resolve_under(studio.rewards_dir, stem + ".py", "file name")
    if not stem or not os.path.isfile(path):
        raise UserError(f"file name: {stem or '(empty)'}.py is not saved yet in {studio.rewards_dir}: "
                        "press Save reward file first")
    specs = [spec for spec in designer.saved_reward_specs(studio.rewards_dir) if spec.rsplit(":", 1)[0] == path]
    if not specs:
        raise UserError(f"file name: {path} has no reward function")
    return "\n".join(f"{spec}: 1" for spec in specs)


@dataclass(frozen=True)
class DesignTab:
    """The Design rewards tab's components that events use, with its Check rewards panel."""

    source: gr.Dropdown
    load_code_btn: gr.Button
    code: gr.Code
    file_name: gr.Textbox
    save_btn: gr.Button
    train_with_btn: gr.Button
    save_message: gr.Markdown
    reference: gr.Dropdown
    compare_btn: gr.Button
    sample_run: gr.Dropdown
    sample_steps: gr.Number
    samples_from_run_btn: gr.Button
    gen_model: gr.Textbox
    gen_prompts: gr.Textbox
    gen_answers: gr.Textbox
    gen_n: gr.Number
    gen_tokens: gr.Number
    generate_btn: gr.Button
    samples: gr.Textbox
    timeout: gr.Slider
    chat: gr.Checkbox
    score_btn: gr.Button
    probe_btn: gr.Button
    score_summary: gr.Markdown
    score_table: gr.Dataframe
    histogram: gr.BarPlot
    probe_report: gr.Markdown
    compare_summary: gr.Markdown
    compare_table: gr.Dataframe
    check: check_panel.CheckPanel



def layout(studio: Studio) -> DesignTab:
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
    compare_table = gr.Dataframe(label="Where the edited code and the reference disagree on success", wrap=True,
                                 max_height=420, interactive=False, elem_id="compare-table")
    return DesignTab(source=source, load_code_btn=load_code_btn, code=code, file_name=file_name, save_btn=save_btn,
                     train_with_btn=train_with_btn, save_message=save_message, reference=reference,
                     compare_btn=compare_btn, sample_run=sample_run, sample_steps=sample_steps,
                     samples_from_run_btn=samples_from_run_btn, gen_model=gen_model, gen_prompts=gen_prompts,
                     gen_answers=gen_answers, gen_n=gen_n, gen_tokens=gen_tokens, generate_btn=generate_btn,
                     samples=samples, timeout=timeout, chat=chat, score_btn=score_btn, probe_btn=probe_btn,
                     score_summary=score_summary, score_table=score_table, histogram=histogram,
                     probe_report=probe_report, compare_summary=compare_summary, compare_table=compare_table,
                     check=check_panel.layout(studio))


def wire(studio: Studio, design: DesignTab, train: TrainTab, tabs: gr.Tabs) -> None:
    """The designer's events and its check panel's; "Train with these rewards" fills Train's rewards and
    selects that tab."""
    @user_errors
    def samples_from_run(run: str, steps: float) -> str:
        return designer.samples_to_text(designer.samples_from_run(studio.run_path(run), steps=int(steps or 2)))

    def score_rewards(code: str, samples_text: str, timeout_s: float, chat: bool):
        result = score(code, samples_text, timeout_s, chat)
        return {design.score_summary: designer.summary_markdown(result), design.score_table: designer.results_table(result),
                design.histogram: designer.histogram_frame(result)}

    @user_errors
    def save_rewards(code: str, file_name: str):
        path, specs = designer.save_reward_file(code, studio.rewards_dir, file_name)
        listed = "\n".join(f"- `{spec}`" for spec in specs)
        message = (f"Saved **{path}**. Use it in training as:\n{listed}\n\n"
                   f"e.g. `local-grpo train --rewards {specs[0]}:1.0`")
        return {design.save_message: message, design.source: gr.update(choices=code_sources(studio)),
                design.reference: gr.update(choices=reference_sources(studio))}

    @user_errors
    def compare_rewards(code: str, samples_text: str, reference: str, timeout_s: float, chat: bool):
        """The edited functions' scores beside a reference reward's, on the samples where they disagree."""
        samples = designer.parse_samples(samples_text)
        timeout_s = float(timeout_s or designer.DEFAULT_TIMEOUT_S)
        result = designer.score_code(code, samples, timeout_s=timeout_s, chat=bool(chat))
        if result.problem:
            return {design.compare_summary: designer.compare_markdown(result, {}), design.compare_table: None}
        reference_scores, reference_max = designer.score_reference(reference, samples, timeout_s=timeout_s,
                                                                   chat=bool(chat))
        found = designer.disagreements(result, reference.strip(), reference_scores, reference_max)
        return {design.compare_summary: designer.compare_markdown(result, found),
                design.compare_table: designer.compare_table(result, reference.strip(), reference_scores, found)}

    @user_errors
    def train_with_rewards(file_name: str):
        return {train.rewards: saved_specs_text(studio, file_name), tabs: gr.Tabs(selected=TRAIN_TAB_ID),
                design.save_message: ("Filled the **Train** tab's rewards with the saved file's functions "
                                      "(weight 1 each; edit them there).")}

    design.load_code_btn.click(user_errors(lambda source: load_code(studio, source)), design.source, design.code,
                               api_name="load_code")
    design.samples_from_run_btn.click(samples_from_run, [design.sample_run, design.sample_steps], design.samples,
                                      api_name="samples_from_run")
    design.generate_btn.click(user_errors(generate_samples), [design.gen_model, design.gen_prompts, design.gen_answers,
                                                              design.gen_n, design.gen_tokens], design.samples,
                              api_name="generate_samples")
    design.score_btn.click(score_rewards, [design.code, design.samples, design.timeout, design.chat],
                           [design.score_summary, design.score_table, design.histogram], api_name="score_rewards")
    design.probe_btn.click(probe_rewards, [design.code, design.samples], [design.probe_report], api_name="probe_rewards")
    design.save_btn.click(save_rewards, [design.code, design.file_name],
                          [design.save_message, design.source, design.reference], api_name="save_rewards")
    design.compare_btn.click(compare_rewards, [design.code, design.samples, design.reference, design.timeout, design.chat],
                             [design.compare_summary, design.compare_table], api_name="compare_rewards")
    design.train_with_btn.click(train_with_rewards, design.file_name, [train.rewards, tabs, design.save_message],
                                api_name="train_with_rewards")
    check_panel.wire(studio, design.check, samples=design.samples, train=train)
