"""Every TRL hook of local-grpo, in one place: the GRPOConfig we pass, and one trainer class.

Checked against TRL 1.15.0 (`TRL_VERSION_CHECKED`). `HOOKED_METHODS` lists the GRPOTrainer methods we
override with the signatures we rely on; tests/test_trainer_hooks.py fails loudly when an upgrade
changes one of them. Our trainer is `LocalGRPOHooks` mixed in front of the backend's GRPOTrainer
(TRL's own, or the one Unsloth swaps into `trl` at import), and it extends TRL only through these
overrides:

    _get_train_sampler                  grpo.filter_zero_std: TRL's RepeatSampler, retired prompts skipped;
                                        grpo.prompt_sampling difficulty: prompts drawn by estimated success
    _generate_and_score_completions     grpo.hints (a worked solution's start for prompts that all failed) and
                                        grpo.resample_all_fail (DAPO's dynamic sampling of all-fail groups)
    _get_per_token_logps_and_entropies  grpo.kl mirror|both: keeps the grad-enabled policy log-probs ...
    _compute_loss                       ... and adds β·KL(π‖π_old) to TRL's loss (train/kl.py has the maths)
    set_reward_weights                  live weights from control.json (TRL's `reward_weights` tensor)
    training_step, _prepare_inputs,     the step-time breakdown (step_timer.py): each phase timed where
    _generate_single_turn,              TRL runs it; time/<phase>_s in metrics.jsonl
    _calculate_rewards
    _generate_single_turn (again)       on CPU, grpo.fast_cpu_generation: generation.cpu_sampling_speedups
                                        (with bf16 weights when CPU training runs under bf16 autocast)

On CPU it also installs a torch path for TRL 1.15's Triton-only fused log-prob kernel
(`install_cpu_logprob`), the one module-level patch we make; remove it once trl >= 1.16 is allowed.
Unsloth's GRPOTrainer computes its own fused loss that bypasses `_compute_loss`, so kl mirror|both
need the hf backend (backends.choose_backend resolves auto to hf for them and refuses an explicit unsloth).
"""

from __future__ import annotations

from ..config import Config
from ..errors import UserError
from . import kl as kl_maths
from .step_timer import StepTimer

TRL_VERSION_CHECKED = "1.15.0"
# name -> the parameters we rely on, in order, of the TRL 1.15 GRPOTrainer methods we override
HOOKED_METHODS = {
    "_get_train_sampler": ("self", "dataset"),
    "_generate_and_score_completions": ("self", "inputs"),
    "_get_per_token_logps_and_entropies": ("self", "model", "input_ids", "attention_mask", "logits_to_keep",
                                           "batch_size", "compute_entropy", "compute_aux_loss"),  # leading params
    "_compute_loss": ("self", "model", "inputs"),
    "training_step": ("self", "model", "inputs", "num_items_in_batch"),
    "_prepare_inputs": ("self", "generation_batch"),
    "_generate_single_turn": ("self", "prompt_ids", "images", "multimodal_fields", "num_generations"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
}
TOKENS_PER_CHUNK = 1024  # CPU log-prob path: bounds the [tokens, vocab] logits held at once


def trainer_class(base_class):
    """Our trainer: `LocalGRPOHooks` in front of the backend's GRPOTrainer class."""
    return type(f"Local{base_class.__name__}", (LocalGRPOHooks, base_class), {})


class LocalGRPOHooks:
    """The GRPOTrainer overrides listed in HOOKED_METHODS. Construct with the usual GRPOTrainer
    arguments plus `config` (our Config), for grpo.filter_zero_std `zero_std_filter`, and for the remedies
    that read per-prompt success (prompt_sampling, resample_all_fail, hints) `prompt_stats`."""

    def __init__(self, *args, config: Config, zero_std_filter=None, prompt_stats=None, **kwargs):
        if kwargs["args"].use_cpu:
            install_cpu_logprob()
        super().__init__(*args, **kwargs)
        self.zero_std_filter = zero_std_filter
        self.prompt_stats = prompt_stats
        self.remedies = config.grpo
        g, kl = config.grpo, config.kl_mode
        self.mirror_beta = g.beta * ((1.0 - g.kl_alpha) if kl == "both" else 1.0) if kl in ("mirror", "both") else 0.0
        if kl == "both":  # grpo_args passed the full β so TRL loads the reference; its term carries α·β
            self.beta = g.beta * g.kl_alpha
        self._policy_logps = None
        self.step_timer = StepTimer()
        # grpo.fast_cpu_generation: TRL's transformers generation inside generation.cpu_sampling_speedups
        self.fast_cpu_generation = bool(kwargs["args"].use_cpu and config.grpo.fast_cpu_generation)

    # --- the step-time breakdown: each span timed around TRL's own method ---

    def training_step(self, model, inputs, num_items_in_batch):
        with self.step_timer.span("training_step"):
            return super().training_step(model, inputs, num_items_in_batch)

    def _prepare_inputs(self, generation_batch):
        with self.step_timer.span("prepare"):
            return super()._prepare_inputs(generation_batch)

    def _generate_single_turn(self, *args, **kwargs):
        from contextlib import nullcontext

        from ..generation import cpu_sampling_speedups

        fast = self.fast_cpu_generation and not self.use_vllm
        # under CPU bf16 autocast (model.cpu_autocast), sampling computes in bf16 weights as well
        speedups = cpu_sampling_speedups(self.model, bf16_weights=self.args.bf16) if fast else nullcontext()
        with self.step_timer.span("generation"), speedups:
            return super()._generate_single_turn(*args, **kwargs)

    def _calculate_rewards(self, *args, **kwargs):
        with self.step_timer.span("rewards"):
            return super()._calculate_rewards(*args, **kwargs)

    def _get_train_sampler(self, dataset=None):
        from .difficulty import DifficultySampler
        from .filtering import SkipRetiredSampler

        sampler = super()._get_train_sampler(dataset)
        if self.remedies.prompt_sampling == "difficulty":
            return DifficultySampler(sampler, self.prompt_stats, seed=self.args.seed)
        if self.zero_std_filter is None:
            return sampler
        return SkipRetiredSampler(sampler, self.zero_std_filter.retired)

    def _generate_and_score_completions(self, inputs):
        if self.remedies.hints and self.model.training:  # an eval batch measures the prompts as they are
            from .hints import with_hints

            inputs, hinted = with_hints(inputs, self.prompt_stats, self.num_generations)
            self._metrics["train"]["hints/prompts_hinted"].append(float(hinted))
        output = super()._generate_and_score_completions(inputs)
        if self.remedies.resample_all_fail:
            from .resample import resample_all_fail

            output = resample_all_fail(self, inputs, output, super()._generate_and_score_completions)
        return output

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        import torch

        if not torch.is_grad_enabled() and self.step_timer.depth["prepare"]:  # old/ref log-probs of a new batch
            with self.step_timer.span("logprobs"):
                return super()._get_per_token_logps_and_entropies(*args, **kwargs)
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self.mirror_beta and torch.is_grad_enabled():  # the policy forward inside _compute_loss
            self._policy_logps = out[0]
        return out

    def _compute_loss(self, model, inputs):
        self._policy_logps = None
        loss = super()._compute_loss(model, inputs)
        logps = self._policy_logps
        if not self.mirror_beta or logps is None:  # no mirror term, or evaluation (no grad)
            return loss
        # With num_iterations 1 TRL leaves old_per_token_logps None: the policy has not moved since generation.
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        per_token_kl = kl_maths.mirror_kl(logps, old)
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        loss = loss + self.mirror_beta * kl_maths.aggregate(self, per_token_kl, mask, inputs)
        mode = "train" if self.model.training else "eval"
        mean_kl = (per_token_kl.detach() * mask).sum() / mask.sum().clamp(min=1.0)
        self._metrics[mode]["kl_mirror"].append(self.accelerator.gather(mean_kl).mean().item())
        return loss

    def set_reward_weights(self, weights: list[float]) -> None:
        """Weights of the reward functions from the next scored batch on (TRL reads `reward_weights`)."""
        import torch

        self.reward_weights = torch.tensor(weights, dtype=torch.float32)


# --- the CPU log-prob path ------------------------------------------------------------------

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


def install_cpu_logprob() -> bool:
    """Swap TRL 1.15's Triton log-prob kernel for TorchChunkedLogProb (idempotent; True when installed now).

    TRL 1.15 always gives the policy a fused LM head whose per-token log-prob function
    (`trl.trainer.utils._ChunkedLogProbFunction`) is a Triton kernel; with a torch that ships Triton
    it is used on CPU too and fails at the first loss with "0 active drivers". TRL 1.16 has a torch
    path, but unsloth 2026.10.9 caps trl at 1.15.
    """
    import trl.trainer.utils as trl_utils

    if getattr(trl_utils, "_ChunkedLogProbFunction", None) is TorchChunkedLogProb:
        return False
    trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return True


# --- TRL's GRPOConfig ------------------------------------------------------------------------

# grpo.<name> fields passed to GRPOConfig under the same name
SAME_NAME_FIELDS = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "max_completion_length",
    "temperature", "top_p", "learning_rate", "lr_scheduler_type", "warmup_steps", "max_grad_norm", "loss_type",
    "scale_rewards", "num_iterations", "epsilon", "max_steps", "logging_steps", "save_steps", "save_total_limit",
    "optim", "seed", "use_vllm",
)
# GRPOConfig fields that come from our own config (set them by their grpo.* names, not in grpo.trl).
MODELED_FIELDS = {
    *SAME_NAME_FIELDS, "beta", "gradient_checkpointing", "data_seed", "reward_weights", "vllm_mode",
    "vllm_server_host", "vllm_server_port", "vllm_gpu_memory_utilization", "output_dir", "use_cpu", "bf16", "fp16",
    "disable_tqdm",
}


def grpo_args(config: Config, output_dir: str, on_cuda: bool, backend: str):
    """TRL's GRPOConfig for our config, with `grpo.trl` passed through; a bad field is a UserError.

    Import unsloth before calling this on the unsloth backend (it patches GRPOConfig).
    """
    from trl import GRPOConfig

    from ..backends import explicit_trl_fields
    from ..output import stdout_to_stderr

    # explicit_trl_fields: the defaults Unsloth's GRPOConfig would change, so both backends train alike
    kwargs = {**trl_defaults(), **explicit_trl_fields(config), **modeled_kwargs(config, output_dir, on_cuda, backend)}
    for key, value in (config.grpo.trl or {}).items():
        check_trl_field(key, GRPOConfig)
        kwargs[key] = value
    lengths = set(kwargs.get("generation_kwargs") or {}) & {"max_new_tokens", "max_length"}
    if lengths:  # prompt budget + max_completion_length = model.max_seq_length holds only if TRL generates that many
        raise UserError(f"grpo.trl.generation_kwargs: {sorted(lengths)[0]} is set by local-grpo; "
                        "use grpo.max_completion_length (and model.max_seq_length)")
    try:
        with stdout_to_stderr():  # Unsloth's GRPOConfig prints its notices
            return GRPOConfig(**kwargs)
    except (TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"grpo.trl: TRL's GRPOConfig refused these settings: {first[:300]}") from None


def trl_defaults() -> dict:
    """Where we differ from TRL's defaults; `grpo.trl` may override any of these."""
    return {"save_strategy": "steps", "report_to": "none", "log_completions": False}


def check_trl_field(key: str, config_class) -> None:
    """`grpo.trl.<key>` must be a GRPOConfig field that our own config does not model."""
    import dataclasses
    import difflib

    if key in MODELED_FIELDS:
        hint = f"set it as grpo.{key}" if key != "data_seed" else "it follows grpo.seed"
        raise UserError(f"grpo.trl.{key}: local-grpo sets this field itself; {hint}")
    names = sorted(f.name for f in dataclasses.fields(config_class) if f.init)
    if key not in names:
        close = difflib.get_close_matches(key, names, n=3)
        raise UserError(f"grpo.trl.{key}: not a field of TRL's GRPOConfig"
                        + (f" (did you mean {', '.join(close)}?)" if close else ""))


def modeled_kwargs(config: Config, output_dir: str, on_cuda: bool, backend: str) -> dict:
    """The GRPOConfig fields our config models (CPU: use_cpu; bf16 = accelerate's CPU autocast when chosen)."""
    from ..backends import compute_dtype, cpu_autocast_dtype

    g = config.grpo
    dtype = str(compute_dtype(config, on_cuda)).rsplit(".", 1)[-1]
    kwargs = {name: getattr(g, name) for name in SAME_NAME_FIELDS}
    kwargs.update(
        output_dir=output_dir,
        use_cpu=not on_cuda,
        bf16=(on_cuda and dtype == "bfloat16") or cpu_autocast_dtype(config, on_cuda) == "bfloat16",
        fp16=on_cuda and dtype == "float16",
        beta=g.beta if config.kl_mode in ("ref", "both") else 0.0,
        # Unsloth applies its own checkpointing in get_peft_model.
        gradient_checkpointing=g.gradient_checkpointing and backend == "hf",
        data_seed=g.seed,
        reward_weights=[s.weight for s in config.rewards],
        disable_tqdm=True,  # our own progress bar (RunDirCallback)
    )
    if g.use_vllm:
        kwargs["vllm_mode"] = g.vllm_mode
        if g.vllm_mode == "server":  # a `trl vllm-serve` started separately (docs/scaling.md)
            kwargs["vllm_server_host"] = g.vllm_server_host
            kwargs["vllm_server_port"] = g.vllm_server_port
    return kwargs
