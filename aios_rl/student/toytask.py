"""A small pure contextual-decision task: the learning proof and the trainer benchmark use it.

An observation names a colour; four buttons are offered in random order; one button is right for
each colour by a hidden rule. Chance is 25 %. Episodes are one step long and carry the real
``contracts.Episode`` shape, so they pass through the same trainer code as any environment's.
"""

from __future__ import annotations

import random

from contracts import Episode, TrajectoryStep

from .base import Decision, Regime, StudentBackend

__all__ = ["ToyTask"]

COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "black", "white")
BUTTONS = ("press alpha", "press bravo", "press charlie", "press delta")


class ToyTask:
    """Contexts, rollouts in GRPO groups, and success measurement (deterministic per seed)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.rule = {c: BUTTONS[i % len(BUTTONS)] for i, c in enumerate(COLOURS)}
        self._seed = seed * 1_000_003

    def context(self) -> tuple[str, Decision]:
        colour = self.rng.choice(COLOURS)
        buttons = list(BUTTONS)
        self.rng.shuffle(buttons)
        self._seed += 1
        return colour, Decision(f"the light shows {colour}", tuple(buttons), seed=self._seed)

    def rollouts(
        self, model: StudentBackend, *, groups: int, group_size: int, tag: str = ""
    ) -> list[Episode]:
        """``groups`` contexts, each acted on ``group_size`` times, as rewarded episodes."""
        episodes: list[Episode] = []
        for g in range(groups):
            colour, base = self.context()
            decisions = []
            for _ in range(group_size):
                self._seed += 1
                decisions.append(Decision(base.observation, base.candidates, seed=self._seed))
            for k, out in enumerate(model.act(decisions, Regime())):
                reward = 1.0 if out.action == self.rule[colour] else 0.0
                step = TrajectoryStep(
                    index=0,
                    observation=base.observation,
                    candidates=list(base.candidates),
                    action=out.action,
                    action_index=out.action_index,
                    logprob=out.logprob,
                    entropy=out.entropy,
                    value=out.value,
                )
                episodes.append(
                    Episode(
                        episode_id=f"toy{tag}-{g}-{k}-{self._seed}",
                        environment="orchestrator",
                        task_id=colour,
                        group_id=f"toy{tag}-{g}-{self._seed}",
                        trajectory=[step],
                        outcome="success" if reward else "failure",
                        env_reward=reward,
                        reward=reward,
                    )
                )
        return episodes

    def success_rate(self, model: StudentBackend, n: int = 200) -> float:
        """Share of ``n`` fresh contexts where a sampled action (temperature 1) is right."""
        pairs = [self.context() for _ in range(n)]
        outs = model.act([d for _, d in pairs], Regime())
        return sum(o.action == self.rule[c] for (c, _), o in zip(pairs, outs, strict=True)) / n
