"""Every shipped recipe in configs/ loads, validates, and names rewards that exist."""

import glob
import os

import pytest

import rewards
from local_grpo import config

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
