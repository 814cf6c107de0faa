"""KL variants on top of TRL's GRPOTrainer: grpo.kl none | ref | mirror | both (a subclass; it patches TRL).

    none    no KL term (TRL beta 0)                                  -> the base class as is
    ref     β·KL(π‖π_ref), TRL's own beta                            -> the base class as is
    mirror  β·KL(π‖π_old), π_old = the policy that generated the batch -> subclass below
    both    TRL's beta carries α·β to π_ref, the subclass (1−α)·β to π_old

The mirror term uses the same per-token k3 estimator as TRL's reference KL,
exp(old − logp) − (old − logp) − 1, and the same aggregation over tokens as the run's loss_type, so
β means the same thing in both terms. π_old's log-probs are TRL's `old_per_token_logps`: TRL 1.15
scores them at generation time (no grad) whenever a generated batch is reused, i.e. whenever
num_iterations > 1. With num_iterations = 1 it leaves them None because the policy has not moved
since generation; we then use the current log-probs, detached — the exact generation-time values,
so the term and its gradient are zero: a KL to the policy that generated the batch only acts from the
second inner iteration on (see docs/dynamics.md).

Hooks into TRL 1.15 internals (re-check on a TRL upgrade): `_compute_loss(model, inputs)`, and
`_get_per_token_logps_and_entropies`, whose grad-enabled call inside `_compute_loss` returns the
policy log-probs we reuse (no second forward pass). The mirror KL is logged as `kl_mirror` through
TRL's `_metrics`. Unsloth's GRPOTrainer replaces the loss with its own fused one that bypasses these
hooks, so mirror/both refuse it with a clear error instead of silently training without the term.
"""

from __future__ import annotations

from .config import Config
from .errors import UserError


def trainer_class(base_class, config: Config):
    """The trainer class for the config's KL variant: `base_class` itself, or a subclass adding the mirror KL."""
    kl = config.kl_mode
    if kl in ("none", "ref"):
        return base_class
    if "unsloth" in f"{base_class.__module__}.{base_class.__name__}".lower():
        raise UserError(f"grpo.kl: {kl} needs the hf backend (Unsloth's fused GRPO loss has no hook for "
                        "the KL to the previous policy); use --backend hf, or kl ref/none")
    g = config.grpo
    mirror_beta = g.beta * ((1.0 - g.kl_alpha) if kl == "both" else 1.0)
    ref_beta = g.beta * g.kl_alpha if kl == "both" else 0.0

    class MirrorKLTrainer(base_class):
        """GRPO with β·KL(π‖π_old) added to the loss (and α·β to the reference for kl=both)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # both: grpo_args passed the full β so TRL loads the reference; its term carries α·β.
            self.beta = ref_beta
            self.mirror_beta = mirror_beta
            self._policy_logps = None

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            import torch

            if torch.is_grad_enabled():  # the policy forward inside _compute_loss (old/ref ones run under no_grad)
                self._policy_logps = out[0]
            return out

        def _compute_loss(self, model, inputs):
            self._policy_logps = None
            loss = super()._compute_loss(model, inputs)
            logps = self._policy_logps
            if logps is None:  # evaluation (no grad): nothing to regularise
                return loss
            old = inputs.get("old_per_token_logps")
            old = logps.detach() if old is None else old
            per_token_kl = mirror_kl(logps, old)
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            if self.mirror_beta:
                loss = loss + self.mirror_beta * aggregate(self, per_token_kl, mask, inputs)
            mode = "train" if self.model.training else "eval"
            mean_kl = (per_token_kl.detach() * mask).sum() / mask.sum().clamp(min=1.0)
            self._metrics[mode]["kl_mirror"].append(self.accelerator.gather(mean_kl).mean().item())
            return loss

    MirrorKLTrainer.__name__ = f"MirrorKL{base_class.__name__}"
    MirrorKLTrainer.__qualname__ = MirrorKLTrainer.__name__
    return MirrorKLTrainer


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
