"""GRPO training into a run directory: config -> backend -> data -> rewards -> TRL trainer -> files.

`train()` shows the whole flow in one screen; set-up helpers and the summary follow below it. The
pieces it assembles live beside this module: trainer.py (every TRL hook and the GRPOConfig),
recorder.py (reward scores -> completions.jsonl), callbacks.py (metrics.jsonl, alerts, live weights),
p_ref.py (the starting model's success and the forecast), filtering.py, audit.py, diagnostics.py.
We wrap TRL's GRPOTrainer; we do not fork it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence

from threadpoolctl import ThreadpoolController

from .. import backends, data, forecast, models, plan, rundir
from ..config import Config, validate
from ..config import load as load_config
from ..config import save as save_config
from ..errors import UserError
from ..rundir import RunDir
from ..tasks import build_reward_set, fill_defaults
from ..tasks.tools import tools_for
from . import diagnostics, gate, hints, p_ref, trainer
from .callbacks import RunDirCallback
from .held_out_eval import BestCheckpoint, HeldOutEval
from .recorder import RewardRecorder
from .reward_files import RewardFileLog


def train(config: Config, resume: bool = False, overwrite: bool = False, progress: bool = True,
          force: bool = False, callbacks: Sequence = ()) -> dict:
    """Train with GRPO and write RUN_DIR; returns the summary (also in RUN_DIR/summary.json).

    The backend is resolved once, with the config's checks (`checked_config`); the memory plan runs
    next and refuses a clear misfit unless `force`; a prompt longer than
    model.max_seq_length - grpo.max_completion_length is refused before the run directory is written
    (data.check_prompt_lengths). Before step 1 the learnability gate (gate.py) judges the measured p_ref
    and raises gate.NotLearnable when the task is (almost) all wrong or all right for the starting model,
    unless `force`; the run directory then keeps p_ref.json and the event. `callbacks`: transformers
    TrainerCallbacks called after ours at each event (so an on_log sees the step's metrics.jsonl line).
    """
    config = checked_config(config, resume, overwrite)
    if resume and (finished := completed_summary(config)) is not None:
        return finished  # a finished run: say so and change nothing
    plan.preflight(config, force=force)
    recorder = reward_recorder(config)  # every reward built once, before any model loads
    backends.check_vllm(config)  # grpo.use_vllm without a GPU or vllm: one line, before anything loads
    if config.resolved_backend == "unsloth":
        backends.import_unsloth()  # before trl: Unsloth patches it
    train_rows, held_out = data.load_examples(config)
    # no model yet; a tool task's chat template is chosen and checked here (tasks.tools.prepare_chat_template)
    tokenizer = backends.load_tokenizer(models.resolve(config.model.name, config.model.gguf_file), config)
    data.check_prompt_lengths(config, tokenizer, hints.longest_prompts(train_rows) if config.grpo.hints else train_rows,
                              held_out)  # each prompt fits model.max_seq_length (with its hint: grpo.hints)
    checkpoints = os.path.join(config.output_dir, rundir.CHECKPOINTS)
    args = trainer.grpo_args(config, checkpoints, backends.cuda_available(), config.resolved_backend)  # checks grpo.trl
    run, checkpoint = open_run(config, resume=resume, overwrite=overwrite)
    loaded = backends.load(config)
    run.write_json(rundir.BASE_MODEL, rundir.BaseModelRecord(**backends.base_record(config, loaded)).to_json())
    recorder.run = run
    measured = p_ref.ensure_p_ref(run, config, loaded, held_out, recorder.success_fn)  # RUN_DIR/p_ref.json
    if checkpoint is None and is_main_process():  # before step 1: anything to learn? (a resumed run was judged)
        gate.check(run, config, measured, held_out, force=force,  # more samples while none are right
                   measure=lambda rows, samples, seed: p_ref.measure_on(config, loaded, rows, recorder.success_fn,
                                                                        samples, seed))

    from datasets import Dataset

    zero_std_filter = None
    if config.grpo.filter_zero_std:
        from .filtering import ZeroStdFilter

        zero_std_filter = ZeroStdFilter(run, train_rows)
        recorder.on_scored.append(zero_std_filter)
    prompt_stats = None
    if remedies_on(config):  # per-prompt success for prompt_sampling difficulty, resample_all_fail and hints
        from .prompt_stats import PromptStats

        prompt_stats = PromptStats(len(train_rows), prior_mean=(measured or {}).get("mean"))
        recorder.on_scored.append(prompt_stats)
    grpo_trainer = trainer.trainer_class(loaded.trainer_class)(
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=recorder.wrapped(),
        args=args,
        # `row`: each prompt's index, which TRL hands the rewards and the recorder keeps (CompletionRecord.row)
        train_dataset=Dataset.from_list([{**r, "row": i} for i, r in enumerate(train_rows)]),
        config=config,
        zero_std_filter=zero_std_filter,
        prompt_stats=prompt_stats,
        tools=recorder.tools or None,  # a tool task: TRL's tool-calling loop, the results masked out of the loss
    )
    backends.keep_trainable_fp32(loaded)  # TRL casts LoRA weights of a 4-bit model to bf16; keep them fp32
    callback = RunDirCallback(run, recorder, config, progress=progress)
    callback.attach(grpo_trainer)
    for extra in callbacks:
        grpo_trainer.add_callback(extra)
    if measured:  # success_predicted: the paper's recurrence, or for kl none a forecast fitted to the first steps
        p_ref.attach_prediction(run, config, measured, recorder, callback)
    if config.grpo.max_minutes:
        callback.stop_checks.append(time_limit(config.grpo.max_minutes))
    if config.grpo.eval_steps:
        attach_held_out_eval(run, config, callback, grpo_trainer.model, loaded.tokenizer, held_out)
    if config.grpo.audit:
        from .audit import attach_audit

        attach_audit(config, run, recorder, callback)
    diagnostics.warn_inert_kl(run, config)
    start_step = rundir.checkpoint_step(checkpoint) if checkpoint else 0
    record_reward_files(run, config, recorder, start_step)  # RUN_DIR/reward_code.json and the copies
    run.event("info", f"training started: backend={loaded.backend} device={loaded.device} "
              f"model={loaded.model_path} train={len(train_rows)} held_out={len(held_out)}", step=start_step)
    started = time.time()
    try:
        # numpy's OpenBLAS threads spin for a while after each call (the forecast's refits) and take the
        # cores from torch's next step (bench/overhead.py, 2 cores); numpy needs no second thread here
        with ThreadpoolController().limit(limits=1, user_api="blas"):
            grpo_trainer.train(resume_from_checkpoint=checkpoint)
    finally:  # e.g. disk full: end the progress bar so the error prints on a line of its own
        callback.on_train_end(None, None, None)
    if is_main_process():  # multi-process: rank 0 alone writes the run directory
        grpo_trainer.model.save_pretrained(run.adapter_dir)
        loaded.tokenizer.save_pretrained(run.adapter_dir)
    summary = summarize(run, config, loaded, time.time() - started, early_stop=callback.early_stop)
    run.write_json(rundir.SUMMARY, summary)
    if backends.world_size() > 1:
        print(f"local-grpo: rank {process_rank()} of {backends.world_size()} trained to step {grpo_trainer.state.global_step}",
              file=sys.stderr, flush=True)
    return summary


# --- set-up -------------------------------------------------------------------------------

def checked_config(config: Config, resume: bool, overwrite: bool) -> Config:
    """The config filled with task defaults and validated (on --resume, the run's own saved config), with its
    backend resolved on this machine: config.resolved_backend, which the plan, the GRPOConfig and the loader read."""
    config = validate(fill_defaults(config))
    if resume:
        config = saved_config(config)
    elif is_main_process():
        RunDir.check_new(config.output_dir, overwrite)
    backends.resolve_backend(config)  # the run's one resolution (config.yaml keeps the request, e.g. auto)
    check_scale_out(config)
    hints.check_config(config)  # grpo.hints needs a task with worked solutions
    models.check_name(config.model.name, config.model.gguf_file)
    return config


def reward_recorder(config: Config) -> RewardRecorder:
    """The run's rewards, each built once (tasks.build_reward_set), and a tool task's tools, checked and
    sandboxed (tasks.tools.tools_for); a bad name, file or tool is a UserError naming its entry."""
    reward_set = build_reward_set(config.rewards, config.success_reward)
    return RewardRecorder(None, reward_set.functions, reward_set.weights, reward_set.success, tools=tools_for(config))


def record_reward_files(run: RunDir, config: Config, recorder: RewardRecorder, start_step: int) -> None:
    """Keep the user reward files' (and task file's) versions from the first step on, and each version a reload brings."""
    log = RewardFileLog(run, config, recorder)
    if not log.specs and not log.task_spec:
        return
    run.keep_reward_files_up_to(start_step)  # --resume redoes later steps, with the files as they are now
    log.start(start_step + 1)
    recorder.on_event.append(log.on_event)


def attach_held_out_eval(run: RunDir, config: Config, callback: RunDirCallback, model, tokenizer,
                         held_out: list[dict]) -> None:
    """Greedy pass@1 on held-out prompts every grpo.eval_steps steps (a metric hook), the best step's adapter
    kept and the early stop asked after each (BestCheckpoint); a warning when there are no held-out prompts."""
    if not held_out:
        run.event("warning", "grpo.eval_steps: no held-out prompts (data.num_heldout 0), so no eval/pass@1 is logged")
        return
    best = BestCheckpoint(run, model, tokenizer, config)
    callback.metric_hooks.append(HeldOutEval(model, tokenizer, held_out, callback.recorder, config, best=best))
    callback.stop_checks.append(best.stop_reason)


def open_run(config: Config, resume: bool, overwrite: bool) -> tuple[RunDir, str | None]:
    """Create the run directory (or reopen it for --resume) once every input has been checked.

    Returns (run, the checkpoint to resume from or None).
    """
    if not is_main_process():  # ranks > 0 of a multi-process run read RUN_DIR but never write it
        run = RunDir(config.output_dir, readonly=True)
        return run, run.last_checkpoint() if resume else None
    if resume:
        run = RunDir.open(config.output_dir)
        checkpoint = run.last_checkpoint()
        step = rundir.checkpoint_step(checkpoint) if checkpoint else 0
        for name in (rundir.METRICS, rundir.COMPLETIONS):
            run.keep_steps_up_to(name, step)
        run.event("info", f"resumed from {'step ' + str(step) if checkpoint else 'the start (no checkpoint yet)'}", step=step)
    else:
        run = RunDir.create(config.output_dir, overwrite=overwrite)
        checkpoint = None
    save_config(config, run.file(rundir.CONFIG))
    return run, checkpoint


def saved_config(config: Config) -> Config:
    """The config a run was started with (its config.yaml); a larger --max-steps extends it."""
    saved = load_config(RunDir.open(config.output_dir).file(rundir.CONFIG))
    saved.grpo.max_steps = max(saved.grpo.max_steps, config.grpo.max_steps)
    saved.output_dir = config.output_dir  # the path as given now (the saved one may be relative)
    return saved


def completed_summary(config: Config) -> dict | None:
    """The run's summary marked already_complete when its last checkpoint reached max_steps, else None.

    Checked before TRL resumes: transformers' Trainer runs one optimizer step before it tests
    global_step >= max_steps, so resuming from the final checkpoint would train a step past the end.
    """
    run = RunDir(config.output_dir, readonly=True)
    checkpoint = run.last_checkpoint()
    if checkpoint is None:
        return None
    step = rundir.checkpoint_step(checkpoint)
    try:
        with open(os.path.join(checkpoint, "trainer_state.json"), encoding="utf-8") as fh:
            step = int(json.load(fh)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # the folder name's step
    if step < config.grpo.max_steps:
        return None
    summary = run.read_json(rundir.SUMMARY) or {"run_dir": run.path, "adapter": run.adapter_dir, "steps": step}
    return {**summary, "already_complete": True, "checkpoint_step": step, "max_steps": config.grpo.max_steps}


def process_rank() -> int:
    """This process's rank in a multi-process (accelerate launch / torchrun) run; 0 when alone."""
    return int(os.environ.get("RANK", "0") or 0)


def is_main_process() -> bool:
    return process_rank() == 0


def check_scale_out(config: Config) -> None:
    """What a multi-process launch cannot do (the backend it needs is backends.choose_backend's rule)."""
    if backends.world_size() > 1:
        if config.grpo.filter_zero_std:  # each rank sees only its own completions, so ranks would retire different prompts
            raise UserError("grpo.filter_zero_std: works in single-process runs only; turn it off for multi-process training")
        if remedies := remedies_on(config):  # per-prompt statistics are per rank
            raise UserError(f"grpo.{remedies[0]}: works in single-process runs only; leave it off for multi-process "
                            "training")
        if config.grpo.eval_steps:  # generating on one rank would stall sharded (ZeRO-3) models
            raise UserError("grpo.eval_steps: works in single-process runs only; set it to 0 for multi-process "
                            "training and run `local-grpo eval` afterwards")


def remedies_on(config: Config) -> list[str]:
    """The grpo fields of the remedies that read per-prompt success (train/prompt_stats.py) that are on."""
    g = config.grpo
    on = {"prompt_sampling": g.prompt_sampling != "uniform", "resample_all_fail": g.resample_all_fail > 0,
          "hints": g.hints}
    return [name for name, active in on.items() if active]


def time_limit(minutes: float):
    """A RunDirCallback stop check: the reason to stop once `minutes` of training have passed (grpo.max_minutes)."""
    deadline = time.monotonic() + 60.0 * minutes  # monotonic: a clock change neither ends nor extends the run

    def check() -> str | None:
        return f"grpo.max_minutes: {minutes:g} minutes of training reached" if time.monotonic() >= deadline else None

    return check


# --- summary ------------------------------------------------------------------------------

def step_time_lines(breakdown: dict | None) -> list[str]:
    """Where a step's time went (the summary's `step_time`), as one line."""
    if not breakdown:
        return []
    total = sum(breakdown.values()) or 1.0
    parts = [f"{key[len('time/'):-len('_s')]} {value:.2f} s ({100 * value / total:.0f}%)"
             for key, value in breakdown.items()]
    return [f"  time per step ({total:.1f} s, mean after step 1): " + ", ".join(parts)]


def summarize(run: RunDir, config: Config, loaded, seconds: float, early_stop: dict | None = None) -> dict:
    """Reward and success at the start vs the end of training, the best checkpoint, and where things are."""
    metrics = [m for m in run.metrics() if "reward" in m]
    window = forecast.recent_steps(len(metrics))  # the last steps, the same the forecast is judged against

    def mean(rows, key):
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return round(sum(values) / len(values), 4) if values else None

    first, last = metrics[:window], metrics[-window:]
    faults = [e for e in run.events() if rundir.event_category(e) == "reward_fault"]
    signal = diagnostics.signal_summary(metrics, diagnostics.format_reward_names([s.name for s in config.rewards]))
    return {
        "run_dir": run.path,
        "adapter": run.adapter_dir,
        "backend": loaded.backend,
        "device": loaded.device,
        "cpu_autocast": backends.cpu_autocast_dtype(config, loaded.device != "cpu"),  # "bfloat16" or None (fp32)
        "model": config.model.name,
        "steps": metrics[-1]["step"] if metrics else 0,
        "train_seconds": round(seconds, 1),
        "window_steps": window,
        "reward_start": mean(first, "reward"),
        "reward_end": mean(last, "reward"),
        "success_start": mean(first, "success"),
        "success_end": mean(last, "success"),
        "reward_faults": len(faults),  # reward code/verifier problems; learning-signal findings are in signal
        "signal_alerts": len(signal["alerts"]),
        "signal": signal,
        "forecast": p_ref.forecast_summary(run, metrics),
        "step_time": rundir.mean_breakdown(metrics),  # mean time/<phase>_s after the first step
        "best": run.best(),  # grpo.eval_steps: the BestRecord of best_adapter/, which eval and export read by default
        "early_stop": early_stop,  # grpo.early_stop_evals: {"step", "reason"} when it stopped training
    }


def best_lines(summary: dict) -> list[str]:
    """The summary's lines on the early stop and the best checkpoint (none without grpo.eval_steps)."""
    lines = []
    if summary.get("early_stop"):
        lines.append(f"  stopped early after step {summary['early_stop']['step']}: {summary['early_stop']['reason']}")
    best = summary.get("best")
    if best:
        lines.append(f"  best checkpoint: step {best['step']}, held-out success {best['held_out_success']:.3f} "
                     f"(greedy, {best['prompts']} prompts): {os.path.join(summary['run_dir'], best['adapter'])} "
                     "(eval and export use it; --checkpoint final for the last step's adapter)")
    return lines


def format_summary(summary: dict) -> str:
    """The short human summary printed at the end of `train`."""
    if summary.get("already_complete"):
        return (f"Run {summary['run_dir']} is already complete (step {summary['checkpoint_step']} of max_steps "
                f"{summary['max_steps']}): nothing trained, nothing changed. A larger --max-steps extends it.")
    w = summary["window_steps"]

    def pair(key):
        a, b = summary.get(f"{key}_start"), summary.get(f"{key}_end")
        return f"{a if a is not None else '-'} -> {b if b is not None else '-'}"

    lines = [
        f"Trained {summary['steps']} steps in {summary['train_seconds']:.0f} s ({summary['backend']} backend, {summary['device']}).",
        f"  reward  (mean of first/last {w} steps): {pair('reward')}",
        f"  success (mean of first/last {w} steps): {pair('success')}",
    ]
    if summary.get("reward_faults"):
        lines.append(f"  reward faults: {summary['reward_faults']} (a reward raised, timed out or returned bad "
                     "values, or the audit disagreed; see events.jsonl)")
    lines += diagnostics.summary_lines(summary.get("signal"))
    lines += p_ref.forecast_lines(summary.get("forecast"))
    lines += step_time_lines(summary.get("step_time"))
    lines += best_lines(summary)
    lines.append(f"  run directory: {summary['run_dir']}")
    lines.append(f"  LoRA adapter:  {summary['adapter']}")
    return "\n".join(lines)
