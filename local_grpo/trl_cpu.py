"""A CPU path for TRL 1.15's fused log-prob kernel (a patch of TRL: this module says so at its top).

TRL 1.15 always patches the policy with a fused LM head whose per-token log-prob function
(`trl.trainer.utils._ChunkedLogProbFunction`) is a Triton kernel. With a torch that ships Triton
(unsloth pulls torch 2.14.1) it is imported on CPU too and fails at the first loss with
"0 active drivers". TRL 1.16 checks the device and has a torch path, but unsloth 2026.10.9 caps
trl at 1.15. `apply()` swaps in plain torch (log_softmax + gather, plus the optional outputs),
only when training off CUDA. Remove this module once trl >= 1.16 is allowed.
"""

from __future__ import annotations

TOKENS_PER_CHUNK = 1024  # bounds the [tokens, vocab] logits held at once


class TorchChunkedLogProb:
    """Same call signature as trl's ChunkedLogProbFunction.apply, in plain autograd torch."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None,
              logit_scale=1.0, outputs=("entropy",)):
        import torch

        pieces = []
        for start in range(0, hidden.shape[0], TOKENS_PER_CHUNK):
            h, t = hidden[start:start + TOKENS_PER_CHUNK], targets[start:start + TOKENS_PER_CHUNK]
            logits = h @ weight.t()
            if bias is not None:
                logits = logits + bias
            logits = (logits * logit_scale).float()
            if final_logit_softcapping:
                logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
            z = logits / temperature
            log_p = torch.log_softmax(z, dim=-1)
            token_log_p = log_p.gather(-1, t[:, None]).squeeze(-1)
            entropy = -(log_p.exp() * log_p).sum(-1) if "entropy" in outputs else None
            log_sum_sq = torch.logsumexp(2 * log_p, -1).detach() if "log_sum_sq_probs" in outputs else None
            mean_logits = z.mean(-1).detach() if "mean_logits" in outputs else None
            is_top1 = (z.argmax(-1) == t).detach() if "is_top1" in outputs else None
            pieces.append((token_log_p, entropy, log_sum_sq, mean_logits, is_top1))
        if not pieces:
            empty = hidden.new_zeros((0,), dtype=torch.float32)
            return empty, empty if "entropy" in outputs else None, None, None, None
        return tuple(None if parts[0] is None else torch.cat(parts) for parts in zip(*pieces))


def apply() -> bool:
    """Install the torch path into trl (idempotent). Returns True when it was installed now."""
    import trl.trainer.utils as trl_utils

    if getattr(trl_utils, "_ChunkedLogProbFunction", None) is TorchChunkedLogProb:
        return False
    trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return True
