"""Phase D/E: for the same number of training episodes, does one student trained on all three
environments do better on their held-out tasks than students trained on one environment each?

Six students per seed, all from the same initial tiny-student weights of that seed:

``untrained``
    The initial weights, never updated (the reference every transfer is measured against).
``mixed``
    Every epoch draws train tasks of all three environments by the mix (``Settings.mix``: equal
    thirds, so 2 shell + 2 browser + 2 orchestrator tasks of the 6 an epoch in the full run).
``shell-only``, ``browser-only``, ``orchestrator-only``
    Every epoch draws all its train tasks from one environment.
``mixed-env-normalize``
    The mixed student with each environment's advantages scaled to unit RMS in every update
    (``TrainerSettings.env_normalize``, AgentRL's per-task normalisation): does weighing the three
    environments alike help the mixed student?

Every trained student runs the same number of epochs, tasks per epoch and episodes per task, so
the same number of training episodes and updates; only where the episodes come from differs.
Task draws are the campaign's (``sample_tasks``, seeded per (seed, epoch, environment)), so the
mixed student's shell tasks of an epoch are the first of the shell-only student's. The loop is
the in-process kernel's (``aios_rl.local``: ``collect_epoch`` as the campaign collects an epoch,
one ``train_epoch`` update per epoch learning from the environment's reward alone by each
environment's default of ``aios_rl.recipes`` (what ``aios-rl train`` uses, measured in
``bench/learning_rl.py``): shell and orchestrator episodes by the recipe, GRPO + self-imitation
of its own successes + step-level progress credit; browser episodes by GRPO alone; no teacher; the comparison gate ``Gate`` judging every epoch, as the campaign does), its
``Rollouts`` running a round's episodes of all environments concurrently on the three runners'
hosts: shell episodes in the sandbox, browser episodes in real Chromium with the sites service
on an embedded nats-server, orchestrator episodes through their adapter.

Evaluation: every student, trained or not, plays one near-greedy episode (temperature 0.1,
seeded by position) of every held-out task of all three environments: the same tasks and seeds
for every student, so every comparison is paired over (seed, task). Reported: held-out success
per environment (Wilson 95 %) and the mean of the three (bootstrap 95 %, resampled within each
environment), mean reward per environment; transfer (each trained student - untrained, per
environment: does shell training move browser held-out, and the reverse) and the mixed student -
each specialist, as paired differences with bootstrap 95 % intervals. Results:
``bench/results/phase_de.md`` / ``.json`` / ``.png``.

Run from the repo root:

    .venv/bin/python bench/phase_de.py           # ~50 min; results in bench/results/phase_de.md
    .venv/bin/python bench/phase_de.py --quick   # ~40 s smoke run (one seed, one epoch)
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from aios_rl.envs.browser import generate as browser_split
from aios_rl.envs.orchestrator import generate as orchestrator_split
from aios_rl.envs.orchestrator.adapter import OrchestratorHost
from aios_rl.envs.shell.adapter import ShellHost
from aios_rl.envs.shell.generate import generate as shell_split
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.local import (
    Gate,
    LocalPolicy,
    Rollouts,
    runner_settings,
    train_epochs,
)
from aios_rl.recipes import DEFAULT_ENV_RECIPES, env_recipes
from aios_rl.stats import Interval, bootstrap_mean, paired_difference, stratified_mean, wilson
from aios_rl.student import load_student, new_student
from bench import _common
from bench._kernel import RolloutsFor, Task, browser_host, score
from contracts import (
    BrowserTask,
    CampaignSpec,
    DecodingRegime,
    OrchestratorTask,
    ShellTask,
    TrainerSettings,
)

ENVS = ("shell", "browser", "orchestrator")
KINDS: dict[str, type[Task]] = {
    "shell": ShellTask,
    "browser": BrowserTask,
    "orchestrator": OrchestratorTask,
}
THIRDS = {"shell": 1 / 3, "browser": 1 / 3, "orchestrator": 1 / 3}


@dataclass(frozen=True)
class Settings:
    """What one run does (every trained student runs with the same settings)."""

    seeds: tuple[int, ...]
    """Initial weights, task draws and update order of each run (one run per student and seed)."""
    epochs: int
    """Updates per trained student."""
    tasks_per_epoch: int
    """Train tasks drawn an epoch, for every trained student (the mixed one splits them by mix)."""
    group_size: int
    """Episodes per drawn task (one GRPO group)."""
    train_tasks: Mapping[str, int]
    """Size of each environment's train split."""
    heldout_tasks: Mapping[str, int]
    """Size of each environment's held-out split (one scoring episode per task and student)."""
    learning_rate: float
    """Adam step size of every update (one value for every student and environment)."""
    mix: Mapping[str, float] = field(default_factory=lambda: dict(THIRDS))
    """The mixed student's share of each epoch's tasks per environment."""
    workers: int = 2
    """Browser and orchestrator episodes run at once (the environments run concurrently; shell
    episodes one at a time, see ``SHELL_WORKERS``)."""

    @property
    def episodes(self) -> int:
        """Training episodes of every trained student."""
        return self.epochs * self.tasks_per_epoch * self.group_size


FULL = Settings(
    seeds=(0, 1, 2),
    epochs=8,
    tasks_per_epoch=6,
    group_size=4,
    train_tasks={"shell": 100, "browser": 40, "orchestrator": 400},
    heldout_tasks={"shell": 40, "browser": 24, "orchestrator": 96},
    learning_rate=3e-3,
)
"""Sized for ~35 min on 2 shared cores without the gate (~50 min with its reference runs): browser episodes (~1-2 s each in Chromium) are most of the
cost, in training (the browser-only student and a third of the mixed one's) and in scoring
(5 students x 24 held-out browser tasks a seed). 192 training episodes per student is fewer than
bench/learning.py gives one environment (shell 480, browser 120, orchestrator 5120): this measures
what a small, equal budget does. The learning rate is the shell's and the browser's in
bench/learning.py (the orchestrator there used 1e-3 over 27x more episodes)."""
QUICK = Settings(
    seeds=(0,),
    epochs=1,
    tasks_per_epoch=3,
    group_size=2,
    train_tasks={"shell": 6, "browser": 4, "orchestrator": 8},
    heldout_tasks={"shell": 3, "browser": 2, "orchestrator": 6},
    learning_rate=3e-3,
)

ATTEMPTS = 3
"""Attempts an episode gets when its environment crashes (the kernel's ``Rollouts(attempts=)``)."""
SHELL_WORKERS = 1
"""Shell episodes run one at a time: building a ``ShellEpisode`` parses the task's files with
``ast.parse``, and with two shell worker threads while the event loop ran the other environments,
one raised ``SystemError: AST constructor recursion depth mismatch`` (CPython 3.11.7; the same
error is reported from other threaded programs, see cpython issue 106905). One worker keeps every
parse on one thread."""

STUDENTS: dict[str, Mapping[str, float] | None] = {
    "untrained": None,
    "mixed": {},  # Settings.mix
    "shell-only": {"shell": 1.0},
    "browser-only": {"browser": 1.0},
    "orchestrator-only": {"orchestrator": 1.0},
    "mixed-env-normalize": {},
}
"""Each student's share of an epoch's train tasks per environment (``None``: never trained;
empty: ``Settings.mix``)."""
OPTIONS: dict[str, dict[str, Any]] = {"mixed-env-normalize": {"env_normalize": True}}
"""Trainer settings a student adds to ``RECIPE``."""
SPECIALISTS = {
    "shell": "shell-only",
    "browser": "browser-only",
    "orchestrator": "orchestrator-only",
}


def allocate(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """``total`` tasks split by ``shares`` (largest remainder; ties in ``ENVS`` order), so the
    counts always add up to ``total``. Raises ``ValueError`` for shares that are not positive."""
    if not shares or any(v <= 0 for v in shares.values()):
        raise ValueError(f"shares must be positive, got {dict(shares)}.")
    weight = sum(shares.values())
    exact = {env: total * shares[env] / weight for env in ENVS if env in shares}
    counts = {env: int(x) for env, x in exact.items()}
    order = sorted(exact, key=lambda env: (counts[env] - exact[env], ENVS.index(env)))
    for env in order[: total - sum(counts.values())]:
        counts[env] += 1
    return counts


@dataclass
class Splits:
    """The train and held-out tasks of every environment, and what runs them."""

    train: dict[str, list[Task]]
    heldout: dict[str, list[Task]]
    rollouts_for: RolloutsFor
    """A student's rollouts on the three environments' hosts (the kernel's)."""
    retries: list[str]
    """Episodes run again after their environment crashed (``Rollouts(attempts=3)``)."""

    def heldout_all(self) -> list[Task]:
        """Every held-out task, environment by environment (``ENVS`` order)."""
        return [t for env in ENVS for t in self.heldout[env]]


async def evaluate(rollouts: Rollouts, splits: Splits, tag: str) -> dict[str, dict[str, list]]:
    """Held-out success (1/0) and reward per task, per environment: every held-out task scored
    at once (seeded by position in ``heldout_all``, the same for every student)."""
    success, reward = await score(rollouts, splits.heldout_all(), tag)
    out: dict[str, dict[str, list]] = {"success": {}, "reward": {}}
    start = 0
    for env in ENVS:
        k = len(splits.heldout[env])
        out["success"][env] = success[start : start + k]
        out["reward"][env] = reward[start : start + k]
        start += k
    return out


RECIPE = {"self_imitation": True, "progress_coef": 1.0, "by_environment": env_recipes()}
"""How every trained student learns: from the environment's reward alone, by the recipe
``bench/learning_rl.py`` measured (GRPO + self-imitation of its own successes + step-level
progress credit) except where an environment's measured default replaces it
(``aios_rl.recipes``: browser by GRPO alone), as ``aios-rl train`` does; no teacher judges,
nothing is distilled."""


def recipe_note() -> str:
    """The environments whose default replaces the recipe, in words."""
    grpo = sorted(env for env, name in DEFAULT_ENV_RECIPES.items() if name == "grpo")
    return f"{' and '.join(grpo)} by GRPO alone" if grpo else "every environment by the recipe"


REFERENCE_RUNS = 2
"""The comparison gate's reference runs of each task an epoch (the weights before the update)."""


def student_spec(name: str, shares: Mapping[str, float], seed: int, s: Settings) -> CampaignSpec:
    """The campaign a trained student's run is: ``tasks_per_epoch`` train tasks an epoch split
    by ``shares`` (the campaign's ``sample_tasks``, seeded by (seed, epoch)), uniform GRPO groups
    of ``group_size`` at temperature 1 learning by ``RECIPE``, ``REFERENCE_RUNS`` reference runs
    a task for the comparison gate."""
    return CampaignSpec(
        campaign_id=f"phase-de-{name}-s{seed}",
        environments=dict(shares),
        tasks_per_epoch=s.tasks_per_epoch,
        group_size=s.group_size,
        epochs=s.epochs,
        rollout_strategy="uniform",
        regime=DecodingRegime(temperature=1.0),
        trainer=TrainerSettings(
            learning_rate=s.learning_rate, seed=seed, **RECIPE, **OPTIONS.get(name, {})
        ),
        split="train",
        seed=seed,
        reference_runs=REFERENCE_RUNS,
    )


async def train_student(
    name: str,
    shares: Mapping[str, float],
    seed: int,
    weights: bytes,
    s: Settings,
    splits: Splits,
    log: Callable[[str], None],
) -> dict:
    """One student trained from ``weights`` through the kernel on ``s.epochs`` epochs of tasks
    drawn by ``shares`` (``collect_epoch``, ``train_epoch``: environment reward alone, by
    ``RECIPE``), the comparison gate judging every epoch (``Gate``: reference runs of the
    weights before the last update, the epoch verdict with its per-environment veto, a rollback
    skips the epoch's update), then scored on every held-out task: its scores, training
    episodes per environment, rollout success per epoch, the gate's decisions and seconds
    spent."""
    torch.manual_seed(seed)
    policy = LocalPolicy(load_student(weights))
    spec = student_spec(name, shares, seed, s)
    available = {env: [t.task_id for t in splits.train[env]] for env in shares}
    trained = dict.fromkeys(ENVS, 0)
    curve: list[float] = []
    gate = Gate(spec, policy)
    started = time.perf_counter()
    async with splits.rollouts_for(policy) as rollouts:
        reports = train_epochs(
            spec, policy, available, rollouts.run, s.epochs, gate=gate, seed=seed
        )
        async for r in reports:
            for ep in r.collected.kept:
                trained[ep.environment] += 1
            curve.append(r.success)
            if r.metrics is None:
                assert r.decision is not None
                verdict, decision = r.decision["verdict"], r.decision["decision"]
                log(f"seed {seed} {name} epoch {r.epoch}: {verdict}, {decision}")
                continue
            log(f"seed {seed} {name} epoch {r.epoch}: train rollouts succeeded {r.success:.0%}")
        train_s = time.perf_counter() - started
        scores = await evaluate(rollouts, splits, f"{name}-")
    return {
        **scores,
        "trained": trained,
        "train_curve": curve,
        "gate": gate.decisions,
        "train_s": train_s,
        "eval_s": time.perf_counter() - started - train_s,
    }


@contextlib.asynccontextmanager
async def environments(s: Settings, log: Callable[[str], None]) -> AsyncIterator[Splits]:
    """The splits of the three environments and their actors: the shell sandbox, Chromium with
    the sites service on an embedded nats-server (as ``learning.measure_browser``), the
    orchestrator's adapter."""
    cache = RunCache(default_cache_dir())
    train: dict[str, list[Task]] = {
        "shell": list(shell_split(s.train_tasks["shell"], 0, "train", cache=cache)),
        "browser": list(browser_split.generate(s.train_tasks["browser"], 0, "train")),
        "orchestrator": list(
            orchestrator_split(s.train_tasks["orchestrator"], seed=0, split="train")
        ),
    }
    heldout: dict[str, list[Task]] = {
        "shell": list(shell_split(s.heldout_tasks["shell"], 0, "heldout", cache=cache)),
        "browser": list(browser_split.generate(s.heldout_tasks["browser"], 0, "heldout")),
        "orchestrator": list(
            orchestrator_split(s.heldout_tasks["orchestrator"], seed=0, split="heldout")
        ),
    }
    log(
        "tasks (train / held-out): "
        + ", ".join(f"{env} {len(train[env])} / {len(heldout[env])}" for env in ENVS)
    )
    orchestrator = OrchestratorHost(runner_settings("orchestrator"))
    async with browser_host("aios-phase-de-") as browser:
        retries: list[str] = []
        hosts = {"shell": ShellHost(runner_settings("shell")), "browser": browser}
        hosts["orchestrator"] = orchestrator
        tasks = {t.task_id: t for split in (train, heldout) for ts in split.values() for t in ts}

        @contextlib.asynccontextmanager
        async def rollouts_for(policy: LocalPolicy) -> AsyncIterator[Rollouts]:
            rollouts = Rollouts(
                hosts,
                tasks,
                policy,
                workers={
                    "shell": SHELL_WORKERS,
                    "browser": s.workers,
                    "orchestrator": s.workers,
                },
                attempts=ATTEMPTS,
            )
            try:
                yield rollouts
            finally:
                retries.extend(rollouts.retries)

        try:
            yield Splits(train, heldout, rollouts_for, retries)
        finally:
            await hosts["shell"].aclose()


async def measure(s: Settings, log: Callable[[str], None]) -> dict:
    """Per seed, every student's held-out scores and training record; the held-out tasks."""
    torch.set_num_threads(1)
    out: dict = {"runs": {}}
    async with environments(s, log) as splits:
        out["heldout"] = {
            env: [
                {"task_id": t.task_id, "kind": getattr(t, "kind", env)} for t in splits.heldout[env]
            ]
            for env in ENVS
        }
        for seed in s.seeds:
            torch.manual_seed(seed)
            weights = new_student("tiny", seed=seed).to_bytes()
            run: dict = {}
            for name, shares in STUDENTS.items():
                if shares is None:
                    started = time.perf_counter()
                    async with splits.rollouts_for(LocalPolicy(load_student(weights))) as rollouts:
                        run[name] = await evaluate(rollouts, splits, "untrained-")
                    run[name]["eval_s"] = time.perf_counter() - started
                else:
                    run[name] = await train_student(
                        name, shares or s.mix, seed, weights, s, splits, log
                    )
                means = ", ".join(
                    f"{env} {statistics.fmean(run[name]['success'][env]):.0%}" for env in ENVS
                )
                log(f"seed {seed} {name}: held-out success {means}")
            out["runs"][str(seed)] = run
        out["browser_retries"] = splits.retries
    return out


# -- statistics ----------------------------------------------------------------------------------


def pooled(res: dict, student: str, metric: str, env: str) -> list[float]:
    """A student's held-out ``metric`` (success or reward) on ``env`` over every (seed, task)."""
    return [x for run in res["runs"].values() for x in run[student][metric][env]]


def difference(res: dict, base: str, other: str, metric: str) -> dict[str, Interval]:
    """``other - base`` on ``metric`` per environment (paired over (seed, task), bootstrap 95 %)
    and for the mean across environments (``"mean"``, resampled within each environment)."""
    out: dict[str, Interval] = {}
    diffs = []
    for env in ENVS:
        b, o = pooled(res, base, metric, env), pooled(res, other, metric, env)
        out[env] = paired_difference(b, o)
        diffs.append([y - x for x, y in zip(b, o, strict=True)])
    out["mean"] = stratified_mean(diffs)
    return out


def signed(i: Interval) -> str:
    return f"{i.value:+.3f} [{i.low:+.3f}, {i.high:+.3f}]"


def way(i: Interval) -> str:
    """Which way a difference's interval points: up, down, or not distinguishable from 0."""
    return "up" if i.low > 0 else "down" if i.high < 0 else "not distinguishable"


# -- results -------------------------------------------------------------------------------------


def tables(res: dict) -> tuple[str, dict]:
    """The markdown tables (success with intervals and the mean across environments; mean reward;
    transfer: trained - untrained; mixed - each specialist) and the same numbers as JSON."""
    students = list(STUDENTS)
    trained = students[1:]
    head = "| student | trained on (episodes s/b/o) | " + " | ".join(ENVS) + " | mean |"
    rule = "|---|---|" + "---:|" * (len(ENVS) + 1)
    lines = [
        "Held-out success per environment (Wilson 95 %) and the mean of the three (bootstrap "
        "95 %, resampled within each environment), over every (seed, task):",
        "",
        head,
        rule,
    ]
    out: dict = {
        "success": {},
        "reward": {},
        "transfer": {},
        "mixed_minus_specialist": {},
        "env_normalize_minus_mixed": {},
    }
    for name in students:
        won = {env: pooled(res, name, "success", env) for env in ENVS}
        cells = {env: wilson(int(sum(v)), len(v)) for env, v in won.items()}
        mean = stratified_mean(list(won.values()))
        counts = trained_counts(res, name)
        lines.append(
            f"| {name} | {'/'.join(str(counts[e]) for e in ENVS)} | "
            + " | ".join(cells[env].pct() for env in ENVS)
            + f" | {mean.pct()} |"
        )
        out["success"][name] = {k: asdict(v) for k, v in {**cells, "mean": mean}.items()}
    lines += [
        "",
        "Held-out mean reward per environment (bootstrap 95 %; the environments' rewards have "
        "different scales, so no mean across them):",
        "",
        "| student | " + " | ".join(ENVS) + " |",
        "|---|" + "---:|" * len(ENVS),
    ]
    for name in students:
        cells = {env: bootstrap_mean(pooled(res, name, "reward", env)) for env in ENVS}
        lines.append(f"| {name} | " + " | ".join(c.num() for c in cells.values()) + " |")
        out["reward"][name] = {k: asdict(v) for k, v in cells.items()}
    for metric, what in (("success", "success"), ("reward", "mean reward")):
        lines += [
            "",
            f"Transfer: held-out {what}, trained student - untrained, paired over (seed, task), "
            "bootstrap 95 % (the diagonal is in-domain learning; off it, transfer):",
            "",
            "| student | " + " | ".join(ENVS) + (" | mean |" if metric == "success" else " |"),
            "|---|" + "---:|" * (len(ENVS) + (metric == "success")),
        ]
        out["transfer"][metric] = {}
        for name in trained:
            d = difference(res, "untrained", name, metric)
            keys = [*ENVS, "mean"] if metric == "success" else list(ENVS)
            lines.append(f"| {name} | " + " | ".join(signed(d[k]) for k in keys) + " |")
            out["transfer"][metric][name] = {k: asdict(d[k]) for k in keys}
    for metric, what in (("success", "success"), ("reward", "mean reward")):
        lines += [
            "",
            f"Mixed student - each single-environment student, held-out {what}, paired over "
            "(seed, task), bootstrap 95 %:",
            "",
            "| mixed - | " + " | ".join(ENVS) + (" | mean |" if metric == "success" else " |"),
            "|---|" + "---:|" * (len(ENVS) + (metric == "success")),
        ]
        out["mixed_minus_specialist"][metric] = {}
        for name in SPECIALISTS.values():
            d = difference(res, name, "mixed", metric)
            keys = [*ENVS, "mean"] if metric == "success" else list(ENVS)
            lines.append(f"| {name} | " + " | ".join(signed(d[k]) for k in keys) + " |")
            out["mixed_minus_specialist"][metric][name] = {k: asdict(d[k]) for k in keys}
    lines += [
        "",
        "Per-environment advantage normalisation: mixed-env-normalize - mixed, paired over "
        "(seed, task), bootstrap 95 %:",
        "",
        "| metric | " + " | ".join(ENVS) + " | mean |",
        "|---|" + "---:|" * (len(ENVS) + 1),
    ]
    for metric in ("success", "reward"):
        d = difference(res, "mixed", "mixed-env-normalize", metric)
        keys = [*ENVS, "mean"] if metric == "success" else list(ENVS)
        cells = [signed(d[k]) for k in keys] + ([] if metric == "success" else ["n/a"])
        lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        out["env_normalize_minus_mixed"][metric] = {k: asdict(d[k]) for k in keys}
    return "\n".join(lines), out


def gate_summary(res: dict) -> str:
    """The gate's rollbacks per trained student over every seed, in words."""
    parts = []
    for name in list(STUDENTS)[1:]:
        decisions = [d for run in res["runs"].values() for d in run[name].get("gate", [])]
        back = sum(str(d["decision"]).startswith("rollback") for d in decisions)
        parts.append(f"{name} {back} rollback(s) in {len(decisions)} epochs")
    return ", ".join(parts)


def trained_counts(res: dict, student: str) -> dict[str, int]:
    """Training episodes per environment of ``student`` in one seed's run (the same every seed)."""
    run = next(iter(res["runs"].values()))[student]
    return run.get("trained", dict.fromkeys(ENVS, 0))


def findings(numbers: dict) -> list[str]:
    """What the tables say, in words, computed from the intervals (nothing is assumed)."""
    t = numbers["transfer"]["success"]
    m = numbers["mixed_minus_specialist"]["success"]
    iv = {k: {e: Interval(**x) for e, x in v.items()} for k, v in t.items()}
    mv = {k: {e: Interval(**x) for e, x in v.items()} for k, v in m.items()}
    notes = []
    for env in ENVS:
        name = SPECIALISTS[env]
        others = [e for e in ENVS if e != env]
        notes.append(
            f"{name} vs untrained (success): in-domain ({env}) {signed(iv[name][env])} "
            f"({way(iv[name][env])}); transfer to "
            + "; to ".join(f"{e} {signed(iv[name][e])} ({way(iv[name][e])})" for e in others)
            + "."
        )
    notes.append(
        "mixed vs untrained (success): "
        + "; ".join(f"{e} {signed(iv['mixed'][e])} ({way(iv['mixed'][e])})" for e in ENVS)
        + f"; mean across environments {signed(iv['mixed']['mean'])} ({way(iv['mixed']['mean'])})."
    )
    verdicts = {name: way(d["mean"]) for name, d in mv.items()}
    better = [n for n, v in verdicts.items() if v == "up"]
    worse = [n for n, v in verdicts.items() if v == "down"]
    level = [n for n, v in verdicts.items() if v == "not distinguishable"]
    notes.append(
        "Mean held-out success across the three environments, mixed - specialist: "
        + "; ".join(f"{n} {signed(d['mean'])}" for n, d in mv.items())
        + f". Mixed better beyond noise than: {', '.join(better) or 'none'}; worse than: "
        f"{', '.join(worse) or 'none'}; not distinguishable from: {', '.join(level) or 'none'}."
    )
    in_domain = {env: way(mv[SPECIALISTS[env]][env]) for env in ENVS}
    notes.append(
        "Each environment against its own specialist (which trained on 3x as many of that "
        "environment's episodes), mixed - specialist: "
        + "; ".join(f"{env} {signed(mv[SPECIALISTS[env]][env])} ({in_domain[env]})" for env in ENVS)
        + "."
    )
    if len(better) == len(verdicts) and all(v == "up" for v in in_domain.values()):
        answer = (
            "multi-environment training beat single-environment training on all three "
            "environments' held-out tasks, beyond noise"
        )
    elif len(better) == len(verdicts):
        answer = (
            "the mixed student beat every specialist on the mean across environments beyond "
            "noise, but not every specialist in its own environment"
        )
    elif worse:
        answer = (
            "the mixed student did worse beyond noise than at least one specialist on the mean "
            "across environments"
        )
    else:
        answer = (
            "the mixed student is not distinguishable from at least one specialist on the mean "
            "across environments; at this budget the run does not show that multi-environment "
            "training beats single-environment training"
        )
    n = {e: Interval(**x) for e, x in numbers["env_normalize_minus_mixed"]["success"].items()}
    notes.append(
        "Per-environment advantage normalisation (mixed-env-normalize - mixed, success): "
        + "; ".join(f"{e} {signed(n[e])} ({way(n[e])})" for e in ENVS)
        + f"; mean {signed(n['mean'])} ({way(n['mean'])})."
    )
    notes.insert(0, f"Phase D/E answer at this budget: {answer}.")
    return notes


COLORS = {
    "untrained": "tab:gray",
    "mixed": "tab:purple",
    "shell-only": "tab:blue",
    "browser-only": "tab:orange",
    "orchestrator-only": "tab:green",
    "mixed-env-normalize": "tab:red",
}


def plot(numbers: dict, path: Path, title: str) -> None:
    """Left: held-out success per environment and the mean, one bar per student with its 95 %
    interval. Right: transfer, trained - untrained success per environment, as a heat map."""
    fig = Figure(figsize=(12, 4.8))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    cols = [*ENVS, "mean"]
    width = 0.8 / len(STUDENTS)
    for k, name in enumerate(STUDENTS):
        cells = [Interval(**numbers["success"][name][c]) for c in cols]
        xs = [i + (k - (len(STUDENTS) - 1) / 2) * width for i in range(len(cols))]
        left.bar(
            xs,
            [c.value for c in cells],
            width,
            yerr=[
                [max(0.0, c.value - c.low) for c in cells],
                [max(0.0, c.high - c.value) for c in cells],
            ],
            color=COLORS[name],
            label=name,
            capsize=2,
        )
    left.set_xticks(range(len(cols)), ["shell", "browser", "orchestrator", "mean of 3"])
    left.set_ylabel("held-out success (T=0.1)")
    left.set_ylim(0, 1)
    left.grid(axis="y", alpha=0.3)
    left.legend(fontsize=8)
    left.set_title("held-out success, 95 % intervals")
    trained = list(STUDENTS)[1:]
    grid = [[numbers["transfer"]["success"][name][c]["value"] for c in cols] for name in trained]
    bound = max(0.05, *(abs(v) for row in grid for v in row))
    image = right.imshow(grid, cmap="RdBu", vmin=-bound, vmax=bound)
    for r, name in enumerate(trained):
        for c, col in enumerate(cols):
            cell = Interval(**numbers["transfer"]["success"][name][col])
            mark = "*" if cell.low > 0 or cell.high < 0 else ""
            ink = "white" if abs(cell.value) > 0.6 * bound else "black"
            right.text(
                c, r, f"{cell.value:+.2f}{mark}", ha="center", va="center", fontsize=8, color=ink
            )
    right.set_xticks(range(len(cols)), ["shell", "browser", "orch.", "mean"])
    right.set_yticks(range(len(trained)), trained)
    right.set_title("trained - untrained success (* beyond noise)")
    fig.colorbar(image, ax=right, shrink=0.8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def print_table(res: dict, console: Console) -> None:
    """Held-out success per seed and student (the rich console's view)."""
    table = Table(title="held-out success per seed (shell / browser / orchestrator)")
    table.add_column("student")
    for seed in res["runs"]:
        table.add_column(f"seed {seed}", justify="right")
    for name in STUDENTS:
        table.add_row(
            name,
            *(
                " / ".join(f"{statistics.fmean(run[name]['success'][e]):.0%}" for e in ENVS)
                for run in res["runs"].values()
            ),
        )
    console.print(table)


def with_tables(out: Path, text: str, numbers: dict, res: dict) -> None:
    """Add the tables to the markdown report (before its notes) and the numbers, per-seed scores
    and held-out tasks to the JSON beside it."""
    md = out.read_text()
    head, sep, tail = md.partition("Notes:")
    out.write_text(f"{head}{text}\n\n{sep}{tail}")
    path = out.with_suffix(".json")
    payload = json.loads(path.read_text())
    payload["tables"] = numbers
    payload["runs"] = res["runs"]
    payload["heldout"] = res["heldout"]
    payload["browser_retries"] = res["browser_retries"]
    payload["recipes"] = dict(DEFAULT_ENV_RECIPES)
    path.write_text(json.dumps(payload, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("phase_de", __doc__, "~40 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["torch", "playwright", "matplotlib"], console
    )
    print_table(res, console)
    text, numbers = tables(res)
    console.print(text)
    rows = []
    for name in list(STUDENTS)[1:]:
        for col in [*ENVS, "mean"]:
            ours, base = numbers["success"][name][col], numbers["success"]["untrained"][col]
            rows.append(
                _common.Row(
                    f"{name}: held-out success, {col if col != 'mean' else 'mean of the three'}",
                    "rate",
                    ours["value"],
                    base["value"],
                    samples=(
                        {
                            "ours": pooled(res, name, "success", col),
                            "baseline": pooled(res, "untrained", "success", col),
                        }
                        if col != "mean"
                        else {}
                    ),
                )
            )
    png = out.with_suffix(".png")
    seeds = len(res["runs"])
    plot(
        numbers,
        png,
        f"Phase D/E: {s.episodes} training episodes per student, {seeds} seed(s)",
    )
    console.print(f"wrote {png}")
    counts = trained_counts(res, "mixed")
    heldout_sizes = ", ".join(f"{len(res['heldout'][e])} {e}" for e in ENVS)
    notes = [
        *findings(numbers),
        f"Budget: every trained student ran {s.epochs} epochs x {s.tasks_per_epoch} tasks x "
        f"groups of {s.group_size} = {s.episodes} training episodes and {s.epochs} updates per "
        f"seed; the mixed student's were {counts['shell']} shell, {counts['browser']} browser "
        f"and {counts['orchestrator']} orchestrator (equal thirds of each epoch's tasks; the "
        "specification's 0.4/0.3/0.3 does not split 6 tasks evenly).",
        f"Held-out: {heldout_sizes} tasks, the same "
        f"for every student and seed, one near-greedy (T=0.1) episode each, seeded by position; "
        f"{seeds} seed(s), so {seeds} x that many (seed, task) pairs per environment. Intervals "
        "resample (seed, task) pairs, not seeds: they do not include seed-to-seed variation of "
        "training beyond what the pooled pairs show.",
        "Training: the in-process kernel per student (aios_rl.local: collect_epoch draws and "
        "runs each epoch's tasks as the campaign service does, on the real environment hosts "
        "and run_steps; one train_epoch update per epoch with the trainer service's "
        "configuration), learning from the environment's reward alone by each "
        "environment's default (aios_rl.recipes, as aios-rl train: shell and orchestrator by "
        "the recipe, GRPO + self-imitation of its own successes + step-level progress credit; "
        f"{recipe_note()}; no teacher judges, nothing is distilled), GRPO groups at temperature 1, the comparison gate on "
        f"({REFERENCE_RUNS} reference runs a task an epoch under the weights before the last "
        "update, the epoch verdict and decide_epoch; a rollback restores the weights and skips "
        "the epoch's update); the mixed student's environments run concurrently. "
        "Browser: real Chromium, the sites service on an embedded nats-server, action timeout "
        "1 s. Task draws are the campaign's sample_tasks, seeded by (seed, epoch). "
        f"Gate: {gate_summary(res)}.",
        f"Episodes run again after their environment crashed (in practice Chromium: a first "
        f"page slower than the 1 s action timeout under load; same task, seed and student, so "
        f"the same decisions): {len(res['browser_retries'])}, at most {ATTEMPTS} attempts each.",
        "Ratios in the first table: trained student / untrained held-out success (inf when the "
        "untrained student solved none).",
        f"Plot: {png.name}, held-out success per student and environment (left) and the transfer "
        "matrix trained - untrained (right).",
        "Wall time was measured on a shared 2-core machine (other work ran beside it; see the "
        "load averages above).",
        *(
            f"Seed {seed} {name}: training {run[name]['train_s']:.0f} s, scoring "
            f"{run[name]['eval_s']:.0f} s, rollout success per epoch "
            + " ".join(f"{x:.0%}" for x in run[name]["train_curve"])
            for seed, run in res["runs"].items()
            for name in list(STUDENTS)[1:]
        ),
    ]
    _common.report(
        console,
        out,
        title="Phase D/E: one student trained on all three environments vs single-environment "
        "students, on the held-out tasks of all three",
        rows=rows,
        ours="student",
        baseline="untrained",
        machine=machine,
        settings={
            **asdict(s),
            "seeds": list(s.seeds),
            "train_tasks": dict(s.train_tasks),
            "heldout_tasks": dict(s.heldout_tasks),
            "mix": {k: round(v, 3) for k, v in s.mix.items()},
            "training_episodes_per_student": s.episodes,
        },
        notes=notes,
        elapsed_s=elapsed,
    )
    with_tables(out, text, numbers, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
