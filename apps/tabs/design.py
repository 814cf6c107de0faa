"""Design rewards: edit reward code, load or generate samples, score, probe for hacks, save a reward file."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from local_grpo.errors import UserError

from apps import designer, generate
from apps.tabs.common import Studio, user_errors


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
            save_message = gr.Markdown()
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
    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "studio"})


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
        return message, gr.update(choices=code_sources(studio))

    d.load_code_btn.click(user_errors(lambda source: load_code(studio, source)), d.source, d.code, api_name="load_code")
    d.samples_from_run_btn.click(on_samples_from_run, [d.sample_run, d.sample_steps], d.samples,
                                 api_name="samples_from_run")
    d.generate_btn.click(user_errors(generate_samples), [d.gen_model, d.gen_prompts, d.gen_answers, d.gen_n,
                                                         d.gen_tokens], d.samples, api_name="generate_samples")
    d.score_btn.click(score, [d.code, d.samples, d.timeout, d.chat], [d.score_summary, d.score_table, d.histogram],
                      api_name="score_rewards")
    d.probe_btn.click(probe_rewards, [d.code, d.samples], [d.probe_report], api_name="probe_rewards")
    d.save_btn.click(on_save, [d.code, d.file_name], [d.save_message, d.source], api_name="save_rewards")
