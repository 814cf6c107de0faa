"""The TRL hooks of local_grpo/train/trainer.py against the installed TRL, and grpo.trl pass-through.

A TRL upgrade that renames or reorders a method we override fails here, loudly, before any training
silently runs without our KL variant, sampler or live weights.
"""

from __future__ import annotations

import inspect

import pytest

from local_grpo.config import Config, validate
from local_grpo.tasks import fill_defaults
from local_grpo.errors import UserError
from local_grpo.train import trainer


def test_installed_trl_is_the_version_the_hooks_were_checked_against():
    import trl

    assert trl.__version__ == trainer.TRL_VERSION_CHECKED, (
        f"trl {trl.__version__} is installed; local_grpo/train/trainer.py was checked against "
        f"{trainer.TRL_VERSION_CHECKED}: re-read the hooked methods, then update HOOKED_METHODS")


@pytest.mark.parametrize("name", sorted(trainer.HOOKED_METHODS))
def test_each_hooked_method_keeps_the_signature_we_rely_on(name):
    from trl import GRPOTrainer

    method = getattr(GRPOTrainer, name, None)
    assert method is not None, f"GRPOTrainer.{name} is gone"
    params = tuple(inspect.signature(method).parameters)
    expected = trainer.HOOKED_METHODS[name]
    assert params[:len(expected)] == expected, f"GRPOTrainer.{name}{params} changed"
    assert hasattr(trainer.LocalGRPOHooks, name)


def test_trl_uses_the_reward_weights_attribute_and_the_fused_logprob_global_we_replace():
    import trl.trainer.utils as trl_utils
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "self.reward_weights" in source
    assert "_ChunkedLogProbFunction.apply(" in inspect.getsource(trl_utils.add_fused_lm_head)


def _config(**trl):
    config = validate(fill_defaults(Config()))
    config.grpo.trl = trl
    return config


def test_grpo_trl_passes_any_grpo_config_field_through(tmp_path):
    args = trainer.grpo_args(_config(importance_sampling_level="sequence", epsilon_high=0.28,
                                     mask_truncated_completions=True), str(tmp_path), on_cuda=False, backend="hf")
    assert args.importance_sampling_level == "sequence" and args.epsilon_high == 0.28
    assert args.mask_truncated_completions is True
    assert args.report_to == [] or args.report_to == "none" or args.report_to == ["none"]


def test_grpo_trl_unknown_key_names_it_and_the_closest_fields(tmp_path):
    with pytest.raises(UserError, match=r"grpo.trl.epsilon_hi: not a field of TRL's GRPOConfig \(did you mean epsilon_high"):
        trainer.grpo_args(_config(epsilon_hi=0.28), str(tmp_path), on_cuda=False, backend="hf")


def test_grpo_trl_refuses_fields_our_config_models(tmp_path):
    with pytest.raises(UserError, match="grpo.trl.learning_rate: local-grpo sets this field itself; set it as grpo.learning_rate"):
        trainer.grpo_args(_config(learning_rate=1e-5), str(tmp_path), on_cuda=False, backend="hf")


def test_grpo_trl_bad_value_is_one_user_error(tmp_path):
    with pytest.raises(UserError, match="grpo.trl: TRL's GRPOConfig refused"):
        trainer.grpo_args(_config(auto_find_batch_size=True), str(tmp_path), on_cuda=False, backend="hf")
