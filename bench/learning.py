"""Learning benchmark: does training make the tiny student better at shell tasks it never saw?

For each seed, a fresh tiny student (initial weights from that seed) is trained from scratch on
the shell **train** split and scored on the **held-out** split (no (family, operator, module)
triple in common with train) before and after. The trained student is the contender, the same
student untrained the baseline, measured in the same run on the same tasks with the same
evaluation seeds.

The training loop is the campaign's, in one process and without NATS, so it runs in minutes:
each epoch draws ``tasks_per_epoch`` train tasks, runs a GRPO group of ``group_size`` episodes of
each at temperature 1 in the real sandbox (``ShellEpisode``), has the oracle teacher
(``services.teacher_oracle.logic.judge``, the stack's default teacher) judge every episode for
hints, and makes one update with the trainer service's configuration for the campaign's trainer
settings (``services.trainer.logic.update_config``: GRPO, clip 0.2/0.28, distillation toward
hints, KL to the weights before the update). Rewards are the environment's (no teacher shaping,
no comparison gate: what is measured is the learning signal itself).

Evaluation: one near-greedy episode (temperature 0.1, seeded) per held-out task. Reported per
seed and pooled: success rate with a Wilson 95 % interval, mean reward, and the pooled paired
difference after - before with a bootstrap 95 % interval over (seed, task) pairs: the student
learned beyond noise when that interval is above 0.

Run from the repo root:

    .venv/bin/python bench/learning.py            # ~10 min; results in bench/results/learning.md
    .venv/bin/python bench/learning.py --quick    # ~2 min smoke run (one seed, few epochs)
"""

from __future__ import annotations

import random
import statistics
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import _common
import msgspec
import torch
from rich.console import Console
from rich.table import Table

from aios_rl.cli.evaluation import wilson
from aios_rl.envs.shell.episode import EpisodeResult, ShellEpisode
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.sandbox import Executor, policy_executor
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.student import load_student, new_student
from aios_rl.student.base import Decision, Regime, StudentBackend
from aios_rl.student.train import build_batch, update
from contracts import (
    Episode,
    ShellTask,
    StepDigest,
    TeacherRequest,
    TrainerSettings,
    TrajectoryStep,
)
from services.teacher_oracle.logic import judge
from services.trainer.logic import update_config


@dataclass(frozen=True)
class Settings:
    seeds: tuple[int, ...]
    epochs: int
    tasks_per_epoch: int
    group_size: int
    train_tasks: int
    heldout_tasks: int
    learning_rate: float
    workers: int = 2


FULL = Settings(
    seeds=(0, 1, 2),
    epochs=15,
    tasks_per_epoch=8,
    group_size=4,
    train_tasks=100,
    heldout_tasks=50,
    learning_rate=3e-3,
)
QUICK = Settings(
    seeds=(0,),
    epochs=8,
    tasks_per_epoch=8,
    group_size=4,
    train_tasks=60,
    heldout_tasks=30,
    learning_rate=3e-3,
)


class Actor:
    """Runs episodes of one student in the sandbox, ``workers`` at a time (the student is
    shared: its calls are serialised; the sandboxed commands run in parallel)."""

    def __init__(self, model: StudentBackend, executor: Executor, workers: int) -> None:
        self.model = model
        self.executor = executor
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(workers)

    def episode(
        self, task: ShellTask, *, seed: int, temperature: float, group: str
    ) -> tuple[Episode, EpisodeResult]:
        steps: list[TrajectoryStep] = []
        with ShellEpisode(task, self.executor, seed=seed) as env:
            while not env.done:
                obs, cands = env.observation, env.candidates
                decision = Decision(obs, tuple(cands), seed=seed * 1_000_003 + len(steps))
                with self.lock:
                    out = self.model.act([decision], Regime(temperature))[0]
                steps.append(
                    TrajectoryStep(
                        index=len(steps),
                        observation=obs,
                        candidates=cands,
                        action=out.action,
                        action_index=out.action_index,
                        logprob=out.logprob,
                        entropy=out.entropy,
                        value=out.value,
                    )
                )
                env.step(out.action)
            assert env.result is not None
            result = env.result
        ep = Episode(
            episode_id=f"{group}-{seed}",
            environment="shell",
            task_id=task.task_id,
            group_id=group,
            seed=seed,
            trajectory=steps,
            outcome=result.outcome,
            env_reward=result.reward,
        )
        return ep, result

    def many(
        self, jobs: list[tuple[ShellTask, int, str]], temperature: float
    ) -> list[tuple[Episode, EpisodeResult]]:
        return list(
            self.pool.map(
                lambda j: self.episode(j[0], seed=j[1], temperature=temperature, group=j[2]), jobs
            )
        )


def taught(ep: Episode, task: ShellTask) -> Episode:
    """``ep`` with the oracle teacher's signal (hints), as the teacher gateway would add it."""
    req = TeacherRequest(
        request_id=ep.episode_id,
        episode_id=ep.episode_id,
        environment="shell",
        task_id=task.task_id,
        task_statement=task.statement,
        steps=[
            StepDigest(
                index=s.index, observation=s.observation, action=s.action, candidates=s.candidates
            )
            for s in ep.trajectory
        ],
        outcome=ep.outcome,
    )
    signal = judge(req, task)
    return msgspec.structs.replace(ep, teacher_signal=signal)


def score(actor: Actor, tasks: list[ShellTask], tag: str) -> list[float]:
    """Near-greedy success (1/0) and reward per held-out task, seeded by task position."""
    results = actor.many([(t, 7_000 + i, f"{tag}{i}") for i, t in enumerate(tasks)], 0.1)
    return [1.0 if r.outcome == "success" else 0.0 for _, r in results] + [
        r.reward for _, r in results
    ]


def train_one(
    seed: int,
    s: Settings,
    train: list[ShellTask],
    heldout: list[ShellTask],
    executor: Executor,
    log: Callable[[str], None],
) -> dict:
    torch.manual_seed(seed)
    model = new_student("tiny", seed=seed)
    actor = Actor(model, executor, s.workers)
    n = len(heldout)
    before = score(actor, heldout, "before")
    log(f"seed {seed}: untrained held-out success {sum(before[:n]) / n:.0%}")
    config = update_config(TrainerSettings(learning_rate=s.learning_rate, seed=seed))
    rng = random.Random(f"learning:{seed}")
    by_id = {t.task_id: t for t in train}
    curve = []
    for epoch in range(s.epochs):
        picks = rng.sample(train, min(s.tasks_per_epoch, len(train)))
        jobs = [
            (t, 10_000 * epoch + i * s.group_size + k, f"s{seed}e{epoch}t{i}")
            for i, t in enumerate(picks)
            for k in range(s.group_size)
        ]
        episodes = [taught(ep, by_id[ep.task_id]) for ep, _ in actor.many(jobs, 1.0)]
        rate = sum(ep.outcome == "success" for ep in episodes) / len(episodes)
        with actor.lock:
            reference = load_student(model.to_bytes())  # the weights before the update
            update(model, reference, build_batch(episodes, config=config), config)
        curve.append(rate)
        log(f"seed {seed} epoch {epoch}: train rollouts succeeded {rate:.0%}")
    after = score(actor, heldout, "after")
    log(f"seed {seed}: trained held-out success {sum(after[:n]) / n:.0%}")
    return {
        "before": before[:n],
        "after": after[:n],
        "reward_before": before[n:],
        "reward_after": after[n:],
        "train_curve": curve,
    }


async def measure(s: Settings, log: Callable[[str], None]) -> dict:
    torch.set_num_threads(1)
    executor = policy_executor()
    cache = RunCache(default_cache_dir())
    log(f"generating {s.train_tasks} train and {s.heldout_tasks} held-out tasks (cached)")
    train = generate(s.train_tasks, 0, "train", cache=cache)
    heldout = generate(s.heldout_tasks, 0, "heldout", cache=cache)
    return {str(seed): train_one(seed, s, train, heldout, executor, log) for seed in s.seeds}


def paired_difference(
    pairs: list[tuple[float, float]], resamples: int = 4000
) -> tuple[float, float, float]:
    """Mean of after - before with a 95 % bootstrap interval over the pairs (seeded)."""
    rng = random.Random(0)
    diffs = [a - b for b, a in pairs]
    boots = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    return statistics.fmean(diffs), boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("learning", __doc__, "~2 min", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(lambda log: measure(s, log), ["torch"], console)
    table = Table(title="held-out success (95% Wilson intervals) and mean reward")
    for col in ("seed", "untrained", "trained", "reward before", "reward after", "train curve"):
        table.add_column(col, justify="right")
    rows: list[_common.Row] = []
    pairs: list[tuple[float, float]] = []
    for seed, r in res.items():
        n = len(r["before"])
        b, a = wilson(int(sum(r["before"])), n), wilson(int(sum(r["after"])), n)
        pairs += list(zip(r["before"], r["after"], strict=True))
        table.add_row(
            seed,
            b.pct(),
            a.pct(),
            f"{statistics.fmean(r['reward_before']):.3f}",
            f"{statistics.fmean(r['reward_after']):.3f}",
            " ".join(f"{x:.0%}" for x in r["train_curve"]),
        )
        rows.append(
            _common.Row(
                f"held-out success, seed {seed}",
                "rate",
                a.value,
                b.value,
                samples={"ours": r["after"], "baseline": r["before"]},
            )
        )
    total = len(pairs)
    pooled_b = wilson(int(sum(b for b, _ in pairs)), total)
    pooled_a = wilson(int(sum(a for _, a in pairs)), total)
    diff, low, high = paired_difference(pairs)
    table.add_row("pooled", pooled_b.pct(), pooled_a.pct(), "", "", "")
    rows.append(
        _common.Row("held-out success, pooled over seeds", "rate", pooled_a.value, pooled_b.value)
    )
    console.print(table)
    _common.print_rows("learning: trained vs untrained", rows, "trained", "untrained", console)
    verdict = "beyond noise" if low > 0 else "NOT beyond noise"
    console.print(
        f"paired difference trained - untrained: {diff:+.3f} [{low:+.3f}, {high:+.3f}] ({verdict})"
    )
    notes = [
        f"Pooled held-out success over {len(res)} seed(s) x {total // max(1, len(res))} tasks: untrained "
        f"{pooled_b.pct()}, trained {pooled_a.pct()} (Wilson 95 %).",
        f"Paired difference trained - untrained over (seed, task): {diff:+.3f}, bootstrap 95 % interval "
        f"[{low:+.3f}, {high:+.3f}]: {verdict}.",
        *(
            f"Seed {seed}: untrained {wilson(int(sum(r['before'])), len(r['before'])).pct()}, trained "
            f"{wilson(int(sum(r['after'])), len(r['after'])).pct()}; rollout success per epoch "
            + " ".join(f"{x:.0%}" for x in r["train_curve"])
            for seed, r in res.items()
        ),
        "Ratios: trained / untrained success rate (inf when the untrained student solved none).",
        "Training: the campaign's loop in one process (no NATS, no comparison gate, no teacher reward "
        "shaping): GRPO groups at temperature 1, oracle teacher hints distilled, one update per epoch "
        "with the trainer service's configuration. Evaluation: one near-greedy (T=0.1) episode per "
        "held-out task, seeded; the same seeds before and after.",
    ]
    _common.report(
        console,
        out,
        title="Learning benchmark: the tiny student on held-out shell tasks, before and after training",
        rows=rows,
        ours="trained",
        baseline="untrained",
        machine=machine,
        settings={**asdict(s), "seeds": list(s.seeds)},
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0 if low > 0 or len(res) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
