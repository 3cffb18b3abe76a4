"""A small pure contextual-decision task: the learning proof and the trainer benchmarks use it.

An observation names a colour; four buttons are offered in random order; one button is right for
each colour by a hidden rule. Chance is 25 %. Episodes are one step long and carry the real
``contracts.Episode`` shape, so they pass through the same trainer code as any environment's.
"""

from __future__ import annotations

import random
import zlib

from aios_rl.student.base import ActOutput, Decision, Regime, StudentBackend
from contracts import Episode, TrajectoryStep

__all__ = ["ToyTask", "one_step_episode"]

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
                episodes.append(
                    one_step_episode(
                        base,
                        out,
                        1.0 if out.action == self.rule[colour] else 0.0,
                        episode_id=f"toy{tag}-{g}-{k}-{self._seed}",
                        group_id=f"toy{tag}-{g}-{self._seed}",
                        task_id=colour,
                    )
                )
        return episodes

    def success_rate(self, model: StudentBackend, n: int = 200) -> float:
        """Share of ``n`` fresh contexts where a sampled action (temperature 1) is right."""
        pairs = [self.context() for _ in range(n)]
        outs = model.act([d for _, d in pairs], Regime())
        return sum(o.action == self.rule[c] for (c, _), o in zip(pairs, outs, strict=True)) / n


def one_step_episode(
    decision: Decision,
    out: ActOutput,
    reward: float,
    *,
    episode_id: str,
    group_id: str,
    task_id: str,
) -> Episode:
    """The one-step ``orchestrator`` episode of ``out``, acted on ``decision`` and given
    ``reward`` (a success when positive)."""
    step = TrajectoryStep(
        index=0,
        observation=decision.observation,
        candidates=list(decision.candidates),
        action=out.action,
        action_index=out.action_index,
        logprob=out.logprob,
        entropy=out.entropy,
        value=out.value,
    )
    return Episode(
        episode_id=episode_id,
        environment="orchestrator",
        task_id=task_id,
        group_id=group_id,
        trajectory=[step],
        outcome="success" if reward > 0 else "failure",
        env_reward=reward,
        reward=reward,
    )


def one_step_group(
    model: StudentBackend,
    decision: Decision,
    rewarded: str,
    *,
    tag: str,
    group_size: int,
    temperature: float,
) -> list[Episode]:
    """A GRPO group of one-step episodes on ``decision`` acted by ``model`` at ``temperature``
    (each member seeded by ``tag`` and its position); choosing ``rewarded`` earns 1."""
    decisions = [
        Decision(decision.observation, decision.candidates, seed=zlib.crc32(f"{tag}/{k}".encode()))
        for k in range(group_size)
    ]
    outs = model.act(decisions, Regime(temperature=temperature))
    return [
        one_step_episode(
            d,
            out,
            1.0 if out.action == rewarded else 0.0,
            episode_id=f"{tag}-{k}",
            group_id=tag,
            task_id="toy",
        )
        for k, (d, out) in enumerate(zip(decisions, outs, strict=True))
    ]
