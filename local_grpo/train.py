"""GRPO training into a run directory: config -> backend -> data -> rewards -> TRL trainer -> files.

`train()` shows the whole flow in one screen; the pieces it uses (reward recording, the
run-directory callback, the TRL config) follow below it. We wrap TRL's GRPOTrainer; we do not fork it.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

from . import backends, data, diagnostics, filtering, kl_variants, rundir, success
from .config import Config, fill_defaults, validate
from .config import save as save_config
from .errors import UserError
from .rundir import RunDir

SUCCESS_THRESHOLD = 0.999  # a correctness score >= this counts as a success


def train(config: Config, resume: bool = False, overwrite: bool = False, progress: bool = True) -> dict:
    """Train with GRPO and write RUN_DIR; returns the summary (also in RUN_DIR/summary.json)."""
    import rewards

    run, config, checkpoint, (train_rows, held_out) = prepare_run(config, resume=resume, overwrite=overwrite)
    loaded = backends.load(config)  # before trl/transformers: Unsloth must patch them first
    reward_fns = [rewards.get(spec.name, **spec.params) for spec in config.rewards]
    success_fn = next((f for f in reward_fns if f.__name__ == config.success_reward), None)
    if success_fn is None:
        success_fn = rewards.get(config.success_reward)
    recorder = RewardRecorder(run, reward_fns, [s.weight for s in config.rewards], success_fn)
    p_ref = success.ensure_p_ref(run, config, loaded, held_out, success_fn)  # RUN_DIR/p_ref.json

    from datasets import Dataset

    trainer = kl_variants.trainer_class(loaded.trainer_class, config)(  # kl mirror/both: our subclass
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=recorder.wrapped(),
        args=grpo_args(config, run, loaded),
        train_dataset=Dataset.from_list(train_rows),
    )
    callback = RunDirCallback(run, recorder, config, progress=progress)
    callback.attach(trainer)
    if p_ref:
        callback.metric_hooks.append(success.PredictedSuccess(p_ref, config))
    diagnostics.attach(trainer, run, config)  # zero-signal streaks, length drift, hacking signs
    if config.grpo.filter_zero_std:
        filtering.attach(trainer, run, recorder, train_rows)
    if config.grpo.audit:
        from .audit import attach_audit

        attach_audit(config, run, recorder, callback)
    run.event("info", f"training started: backend={loaded.backend} device={loaded.device} "
              f"model={loaded.model_path} train={len(train_rows)} held_out={len(held_out)}",
              step=callback.start_step(checkpoint))
    started = time.time()
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:  # e.g. disk full: end the progress bar so the error prints on a line of its own
        callback.on_train_end(None, None, None)
    if is_main_process():  # multi-process: rank 0 alone writes the run directory
        trainer.model.save_pretrained(run.adapter_dir)
        loaded.tokenizer.save_pretrained(run.adapter_dir)
    summary = summarize(run, config, loaded, time.time() - started)
    run.write_json(rundir.SUMMARY, summary)
    if world_size() > 1:
        print(f"local-grpo: rank {process_rank()} of {world_size()} trained to step {trainer.state.global_step}",
              file=sys.stderr, flush=True)
    return summary


# --- set-up -------------------------------------------------------------------------------

def prepare_run(config: Config, resume: bool, overwrite: bool):
    """Validate config, rewards and data, then create the run directory (or reopen it for --resume).

    Returns (run, config, checkpoint or None, (train_rows, held_out)). Nothing is written before
    every input has been checked.
    """
    config = validate(fill_defaults(config))
    check_rewards(config)
    check_scale_out(config)
    if resume:
        config = saved_config(config)
    if not is_main_process():  # ranks > 0 of a multi-process run read RUN_DIR but never write it
        run = RunDir(config.output_dir, readonly=True)
        return run, config, run.last_checkpoint() if resume else None, data.load_examples(config)
    if resume:
        run = RunDir.open(config.output_dir)
        checkpoint = run.last_checkpoint()
        step = int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else 0
        for name in (rundir.METRICS, rundir.COMPLETIONS):
            run.keep_steps_up_to(name, step)
        examples = data.load_examples(config)
        run.event("info", f"resumed from {'step ' + str(step) if checkpoint else 'the start (no checkpoint yet)'}", step=step)
    else:
        examples = data.load_examples(config)
        run = RunDir.create(config.output_dir, overwrite=overwrite)
        checkpoint = None
    save_config(config, run.file(rundir.CONFIG))
    return run, config, checkpoint, examples


def saved_config(config: Config) -> Config:
    """The config a run was started with (its config.yaml); a larger --max-steps extends it."""
    from .config import load as load_config

    saved = load_config(RunDir.open(config.output_dir).file(rundir.CONFIG))
    saved.grpo.max_steps = max(saved.grpo.max_steps, config.grpo.max_steps)
    saved.output_dir = config.output_dir  # the path as given now (the saved one may be relative)
    return saved


def process_rank() -> int:
    """This process's rank in a multi-process (accelerate launch / torchrun) run; 0 when alone."""
    return int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def is_main_process() -> bool:
    return process_rank() == 0


def check_scale_out(config: Config) -> None:
    """Which backend supports what: Unsloth is the single-GPU path; several processes need the hf backend.

    `auto` resolves to hf when several processes train; vLLM server mode generates through TRL (hf backend).
    """
    if world_size() > 1:
        if config.backend == "unsloth":
            raise UserError(f"backend: unsloth trains in one process on one GPU; this is a {world_size()}-process "
                            "launch (accelerate/torchrun), which needs --backend hf (see docs/scaling.md)")
        config.backend = "hf"
    if config.grpo.use_vllm and config.grpo.vllm_mode == "server" and config.backend == "auto":
        config.backend = "hf"
    if config.grpo.use_vllm and config.grpo.vllm_mode == "server" and config.backend == "unsloth":
        raise UserError("grpo.vllm_mode: server mode (a separate `trl vllm-serve`) needs --backend hf; "
                        "Unsloth generates with its own in-process vLLM (vllm_mode colocate)")


def check_rewards(config: Config) -> None:
    """Load every reward spec once so a bad name or file fails before any model loads."""
    import rewards

    for i, spec in enumerate(config.rewards):
        try:
            rewards.get(spec.name, **spec.params)
        except rewards.RewardSpecError as exc:
            raise UserError(f"rewards[{i}]: {exc}") from None
    try:
        rewards.get(config.success_reward)
    except rewards.RewardSpecError as exc:
        raise UserError(f"success_reward: {exc}") from None


def grpo_args(config: Config, run: RunDir, loaded: backends.LoadedModel):
    """TRL's GRPOConfig for our config (CPU: use_cpu, no bf16)."""
    import torch
    from trl import GRPOConfig

    g = config.grpo
    on_cuda = loaded.device == "cuda"
    dtype = backends.compute_dtype(config, on_cuda)
    kwargs = dict(
        output_dir=run.checkpoints_dir,
        use_cpu=not on_cuda,
        bf16=on_cuda and dtype == torch.bfloat16,
        fp16=on_cuda and dtype == torch.float16,
        per_device_train_batch_size=g.per_device_train_batch_size,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        top_p=g.top_p,
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler_type,
        warmup_steps=g.warmup_steps,
        max_grad_norm=g.max_grad_norm,
        beta=g.beta if config.kl_mode in ("ref", "both") else 0.0,
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        num_iterations=g.num_iterations,
        epsilon=g.epsilon,
        max_steps=g.max_steps,
        logging_steps=g.logging_steps,
        save_strategy="steps",
        save_steps=g.save_steps,
        save_total_limit=g.save_total_limit,
        # Unsloth applies its own checkpointing in get_peft_model.
        gradient_checkpointing=g.gradient_checkpointing and loaded.backend == "hf",
        optim=g.optim,
        seed=g.seed,
        data_seed=g.seed,
        report_to="none",
        reward_weights=[s.weight for s in config.rewards],
        use_vllm=g.use_vllm,
        log_completions=False,
        disable_tqdm=True,  # our own progress bar (RunDirCallback)
    )
    if g.use_vllm:
        kwargs["vllm_mode"] = g.vllm_mode
        if g.vllm_mode == "server":  # a `trl vllm-serve` started separately (docs/scaling.md)
            kwargs["vllm_server_host"] = g.vllm_server_host
            kwargs["vllm_server_port"] = g.vllm_server_port
    return GRPOConfig(**kwargs)


# --- reward recording ---------------------------------------------------------------------

@dataclass
class _Batch:
    """Scores of the batch being scored, filled reward by reward."""

    prompts: list = field(default_factory=list)
    completions: list = field(default_factory=list)
    answers: list = field(default_factory=list)
    scores: dict = field(default_factory=dict)


def completion_text(completion) -> str:
    """A completion as text (TRL passes chat lists for chat prompts)."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def prompt_text(prompt) -> str:
    """The user's question from a chat prompt (the last user turn), or the prompt string."""
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users else completion_text(prompt)
    return str(prompt)


class RewardRecorder:
    """Wraps the reward functions TRL calls so every score is also written to completions.jsonl.

    TRL calls the functions in order on one batch; when the last one has scored, the recorder
    computes success and the weighted total and appends one line per completion.
    """

    def __init__(self, run: RunDir | None, reward_fns: list, weights: list[float], success_fn, write: bool = True):
        self.run = run
        self.reward_fns = reward_fns
        self.weights = list(weights)
        self.success_fn = success_fn
        self.write = write and run is not None
        self.step = 0
        self.batch = _Batch()
        self.success_window: list[float] = []  # per-completion success since the last log
        self.on_scored = []  # callables(step, records) e.g. for live diagnostics

    @property
    def names(self) -> list[str]:
        return [f.__name__ for f in self.reward_fns]

    def wrapped(self) -> list:
        return [self._wrap(i, fn) for i, fn in enumerate(self.reward_fns)]

    def _wrap(self, index: int, fn):
        def reward(completions, **kwargs):
            if index == 0:
                self.batch = _Batch(kwargs.get("prompts") or [], completions, kwargs.get("answer") or [])
                state = kwargs.get("trainer_state")
                self.step = (state.global_step + 1) if state is not None else self.step + 1
            scores = fn(completions, **kwargs)
            self.batch.scores[fn.__name__] = scores
            self._write_events(fn)
            if index == len(self.reward_fns) - 1:
                self._finish_batch(completions, kwargs)
            return scores

        reward.__name__ = fn.__name__
        return reward

    def _write_events(self, fn) -> None:
        for event in fn.drain_events():
            if self.write:
                kind = event.pop("type", "reward_fault")
                message = event.pop("message", "")
                self.run.event(kind, message, step=self.step, **event)

    def _finish_batch(self, completions, kwargs) -> None:
        name = self.success_fn.__name__
        success_scores = self.batch.scores.get(name)
        if success_scores is None:
            success_scores = self.success_fn(completions, **kwargs)
            self._write_events(self.success_fn)
        success = [1 if (s is not None and s >= SUCCESS_THRESHOLD) else 0 for s in success_scores]
        self.success_window.extend(success)
        records = []
        for i, completion in enumerate(completions):
            per_reward = {n: self.batch.scores[n][i] for n in self.names}
            total = sum(w * s for w, s in zip(self.weights, per_reward.values()) if s is not None)
            records.append({
                "step": self.step,
                "prompt": prompt_text(self.batch.prompts[i]) if i < len(self.batch.prompts) else "",
                "completion": completion_text(completion),
                "answer": self.batch.answers[i] if i < len(self.batch.answers) else None,
                "rewards": per_reward,
                "total": round(total, 6),
                "success": success[i],
            })
        if self.write:
            for record in records:
                self.run.append(rundir.COMPLETIONS, record)
        for hook in self.on_scored:
            hook(self.step, records)

    def take_success(self) -> float | None:
        """Mean success since the last call (None when nothing was scored)."""
        window, self.success_window = self.success_window, []
        return sum(window) / len(window) if window else None


# --- the run-directory callback -----------------------------------------------------------

class RunDirCallback:
    """Writes metrics.jsonl each logged step, applies live reward-weight changes, shows progress.

    A transformers TrainerCallback by duck typing (events it does not define are no-ops), so that
    importing this module does not import transformers before Unsloth gets to patch it.
    """

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def __init__(self, run: RunDir, recorder: RewardRecorder, config: Config, progress: bool = True):
        self.run = run
        self.recorder = recorder
        self.config = config
        self.progress = progress
        self.trainer = None
        self.bar = None
        self.metric_hooks = []  # callables(step) -> dict of extra metrics (audit, predictor, ...)
        self._control_mtime = None
        self._started = time.time()

    def attach(self, trainer) -> None:
        """Add this callback to the trainer, replacing transformers' own log printers."""
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        self.trainer = trainer
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(self)

    @staticmethod
    def start_step(checkpoint: str | None) -> int:
        return int(checkpoint.rsplit("-", 1)[-1]) if checkpoint else 0

    def on_train_begin(self, args, state, control, **kwargs):
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="GRPO", unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    def on_step_begin(self, args, state, control, **kwargs):
        self.apply_control()

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = dict(logs or {})
        if "train_runtime" in logs or not {"reward", "loss"} & logs.keys():
            return  # the trainer's end-of-training summary line (steps that reuse a batch, num_iterations > 1, have loss but no reward)
        record = {"step": state.global_step}
        for key, value in logs.items():
            if isinstance(value, (int, float)):
                record[key] = value
        success = self.recorder.take_success()
        if success is not None:
            record["success"] = success
        for hook in self.metric_hooks:
            record.update(hook(state.global_step))
        record["time"] = round(time.time() - self._started, 2)
        self.run.append(rundir.METRICS, record)
        if self.bar is not None:
            post = {"reward": f"{record['reward']:.3f}"} if "reward" in record else {}
            if success is not None:
                post["success"] = f"{success:.2f}"
            if "completions/mean_length" in record:
                post["len"] = f"{record['completions/mean_length']:.0f}"
            self.bar.set_postfix(post, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def apply_control(self) -> None:
        """Read RUN_DIR/control.json (written by the app) and apply new reward weights."""
        path = self.run.file(rundir.CONTROL)
        try:
            mtime = os.path.getmtime(path)
        except OSError:
            return
        if mtime == self._control_mtime:
            return
        self._control_mtime = mtime
        control = self.run.read_json(rundir.CONTROL) or {}
        weights = control.get("weights") or {}
        names = self.recorder.names
        changed = {}
        for name, weight in weights.items():
            if name in names and isinstance(weight, (int, float)) and not isinstance(weight, bool):
                i = names.index(name)
                if self.recorder.weights[i] != float(weight):
                    self.recorder.weights[i] = float(weight)
                    changed[name] = float(weight)
            else:
                self.run.event("warning", f"control.json: ignored weight for {name!r} (not a reward of this run or not a number)")
        if not changed:
            return
        step = self.trainer.state.global_step + 1 if self.trainer is not None else None
        if self.trainer is not None:
            import torch

            self.trainer.reward_weights = torch.tensor(self.recorder.weights, dtype=torch.float32)
        self.run.event("weights_changed", f"reward weights changed: {changed}", step=step,
                       weights=dict(zip(names, self.recorder.weights)))


# --- summary ------------------------------------------------------------------------------

def summarize(run: RunDir, config: Config, loaded, seconds: float) -> dict:
    """Reward and success at the start vs the end of training, and where things are."""
    metrics = [m for m in run.metrics() if "reward" in m]
    window = max(1, min(5, len(metrics) // 4 or 1))

    def mean(rows, key):
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return round(sum(values) / len(values), 4) if values else None

    first, last = metrics[:window], metrics[-window:]
    faults = [e for e in run.events() if e.get("type") in ("reward_fault", "alert")]
    return {
        "run_dir": run.path,
        "adapter": run.adapter_dir,
        "backend": loaded.backend,
        "device": loaded.device,
        "model": config.model.name,
        "steps": metrics[-1]["step"] if metrics else 0,
        "train_seconds": round(seconds, 1),
        "window_steps": window,
        "reward_start": mean(first, "reward"),
        "reward_end": mean(last, "reward"),
        "success_start": mean(first, "success"),
        "success_end": mean(last, "success"),
        "reward_faults": len(faults),
        "signal": diagnostics.signal_summary(metrics, diagnostics.format_reward_names(config)),
    }


def format_summary(summary: dict) -> str:
    """The short human summary printed at the end of `train`."""
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
        lines.append(f"  reward faults/alerts: {summary['reward_faults']} (see events.jsonl)")
    lines += diagnostics.summary_lines(summary.get("signal"))
    lines.append(f"  run directory: {summary['run_dir']}")
    lines.append(f"  LoRA adapter:  {summary['adapter']}")
    return "\n".join(lines)
