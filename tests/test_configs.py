"""Every shipped recipe in configs/ loads, validates, and names rewards that exist."""

import glob
import os

import pytest

import rewards
from local_grpo import config, tasks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))


def test_recipes_exist():
    names = {os.path.basename(p) for p in RECIPES}
    assert {"cpu-quickstart.yaml", "gsm8k-8gb.yaml", "gsm8k-16gb.yaml", "gsm8k-24gb.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_recipe_validates(path):
    recipe = config.load(path)
    config.validate(recipe)
    for spec in recipe.rewards:
        if ".py:" in spec.name:
            continue  # an example user file
        assert callable(rewards.get(spec.name, **spec.params))


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_recipe_builds_trls_grpo_config(path, tmp_path):
    """The dry run `train` does before loading: every recipe's fields (grpo.trl included) reach GRPOConfig."""
    from local_grpo.train import trainer

    recipe = config.validate(tasks.fill_defaults(config.load(path)))
    args = trainer.grpo_args(recipe, str(tmp_path), on_cuda=False, backend="hf")
    for key, value in recipe.grpo.trl.items():
        assert getattr(args, key) == value


def test_gspo_and_clip_higher_recipes_set_their_trl_fields():
    gspo = config.load(os.path.join(REPO, "configs", "gspo-cpu.yaml"))
    assert gspo.grpo.trl["importance_sampling_level"] == "sequence"
    clip_higher = config.load(os.path.join(REPO, "configs", "clip-higher-cpu.yaml"))
    assert clip_higher.grpo.trl["epsilon_high"] > clip_higher.grpo.epsilon


@pytest.mark.parametrize("path", [p for p in RECIPES if "my-dataset" not in p], ids=os.path.basename)
def test_recipe_data_loads_from_a_fresh_clone(path, monkeypatch):
    """Run from the repository root as the README does: every data path must resolve inside the repo."""
    from local_grpo.data import load_examples

    monkeypatch.chdir(REPO)
    recipe = config.load(path)
    for named in (recipe.data.dataset, recipe.data.task_options.get("path")):
        if named:
            assert os.path.realpath(named).startswith(os.path.realpath(REPO) + os.sep), named
    train, held = load_examples(recipe)
    assert len(train) == recipe.data.num_train and len(held) == recipe.data.num_heldout
