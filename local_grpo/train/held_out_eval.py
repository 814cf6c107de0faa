"""Periodic held-out evaluation during training: greedy pass@1 every `grpo.eval_steps` steps.

A RunDirCallback metric hook. At each multiple of eval_steps it generates one greedy completion for
each of the first `grpo.eval_prompts` held-out prompts (generation.generate, the same greedy path as
`local-grpo eval`) and judges them with the run's success reward (score >= 0.999). The result is
`eval/pass@1` (and `eval/seconds`) in that step's metrics.jsonl line. The model is put back in
training mode and the torch RNG streams restored afterwards, so training continues as it would have.

`BestCheckpoint` follows each result: a new best (strictly above every earlier eval) has its adapter
copied to RUN_DIR/best_adapter/ with RUN_DIR/best.json (rundir.RunDir.save_best), which eval and export
read by default; with grpo.early_stop_evals = K it asks the callback to stop training once K evals in a
row have not beaten the best (`BestSoFar`: the rule, over the sequence of results).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import rundir
from ..config import Config
from ..tasks.tools import max_tool_rounds
from .recorder import RewardRecorder

GENERATION_BATCH = 16  # prompts generated at once


class HeldOutEval:
    """Metric hook: {"eval/pass@1", "eval/seconds"} at steps that are multiples of `every`, else {}."""

    def __init__(self, model, tokenizer, rows: list[dict], recorder: RewardRecorder, config: Config,
                 best: "BestCheckpoint | None" = None):
        self.model = model
        self.tokenizer = tokenizer
        self.rows = rows[: config.grpo.eval_prompts]
        self.recorder = recorder
        self.every = config.grpo.eval_steps
        self.max_new_tokens = config.grpo.max_completion_length
        self.max_tool_rounds = max_tool_rounds(config)  # a tool task's completions call its tools (recorder.tools)
        self.best = best  # told each result

    def due(self, step: int) -> bool:
        return bool(self.every and self.rows and step > 0 and step % self.every == 0)

    def __call__(self, step: int) -> dict:
        if not self.due(step):
            return {}
        started = time.time()
        texts = self.greedy_texts()
        columns = {key: [row.get(key) for row in self.rows] for key in self.rows[0] if key != "prompt"}
        chat = [[{"role": "assistant", "content": text}] for text in texts]
        # the next step is the first to train with any reward-file edit this call picks up
        success = self.recorder.judge(chat, step + 1, prompts=[row["prompt"] for row in self.rows], **columns)
        result = {"eval/pass@1": round(sum(success) / len(success), 4), "eval/seconds": round(time.time() - started, 2)}
        if self.best is not None:
            self.best.observe(step, result["eval/pass@1"], len(self.rows))
        return result

    def greedy_texts(self) -> list[str]:
        """One greedy completion per row, in eval mode, leaving the training mode and RNG streams as they were."""
        import torch

        from ..generation import GenerationSettings, generate

        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        was_training = self.model.training
        cpu_state = torch.random.get_rng_state()
        cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.model.eval()
        texts = []
        try:
            for start in range(0, len(self.rows), GENERATION_BATCH):
                prompts = [row["prompt"] for row in self.rows[start:start + GENERATION_BATCH]]
                texts += [per_prompt[0][0] for per_prompt in generate(self.model, self.tokenizer, prompts, settings,
                                                                      sample=False, tools=self.recorder.tools or None,
                                                                      max_tool_rounds=self.max_tool_rounds)]
        finally:
            torch.random.set_rng_state(cpu_state)
            if cuda_states is not None:
                torch.cuda.set_rng_state_all(cuda_states)
            self.model.train(was_training)
        return texts


@dataclass(frozen=True)
class BestSoFar:
    """The early-stop rule's state over a sequence of held-out results: the best one and the evals since."""

    step: int | None = None  # the step of the best result (the first, on a tie)
    success: float | None = None
    evals_since: int = 0  # results after the best one that did not beat it

    def after(self, step: int, success: float) -> "BestSoFar":
        """The state after one more result; a new best only when strictly above the best so far."""
        if self.success is None or success > self.success:
            return BestSoFar(step, success, 0)
        return BestSoFar(self.step, self.success, self.evals_since + 1)

    def stale(self, patience: int) -> bool:
        """True when `patience` > 0 results in a row have not improved on the best (grpo.early_stop_evals)."""
        return patience > 0 and self.evals_since >= patience


class BestCheckpoint:
    """Keeps the adapter of the best held-out result (best_adapter/, best.json) and says when to stop early.

    On --resume it starts from best.json and counts the eval lines metrics.jsonl kept after the best's step.
    """

    def __init__(self, run: rundir.RunDir, model, tokenizer, config: Config):
        self.run = run
        self.model = model
        self.tokenizer = tokenizer
        self.patience = config.grpo.early_stop_evals
        self.state = BestSoFar()
        kept = run.best()
        if kept is not None:
            since = sum(1 for m in run.metrics() if "eval/pass@1" in m and m["step"] > kept["step"])
            self.state = BestSoFar(kept["step"], kept["held_out_success"], since)

    def observe(self, step: int, success: float, prompts: int) -> None:
        """Record one held-out result; a new best's adapter (and tokenizer) replace best_adapter/."""
        self.state = self.state.after(step, success)
        if self.state.evals_since:  # not a new best
            return

        def write(folder: str) -> None:
            self.model.save_pretrained(folder)
            self.tokenizer.save_pretrained(folder)

        self.run.save_best(rundir.BestRecord(step=step, held_out_success=success, prompts=prompts,
                                             adapter=rundir.BEST_ADAPTER), write)

    def stop_reason(self) -> str | None:
        """Why training should stop now (grpo.early_stop_evals reached), or None."""
        if not self.state.stale(self.patience):
            return None
        return (f"held-out success has not improved for {self.state.evals_since} evals (grpo.early_stop_evals "
                f"{self.patience}); the best, {self.state.success:.3f} at step {self.state.step}, is in "
                f"{rundir.BEST_ADAPTER}/")
