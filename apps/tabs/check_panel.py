"""The Design tab's "Check rewards" panel: will this reward set teach the base model? (apps.checks runs the
check in its own process; this module lays out its form and results and wires them.)"""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from local_grpo.errors import UserError

from apps import checks, designer, runs
from apps.tabs.common import Studio, parse_weights, task_choices, user_errors
from apps.tabs.train import TrainTab

CHECK_STAGES = {"generate": "sampling the base model", "score": "scoring", "probe": "soundness probe"}


def check_request(model, preset, task, dataset, rewards_text, num_generations, max_tokens, prompts, fresh):
    return checks.CheckRequest(model=model or "embedded", preset=preset or "", task=task or "arithmetic",
                               dataset=dataset or "", rewards=parse_weights(rewards_text, "check rewards"),
                               num_generations=int(num_generations) if num_generations else None,  # 0/empty: preset
                               max_completion_length=int(max_tokens) if max_tokens else None,
                               prompts=8 if prompts in (None, "") else int(prompts), fresh=bool(fresh))


@dataclass(frozen=True)
class CheckPanel:
    """The "Check rewards" panel's components that events use.

    `inputs` and `results` fix the order of /check_rewards' inputs and outputs (gradio_client's order).
    """

    model: gr.Textbox
    preset: gr.Dropdown
    task: gr.Dropdown
    dataset: gr.Textbox
    rewards: gr.Textbox
    num_generations: gr.Number
    max_tokens: gr.Number
    prompts: gr.Number
    fresh: gr.Checkbox
    from_train_btn: gr.Button
    check_btn: gr.Button
    verdict: gr.Markdown
    stats: gr.Dataframe
    histogram: gr.BarPlot
    shares: gr.BarPlot
    per_prompt: gr.Dataframe
    agreement: gr.Dataframe
    probe: gr.Dataframe
    examples: gr.Dataframe
    cache: gr.Dropdown
    samples_btn: gr.Button

    @property
    def inputs(self) -> list:
        return [self.model, self.preset, self.task, self.dataset, self.rewards, self.num_generations,
                self.max_tokens, self.prompts, self.fresh]

    @property
    def results(self) -> list:
        return [self.verdict, self.stats, self.histogram, self.shares, self.per_prompt, self.agreement,
                self.examples, self.probe, self.cache]


def check_views(check: CheckPanel, result: dict) -> dict:
    """The check's verdict, tables and plots from its --json result (the cache choice is the caller's)."""
    return {check.verdict: checks.verdict_markdown(result), check.stats: checks.reward_stats_table(result),
            check.histogram: checks.histogram_frame(result), check.shares: checks.shares_frame(result),
            check.per_prompt: checks.per_prompt_table(result), check.agreement: checks.agreement_table(result),
            check.examples: checks.disagreement_examples(result), check.probe: checks.probe_table(result)}


def layout(studio: Studio) -> CheckPanel:
    """The "Check rewards" panel: the Train form's kind of inputs, then the check's numbers and verdict."""
    from local_grpo.presets import PRESETS

    with gr.Accordion("Check rewards: will this reward set teach the base model? (before training)", open=True,
                      elem_id="check-panel"):
        gr.Markdown("Samples G completions for each of K held-out prompts from the *base* model (cached under "
                    "the runs folder's `.reward-check-cache/`), scores them with the reward set and says whether GRPO "
                    "gets a learning signal. Same as `local-grpo rewards check` (docs/reward-check.md).")
        with gr.Row():
            model = gr.Textbox("embedded", label="Model", info="embedded, a local folder, or a hub id",
                               elem_id="check-model")
            preset = gr.Dropdown(["", *PRESETS], value="cpu", label="Preset", elem_id="check-preset")
            task = gr.Dropdown(task_choices(), value="arithmetic", allow_custom_value=True, label="Task",
                               info="a built-in task, or your own: path/to/file.py:NAME")
            dataset = gr.Textbox(label="Dataset (instead of a task)")
        rewards = gr.Textbox(label="Rewards (one per line: name: weight; empty = the task's defaults)", lines=3,
                             placeholder="format_soft: 0.2\ncorrect_numeric: 1.0", elem_id="check-rewards")
        with gr.Row():
            num_generations = gr.Number(None, label="num-generations (G; 0 = preset)", precision=0, elem_id="check-g")
            max_tokens = gr.Number(None, label="max-completion-length (0 = preset)", precision=0,
                                   elem_id="check-tokens")
            prompts = gr.Number(8, label="held-out prompts (K)", precision=0, elem_id="check-k")
            fresh = gr.Checkbox(False, label="fresh samples (ignore the cache)")
        with gr.Row():
            from_train_btn = gr.Button("Use the Train tab's settings")
            check_btn = gr.Button("Check rewards", variant="primary", elem_id="check-rewards-btn")
        verdict = gr.Markdown(elem_id="check-verdict")
        stats = gr.Dataframe(checks.reward_stats_table({}), label="Per reward", interactive=False, elem_id="check-stats")
        with gr.Row():
            histogram = gr.BarPlot(None, x="bin", y="count", color="reward", title="Score histograms (10 bins, "
                                   "each reward's own range)", height=240, elem_id="check-histogram")
            shares = gr.BarPlot(None, x="reward", y="share", title="Share of the advantage variance", height=240,
                                elem_id="check-shares")
        per_prompt = gr.Dataframe(checks.per_prompt_table({}), label="Per prompt: p_ref (pass rate at G) and the group's total",
                                  interactive=False, wrap=True, elem_id="check-per-prompt")
        with gr.Row():
            agreement = gr.Dataframe(checks.agreement_table({}), label="Agreement on success between rewards", interactive=False,
                                     elem_id="check-agreement")
            probe = gr.Dataframe(checks.probe_table({}), label="Soundness probe (correctness rewards)", interactive=False)
        examples = gr.Dataframe(checks.disagreement_examples({}), label="Disagreements: example completions", interactive=False, wrap=True,
                                max_height=300)
        with gr.Row():
            cache = gr.Dropdown(checks.cache_files(studio.runs_root), label="Cached check samples", scale=3,
                                elem_id="check-cache")
            samples_btn = gr.Button("Load into the samples box", scale=1)
    return CheckPanel(model=model, preset=preset, task=task, dataset=dataset, rewards=rewards,
                      num_generations=num_generations, max_tokens=max_tokens, prompts=prompts, fresh=fresh,
                      from_train_btn=from_train_btn, check_btn=check_btn, verdict=verdict, stats=stats,
                      histogram=histogram, shares=shares, per_prompt=per_prompt, agreement=agreement, probe=probe,
                      examples=examples, cache=cache, samples_btn=samples_btn)


def wire(studio: Studio, check: CheckPanel, samples: gr.Textbox, train: TrainTab) -> None:
    """Run the check; load its cached samples into the designer's `samples` box; copy the Train tab's form."""

    def check_rewards(model, preset, task, dataset, rewards_text, num_generations, max_tokens, prompts, fresh,
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
        return {**check_views(check, result),
                check.cache: gr.update(choices=checks.cache_files(studio.runs_root), value=cache_name)}

    @user_errors
    def check_samples(cache_name: str) -> str:
        if not cache_name:
            raise UserError("check samples: run a check first, or choose a cached sample file")
        folder = os.path.join(studio.runs_root, checks.CACHE_FOLDER)
        return designer.samples_to_text(checks.cached_samples(runs.resolve_under(folder, cache_name, "check samples")))

    def check_settings_from_train(model, preset, task, dataset, rewards_text):
        return {check.model: model, check.preset: preset, check.task: task, check.dataset: dataset,
                check.rewards: rewards_text}

    check.check_btn.click(check_rewards, check.inputs, check.results, api_name="check_rewards")
    check.samples_btn.click(check_samples, check.cache, samples, api_name="check_samples")
    check.from_train_btn.click(check_settings_from_train, [train.model, train.preset, train.task, train.dataset,
                                                           train.rewards],
                               [check.model, check.preset, check.task, check.dataset, check.rewards],
                               api_name="check_settings_from_train")
