"""The in-process kernel: the product's own loop in one process, without NATS, for benchmarks,
tests and notebooks.

- :class:`LocalPolicy`: students called directly, answering ``ActRequest`` with the sampler's
  mapping (:mod:`aios_rl.student.serving`);
- :class:`Rollouts`: rollout jobs run by the runner's episode function
  (:func:`aios_rl.envs.runner.run_episode`) on the environments' real hosts;
- :func:`collect_epoch`: one epoch planned by the campaign's planner
  (:mod:`aios_rl.rollouts.epoch`), round by round, a :class:`LocalRail` controller for RAIL;
- :func:`train_epoch`: the trainer's update (:func:`aios_rl.student.train.train_step`), Adam's
  moments kept across updates in an :class:`OptimizerMemory` when the settings ask for it;
- :class:`Gate`: the campaign's comparison gate (reference runs of the weights before the
  update, the epoch verdict, ``decide_epoch``, rollback);
- :func:`train_epochs`: the campaign's loop, epoch after epoch (collect, gate, update), an
  :class:`EpochReport` each;
- :func:`eval_jobs`: near-greedy held-out jobs, seeded by task position;
- :func:`credit_by_kind`: what episodes did (steps, each kind of action's share and GRPO
  credit), as every update reports it.

The same task, seed and checkpoint give the same episode here and on the stack
(``tests/test_kernel.py``).
"""

from aios_rl.student.train import OptimizerMemory, credit_by_kind

from .kernel import (
    EVAL_REGIME,
    EpochReport,
    EpochRollouts,
    Gate,
    LocalRail,
    Rollouts,
    collect_epoch,
    eval_jobs,
    runner_settings,
    train_epoch,
    train_epochs,
)
from .policy import LocalPolicy, UnknownLocalCheckpointError

__all__ = [
    "EVAL_REGIME",
    "EpochReport",
    "EpochRollouts",
    "Gate",
    "LocalPolicy",
    "LocalRail",
    "OptimizerMemory",
    "Rollouts",
    "UnknownLocalCheckpointError",
    "collect_epoch",
    "credit_by_kind",
    "eval_jobs",
    "runner_settings",
    "train_epoch",
    "train_epochs",
]
