"""KL variants on the tiny model: each one changes TRL's loss as intended (grpo.kl none|ref|mirror|both)."""

import pytest
import torch

from local_grpo.train import kl, trainer
from local_grpo.config import Config, validate
from local_grpo.tasks import fill_defaults


def _config(kl, beta=0.5, alpha=0.5):
    config = Config()
    config.grpo.kl, config.grpo.beta, config.grpo.kl_alpha = kl, beta, alpha
    return config


class FakeGRPOTrainer:
    pass


def test_every_variant_runs_through_one_trainer_class_in_front_of_the_backends():
    cls = trainer.trainer_class(FakeGRPOTrainer)
    assert cls.__mro__[1:3] == (trainer.LocalGRPOHooks, FakeGRPOTrainer)


def test_mirror_kl_is_zero_at_the_same_policy_and_positive_after_a_move():
    logps = torch.tensor([[-1.0, -2.0, -0.5]])
    assert torch.allclose(kl.mirror_kl(logps, logps), torch.zeros_like(logps))
    assert (kl.mirror_kl(logps + 0.3, logps) > 0).all()


def _trainer(config, tmp_path):
    """A real TRL trainer (the config's variant) on the tiny model, with a graded reward."""
    import rewards
    from datasets import Dataset

    from local_grpo import backends, data
    from local_grpo.config import RewardSpec
    from local_grpo.rundir import RunDir

    graded = {"min": 1000, "max": 2000, "unit": "chars"}  # length_target: never zero-std on random text
    config.rewards = [RewardSpec("length_target", 1.0, graded)]
    config = validate(fill_defaults(config))
    loaded = backends.load(config)
    train_rows, _ = data.load_examples(config)
    run = RunDir.create(str(tmp_path / "kl-run"))
    args = trainer.grpo_args(config, run.checkpoints_dir, on_cuda=False, backend="hf")
    grpo_trainer = trainer.trainer_class(loaded.trainer_class)(
        model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=[rewards.get("length_target", **graded)],
        args=args, train_dataset=Dataset.from_list(train_rows), config=config)
    grpo_trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call compute_loss directly
    return grpo_trainer, args


def _loss(grpo_trainer, inputs, ref_beta, mirror_beta):
    grpo_trainer.beta, grpo_trainer.mirror_beta = ref_beta, mirror_beta
    return grpo_trainer.compute_loss(grpo_trainer.model, inputs).item()


def test_each_variant_changes_the_loss_as_intended(tiny_config, tmp_path):
    tiny_config.grpo.kl, tiny_config.grpo.beta, tiny_config.grpo.kl_alpha = "both", 0.5, 0.25
    tiny_config.grpo.num_iterations = 2  # a generated batch is reused: TRL scores old_per_token_logps
    grpo_trainer, args = _trainer(tiny_config, tmp_path)
    assert args.beta == 0.5 and grpo_trainer.beta == pytest.approx(0.125)  # both: TRL's ref term carries α·β
    assert grpo_trainer.mirror_beta == pytest.approx(0.375)  # ... and ours (1 − α)·β

    grpo_trainer.model.train()
    inputs = grpo_trainer._prepare_inputs(next(iter(grpo_trainer.get_train_dataloader())))
    assert "old_per_token_logps" in inputs and "ref_per_token_logps" in inputs

    # first inner iteration: the policy is the one that generated the batch (and still the reference)
    base = _loss(grpo_trainer, inputs, 0.0, 0.0)
    assert _loss(grpo_trainer, inputs, 0.0, 1.0) == pytest.approx(base, abs=1e-6)
    assert grpo_trainer._metrics["train"]["kl_mirror"][-1] == pytest.approx(0.0, abs=1e-6)
    assert _loss(grpo_trainer, inputs, 1.0, 0.0) == pytest.approx(base, abs=1e-6)

    # an update moves the policy away from both
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in grpo_trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    moved = _loss(grpo_trainer, inputs, 0.0, 0.0)  # kl none: TRL's policy loss only
    with_ref = _loss(grpo_trainer, inputs, 1.0, 0.0)  # kl ref
    with_mirror = _loss(grpo_trainer, inputs, 0.0, 1.0)  # kl mirror
    assert with_ref > moved + 1e-6
    assert with_mirror > moved + 1e-6
    assert grpo_trainer._metrics["train"]["kl_mirror"][-1] > 0
    both = _loss(grpo_trainer, inputs, 0.125, 0.375)
    assert both == pytest.approx(moved + 0.125 * (with_ref - moved) + 0.375 * (with_mirror - moved), rel=1e-4, abs=1e-6)


def test_one_inner_iteration_uses_the_generation_policy(tiny_config, tmp_path):
    tiny_config.grpo.kl, tiny_config.grpo.beta = "mirror", 1.0
    grpo_trainer, args = _trainer(tiny_config, tmp_path)
    assert args.beta == 0.0 and grpo_trainer.beta == 0.0  # no reference model for mirror
    grpo_trainer.model.train()
    inputs = grpo_trainer._prepare_inputs(next(iter(grpo_trainer.get_train_dataloader())))
    assert "old_per_token_logps" not in inputs  # TRL: the policy has not moved since generation
    assert _loss(grpo_trainer, inputs, 0.0, 1.0) == pytest.approx(_loss(grpo_trainer, inputs, 0.0, 0.0), abs=1e-7)
