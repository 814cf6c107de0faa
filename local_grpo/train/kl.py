"""KL variants: grpo.kl none | ref | mirror | both, and the maths of the mirror term.

    none    no KL term (TRL beta 0)
    ref     β·KL(π‖π_ref), TRL's own beta
    mirror  β·KL(π‖π_old), π_old = the policy that generated the batch (trainer.LocalGRPOHooks)
    both    TRL's beta carries α·β to π_ref, our term (1−α)·β to π_old

The mirror term uses the same per-token k3 estimator as TRL's reference KL,
exp(old − logp) − (old − logp) − 1, and the same aggregation over tokens as the run's loss_type, so
β means the same thing in both terms. π_old's log-probs are TRL's `old_per_token_logps`: TRL 1.15
scores them at generation time (no grad) whenever a generated batch is reused, i.e. whenever
num_iterations > 1. With num_iterations = 1 it leaves them None because the policy has not moved
since generation; the trainer then uses the current log-probs, detached, so the term and its
gradient are zero: a KL to the policy that generated the batch only acts from the second inner
iteration on (see docs/dynamics.md). The mirror KL is logged as `kl_mirror`.
"""

from __future__ import annotations

from ..errors import UserError


def mirror_kl(logps, old_logps):
    """Per-token k3 estimate of KL(π‖π_old) on samples from π_old (≥ 0, zero when π = π_old)."""
    import torch

    diff = old_logps - logps
    return torch.exp(diff) - diff - 1


def aggregate(trainer, per_token, mask, inputs):
    """Reduce a per-token term over tokens exactly as TRL 1.15 reduces the policy loss for its loss_type."""
    mode = "train" if trainer.model.training else "eval"
    accumulation = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
    masked = per_token * mask
    loss_type = trainer.loss_type
    if loss_type in ("grpo", "sapo"):
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0) / accumulation
    if loss_type == "dr_grpo":
        return masked.sum() / (per_token.size(0) * trainer.max_completion_length) / accumulation
    if loss_type in ("cispo", "dapo", "vespo"):
        normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
        if mode == "train":
            normalizer = normalizer * trainer.current_gradient_accumulation_steps / trainer.args.steps_per_generation
        return masked.sum() / normalizer
    if loss_type == "luspo":
        return masked.sum(-1).mean() / accumulation
    raise UserError(f"grpo.loss_type: {loss_type!r} is not supported with kl mirror/both")
