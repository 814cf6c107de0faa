"""Config: YAML round trip, presets, overrides and up-front validation with one-line errors."""

import pytest

from local_grpo import config as cfg
from local_grpo.errors import UserError
from local_grpo.presets import PRESETS, apply_preset


def test_yaml_round_trip(tmp_path):
    config = cfg.Config()
    config.grpo.num_generations = 4
    config.rewards = [cfg.RewardSpec("correct_numeric", 1.0), cfg.RewardSpec("format_soft", 0.2, {"marker": "Answer:"})]
    path = tmp_path / "c.yaml"
    cfg.save(config, str(path))
    again = cfg.load(str(path))
    assert cfg.to_dict(again) == cfg.to_dict(config)


def test_yaml_reads_scientific_learning_rate(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("grpo:\n  learning_rate: 2e-4\n")
    assert cfg.load(str(path)).grpo.learning_rate == pytest.approx(2e-4)


def test_preset_lies_under_file_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("preset: 8gb\ngrpo:\n  num_generations: 4\n  per_device_train_batch_size: 8\n")
    config = cfg.load(str(path))
    assert config.preset == "8gb"
    assert config.model.load_in_4bit is True  # from the preset
    assert config.grpo.num_generations == 4  # the file wins
    assert config.grpo.max_completion_length == PRESETS["8gb"]["grpo"]["max_completion_length"]


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_validates(name):
    config = cfg.from_dict(apply_preset(name, {}))
    cfg.validate(config)


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda c: setattr(c.grpo, "loss_type", "grpoo"), "grpo.loss_type"),
        (lambda c: setattr(c.grpo, "scale_rewards", "std"), "grpo.scale_rewards"),
        (lambda c: setattr(c.grpo, "num_generations", 1), "grpo.num_generations"),
        (lambda c: setattr(c.grpo, "per_device_train_batch_size", 10), "grpo.per_device_train_batch_size"),
        (lambda c: setattr(c.grpo, "temperature", 0), "grpo.temperature"),
        (lambda c: setattr(c.grpo, "beta", -1.0), "grpo.beta"),
        (lambda c: setattr(c.grpo, "kl", "sideways"), "grpo.kl"),
        (lambda c: setattr(c.grpo, "kl", "ref"), "grpo.beta"),
        (lambda c: setattr(c.grpo, "max_completion_length", 4096), "grpo.max_completion_length"),
        (lambda c: setattr(c.lora, "r", 0), "lora.r"),
        (lambda c: setattr(c.lora, "target_modules", []), "lora.target_modules"),
        (lambda c: setattr(c, "backend", "jax"), "backend"),
        (lambda c: setattr(c.model, "dtype", "int3"), "model.dtype"),
        (lambda c: setattr(c.grpo, "max_steps", "ten"), "grpo.max_steps"),
        (lambda c: setattr(c.grpo, "eval_steps", -1), "grpo.eval_steps"),
        (lambda c: (setattr(c.grpo, "eval_steps", 3), setattr(c.grpo, "logging_steps", 2)), "grpo.eval_steps"),
        (lambda c: (setattr(c.grpo, "eval_steps", 2), setattr(c.grpo, "eval_prompts", 0)), "grpo.eval_prompts"),
        (lambda c: setattr(c.grpo, "early_stop_evals", 3), "grpo.early_stop_evals"),  # needs grpo.eval_steps
        (lambda c: (setattr(c.grpo, "eval_steps", 2), setattr(c.grpo, "early_stop_evals", -1)), "grpo.early_stop_evals"),
    ],
)
def test_validation_names_the_field(change, field):
    config = cfg.Config()
    change(config)
    with pytest.raises(UserError) as err:
        cfg.validate(config)
    message = str(err.value)
    assert field in message and "\n" not in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("grpo:\n  num_generatons: 4\n", "grpo.num_generatons"),
        ("modle: {}\n", "unknown key 'modle'"),
        ("grpo: [1, 2]\n", "grpo: expected a mapping"),
        ("rewards: 3\n", "rewards must be a list"),
        ("grpo:\n  learning_rate: fast\n", "grpo.learning_rate"),
        ("schema_version: 0\n", "schema_version 0"),
        ("grpo: {num_generations: 4\n", "invalid YAML"),
        ("- a\n- b\n", "expected a mapping at the top level"),
    ],
)
def test_bad_yaml_names_file_and_key(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        cfg.load(str(path))
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_override_flags_cover_common_fields():
    flags = cfg.override_fields()
    for flag in ("num-generations", "max-completion-length", "learning-rate", "beta", "lora-r", "load-in-4bit",
                 "model", "task", "dataset", "max-steps", "loss-type", "scale-rewards", "temperature"):
        assert flag in flags
    config = cfg.apply_overrides(cfg.Config(), {"num-generations": 4, "lora-r": 8, "load-in-4bit": True})
    assert (config.grpo.num_generations, config.lora.r, config.model.load_in_4bit) == (4, 8, True)


def test_periodic_eval_is_off_by_default_and_a_flag():
    config = cfg.Config()
    assert (config.grpo.eval_steps, config.grpo.eval_prompts) == (0, 16)
    assert "eval-steps" in cfg.override_fields() and "eval-prompts" in cfg.override_fields()
    config.grpo.eval_steps, config.grpo.logging_steps = 4, 2
    assert cfg.validate(config).grpo.eval_steps == 4


def test_kl_mode_follows_beta():
    config = cfg.Config()
    assert config.kl_mode == "none"
    config.grpo.beta = 0.04
    assert config.kl_mode == "ref"


@pytest.mark.parametrize("command", [["train"], ["rewards", "check"]])
def test_a_task_flag_replaces_the_config_files_dataset_and_not_a_dataset_flag(tmp_path, command):
    from local_grpo.cli.common import config_from_args
    from local_grpo.cli.main import build_parser

    path = tmp_path / "gsm8k.yaml"
    path.write_text("data:\n  dataset: train.jsonl\n")
    parser = build_parser()
    config = config_from_args(parser.parse_args([*command, "--config", str(path), "--task", "countdown"]))
    assert (config.data.task, config.data.dataset, config.task_name) == ("countdown", None, "countdown")
    assert config_from_args(parser.parse_args([*command, "--config", str(path)])).data.dataset == "train.jsonl"
    with pytest.raises(UserError, match="^--task: give --task or --dataset, not both"):
        config_from_args(parser.parse_args([*command, "--task", "countdown", "--dataset", "x.jsonl"]))


def test_train_task_options_flag_and_a_new_task_drops_the_files_options(tmp_path):
    from local_grpo.cli.common import config_from_args
    from local_grpo.cli.main import build_parser

    path = tmp_path / "quick.yaml"
    path.write_text("data:\n  task: arithmetic\n  task_options: {digits: 2, operations: ['+']}\n")
    parser = build_parser()
    same = config_from_args(parser.parse_args(["train", "--config", str(path), "--task", "arithmetic"]))
    assert same.data.task_options == {"digits": 2, "operations": ["+"]}
    other = config_from_args(parser.parse_args(["train", "--config", str(path), "--task", "word_problems"]))
    assert (other.data.task, other.data.task_options) == ("word_problems", {})
    given = config_from_args(parser.parse_args(["train", "--config", str(path), "--task", "word_problems",
                                                "--task-options", '{"digits": 3}']))
    assert given.data.task_options == {"digits": 3}
    with pytest.raises(UserError, match="^--task-options: not valid JSON"):
        config_from_args(parser.parse_args(["train", "--config", str(path), "--task-options", "{digits"]))
