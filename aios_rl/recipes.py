"""What each environment's episodes learn from reward by: the measured defaults every campaign
starts from (the CLI's ``--env-recipe`` overrides them; the benchmarks train by them too)."""

from __future__ import annotations

from collections.abc import Mapping

from contracts import EnvironmentRecipe

__all__ = ["DEFAULT_ENV_RECIPES", "ENV_RECIPES", "env_recipes"]

ENV_RECIPES = ("grpo", "recipe")
"""What an environment's episodes learn from reward by (``--env-recipe``): ``grpo``, GRPO
alone (no self-imitation, no step progress); ``recipe``, the campaign's settings
(``--self-imitation``, ``--progress-coef``: by default GRPO with both)."""
DEFAULT_ENV_RECIPES = {"browser": "grpo"}
"""Measured (bench/results/learning_rl.md): on MiniWoB++ GRPO alone beats the recipe (paired
+0.135 [+0.062, +0.219] held-out success), on shell and orchestrator the recipe beats GRPO."""


def env_recipes(given: Mapping[str, str] | None = None) -> dict[str, EnvironmentRecipe]:
    """The trainer's per-environment recipes (``TrainerSettings.by_environment``): the
    measured defaults, then ``given`` (environment -> a name in ``ENV_RECIPES``). Raises
    ``ValueError`` for another name."""
    names = {**DEFAULT_ENV_RECIPES, **dict(given or {})}
    bad = sorted(f"{env}={name}" for env, name in names.items() if name not in ENV_RECIPES)
    if bad:
        raise ValueError(f"not a recipe: {', '.join(bad)} (use {' or '.join(ENV_RECIPES)})")
    return {
        env: EnvironmentRecipe(self_imitation=False, progress_coef=0.0)
        for env, name in sorted(names.items())
        if name == "grpo"
    }
