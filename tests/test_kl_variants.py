"""KL variants on the tiny model: each one changes TRL's loss as intended (grpo.kl none|ref|mirror|both)."""

import pytest
import torch

from local_grpo import kl_variants
from local_grpo.config import Config, fill_defaults, validate
from local_grpo.errors import UserError


def _config(kl, beta=0.5, alpha=0.5):
    config = Config()
    config.grpo.kl, config.grpo.beta, config.grpo.kl_alpha = kl, beta, alpha
    return config


class FakeGRPOTrainer:
    pass


def test_none_and_ref_keep_the_trainer_class_and_mirror_both_subclass_it():
    assert kl_variants.trainer_class(FakeGRPOTrainer, _config("none", beta=0.0)) is FakeGRPOTrainer
    assert kl_variants.trainer_class(FakeGRPOTrainer, _config("ref")) is FakeGRPOTrainer
    for kl in ("mirror", "both"):
        cls = kl_variants.trainer_class(FakeGRPOTrainer, _config(kl))
        assert issubclass(cls, FakeGRPOTrainer) and cls is not FakeGRPOTrainer


def test_unsloth_trainer_is_refused_for_mirror():
    unsloth_class = type("UnslothGRPOTrainer", (), {})
    with pytest.raises(UserError, match="grpo.kl: mirror needs the hf backend"):
        kl_variants.trainer_class(unsloth_class, _config("mirror"))


def test_mirror_kl_is_zero_at_the_same_policy_and_positive_after_a_move():
    logps = torch.tensor([[-1.0, -2.0, -0.5]])
    assert torch.allclose(kl_variants.mirror_kl(logps, logps), torch.zeros_like(logps))
    assert (kl_variants.mirror_kl(logps + 0.3, logps) > 0).all()


def _trainer(config, tmp_path):
    """A real TRL trainer (the config's variant) on the tiny model, with a graded reward."""
    import rewards
    from datasets import Dataset

    from local_grpo import backends, data, train
    from local_grpo.rundir import RunDir

    from local_grpo.config import RewardSpec

    graded = {"min": 1000, "max": 2000, "unit": "chars"}  # length_target: never zero-std on random text
    config.rewards = [RewardSpec("length_target", 1.0, graded)]
    config = validate(fill_defaults(config))
    loaded = backends.load(config)
    train_rows, _ = data.load_examples(config)
    run = RunDir.create(str(tmp_path / "kl-run"))
    cls = kl_variants.trainer_class(loaded.trainer_class, config)
    args = train.grpo_args(config, run, loaded)
    trainer = cls(model=loaded.model, processing_class=loaded.tokenizer, reward_funcs=[rewards.get("length_target", **graded)], args=args,
                  train_dataset=Dataset.from_list(train_rows))
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call compute_loss directly
    return trainer, args


def _loss(trainer, inputs, ref_beta, mirror_beta):
    trainer.beta, trainer.mirror_beta = ref_beta, mirror_beta
    return trainer.compute_loss(trainer.model, inputs).item()


def test_each_variant_changes_the_loss_as_intended(tiny_config, tmp_path):
    tiny_config.grpo.kl, tiny_config.grpo.beta, tiny_config.grpo.kl_alpha = "both", 0.5, 0.25
    tiny_config.grpo.num_iterations = 2  # a generated batch is reused: TRL scores old_per_token_logps
    trainer, args = _trainer(tiny_config, tmp_path)
    assert args.beta == 0.5 and trainer.beta == pytest.approx(0.125)  # both: TRL's ref term carries α·β
    assert trainer.mirror_beta == pytest.approx(0.375)  # ... and ours (1 − α)·β

    trainer.model.train()
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert "old_per_token_logps" in inputs and "ref_per_token_logps" in inputs

    # first inner iteration: the policy is the one that generated the batch (and still the reference)
    base = _loss(trainer, inputs, 0.0, 0.0)
    assert _loss(trainer, inputs, 0.0, 1.0) == pytest.approx(base, abs=1e-6)
    assert trainer._metrics["train"]["kl_mirror"][-1] == pytest.approx(0.0, abs=1e-6)
    assert _loss(trainer, inputs, 1.0, 0.0) == pytest.approx(base, abs=1e-6)

    # an update moves the policy away from both
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    moved = _loss(trainer, inputs, 0.0, 0.0)  # kl none: TRL's policy loss only
    with_ref = _loss(trainer, inputs, 1.0, 0.0)  # kl ref
    with_mirror = _loss(trainer, inputs, 0.0, 1.0)  # kl mirror
    assert with_ref > moved + 1e-6
    assert with_mirror > moved + 1e-6
    assert trainer._metrics["train"]["kl_mirror"][-1] > 0
    both = _loss(trainer, inputs, 0.125, 0.375)
    assert both == pytest.approx(moved + 0.125 * (with_ref - moved) + 0.375 * (with_mirror - moved), rel=1e-4, abs=1e-6)


def test_one_inner_iteration_uses_the_generation_policy(tiny_config, tmp_path):
    tiny_config.grpo.kl, tiny_config.grpo.beta = "mirror", 1.0
    trainer, args = _trainer(tiny_config, tmp_path)
    assert args.beta == 0.0 and trainer.beta == 0.0  # no reference model for mirror
    trainer.model.train()
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert "old_per_token_logps" not in inputs  # TRL: the policy has not moved since generation
    assert _loss(trainer, inputs, 0.0, 1.0) == pytest.approx(_loss(trainer, inputs, 0.0, 0.0), abs=1e-7)
