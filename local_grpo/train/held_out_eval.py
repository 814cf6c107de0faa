"""Periodic held-out evaluation during training: greedy pass@1 every `grpo.eval_steps` steps.

A RunDirCallback metric hook. At each multiple of eval_steps it generates one greedy completion for
each of the first `grpo.eval_prompts` held-out prompts (generation.generate, the same greedy path as
`local-grpo eval`) and judges them with the run's success reward (score >= 0.999). The result is
`eval/pass@1` (and `eval/seconds`) in that step's metrics.jsonl line. The model is put back in
training mode and the torch RNG streams restored afterwards, so training continues as it would have.
"""

from __future__ import annotations

import time

from ..config import Config
from .recorder import RewardRecorder

GENERATION_BATCH = 16  # prompts generated at once


class HeldOutEval:
    """Metric hook: {"eval/pass@1", "eval/seconds"} at steps that are multiples of `every`, else {}."""

    def __init__(self, model, tokenizer, rows: list[dict], recorder: RewardRecorder, config: Config):
        self.model = model
        self.tokenizer = tokenizer
        self.rows = rows[: config.grpo.eval_prompts]
        self.recorder = recorder
        self.every = config.grpo.eval_steps
        self.max_new_tokens = config.grpo.max_completion_length

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
        return {"eval/pass@1": round(sum(success) / len(success), 4), "eval/seconds": round(time.time() - started, 2)}

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
                                                                      sample=False)]
        finally:
            torch.random.set_rng_state(cpu_state)
            if cuda_states is not None:
                torch.cuda.set_rng_state_all(cuda_states)
            self.model.train(was_training)
        return texts
