"""Rollout-strategy benchmark: for the same training run, which way of spending rollouts teaches
the tiny student most about tasks it never saw, and at what cost? Shell by default; ``--env``
names another environment (``orchestrator``, ``browser-miniwob``, ``browser-sites``).

Four arms, each a fresh tiny student per seed (the same initial weights for every arm of a seed),
trained for the same epochs on the same train tasks (the campaign's ``sample_tasks``, seeded by
(seed, epoch), whatever the strategy):

``uniform-8``
    GRPO groups of 8 rollouts per task (the baseline every ratio is taken against).
``uniform-4``
    GRPO groups of 4.
``entropy``
    ARPO's entropy branching with a budget of 8 rollouts per task: 4 base rollouts, then rounds
    that branch continuations where the entropy rises (``aios_rl.rollouts``, default settings).
``dapo-filter``
    Groups of 4; a group whose rewards all tie is left out of the update and a newly drawn task
    takes its place (DAPO's dynamic sampling, up to ``tasks_per_epoch`` new tasks an epoch); an
    epoch where every group ties makes no update.

The loop is the product's own, in one process and without NATS: the in-process kernel
(``aios_rl.local``). ``collect_epoch`` runs round 0 (every task's base rollouts, the campaign's
``plan_jobs``), then lets the strategy plan round after round from what came back (the campaign's
``plan_next``: continuations, fresh rollouts, new tasks) until it plans nothing, as the campaign
service's ``collect`` does. Every job runs through the runner's episode function on the real
host (the shell sandbox, the orchestrator, Chromium): a continuation opens its parent's
environment, replays the parent's first ``step`` actions (marked ``replayed``, no policy call)
and samples afresh after them. Every arm of a seed
uses the same campaign id, so base rollouts with the same number share their seeds across arms.
The oracle teacher judges every rollout for hints (``--reward-only``: no teacher; the
environment's reward-only recipe, :data:`REWARD_RECIPES`) and one trainer update per epoch
follows (``train_epoch``), as in ``bench/learning.py``.

Measured per arm and seed: held-out success (one near-greedy episode, temperature 0.1, seeded, per
held-out task) before training (shared by the arms of a seed), after half the epochs and at the end;
rollouts consumed (base + continuations), environment steps sampled and replayed, policy calls,
the training's wall time (held-out scoring excluded) and the mean group contrast ``I(Y)`` before
and after continuations. Results: ``bench/results/strategies.md`` / ``.json`` (ratios of each arm
against ``uniform-8``) and ``strategies.png`` (held-out success against rollouts consumed).

Run from the repo root:

    .venv/bin/python bench/strategies.py            # ~10 min; results in bench/results/strategies.md
    .venv/bin/python bench/strategies.py --quick    # ~30 s smoke run (one seed, 2 epochs)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from aios_rl.local import LocalPolicy, LocalRail
from aios_rl.rollouts import (
    validate,
)
from aios_rl.stats import paired_difference, wilson
from aios_rl.student import load_student, new_student
from bench import _common
from bench._kernel import (
    BENCH_ENVS,
    LM_BENCH_ENVS,
    LM_TRAINER,
    ORACLE_DISTILL,
    Task,
    env_hosts,
    env_splits,
    score,
    train_run,
)
from contracts import (
    BranchingSettings,
    CampaignSpec,
    RolloutStrategy,
    TrainerSettings,
)


@dataclass(frozen=True)
class Settings:
    """What one run of the benchmark does (every arm runs with the same settings)."""

    seeds: tuple[int, ...]
    """Initial weights, task draws and update order of each run (one run per arm and seed)."""
    epochs: int
    """Updates per run (held-out success is also scored after ``epochs // 2``)."""
    tasks_per_epoch: int
    """Train tasks an epoch begins with (``dapo-filter`` may draw as many more)."""
    train_tasks: int
    """Size of the train split generated."""
    heldout_tasks: int
    """Size of the held-out split generated (one scoring episode each)."""
    learning_rate: float
    """Adam step size of every update."""
    workers: int = 2
    """Episodes run at once (sandboxed commands in parallel; the student's calls serialised)."""
    reward_only: bool = False
    """Learn from the environment's reward alone (``--reward-only``): no teacher, nothing
    distilled, the recipe measured to learn from reward on the environment
    (:data:`REWARD_RECIPES`); off, the oracle's hints are distilled at 0.5 (how these
    benchmarks were first measured)."""
    env: str = "shell"
    """The environment trained and held out on (``--env``: one of ``BENCH_ENVS``)."""
    student: str = "tiny"
    """The student's backend: ``tiny``, or ``lm`` (SmolLM2-135M-Instruct with a LoRA adapter,
    ``bench/rail.py --student lm``), which learns from reward with :data:`LM_TRAINER`."""


REWARD_RECIPE = {"distill_coef": 0.0, "self_imitation": True, "progress_coef": 1.0}
"""Learning from reward alone on shell (``bench/results/learning_rl.md``): GRPO, plus imitation
of the update's own successes, plus each step credited with the progress the tests measured."""
REWARD_RECIPES = {
    "shell": REWARD_RECIPE,
    "orchestrator": REWARD_RECIPE,
    "browser-sites": REWARD_RECIPE,
    "browser-miniwob": {"distill_coef": 0.0},
}
"""Per environment, the reward-only row of ``bench/results/learning_rl.md`` that learnt most:
the ``rl`` recipe on shell and orchestrator (and site flows, where none learnt), GRPO alone on
MiniWoB++."""


def recipe_of(s: Settings) -> dict:
    """The trainer fields a run's students learn with, over the campaign's defaults."""
    if not s.reward_only:
        return ORACLE_DISTILL
    return LM_TRAINER if s.student == "lm" else REWARD_RECIPES[s.env]


def signal_args() -> argparse.ArgumentParser:
    """``--reward-only`` and ``--env``, for the strategy benchmarks' command lines."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(
        "--env",
        choices=(*BENCH_ENVS, *LM_BENCH_ENVS),
        default="shell",
        help="the environment trained and held out on (default shell; agentbench_db, AgentBench "
        "DB's dev split from $AGENTBENCH_DIR, with --student lm); another's default results "
        "path gains -<env>",
    )
    parser.add_argument(
        "--reward-only",
        action="store_true",
        help="learn from the environment's reward alone (no teacher, nothing distilled); the "
        "default results path gains -reward-only",
    )
    return parser


LEARNING_RATES = {"orchestrator": 1e-3}
"""Adam step sizes that differ from the settings' on an environment: the ones its
``bench/learning_rl.py`` runs were measured with."""


def with_signal(args: argparse.Namespace, s: Settings, out: Path) -> tuple[Settings, Path]:
    """The settings and results path of ``--env`` (its learning rate from
    :data:`LEARNING_RATES`) and ``--reward-only`` (``--out`` given: that path)."""
    env = getattr(args, "env", "shell")
    if env in LM_BENCH_ENVS and s.student != "lm":
        raise SystemExit(f"{env}'s actions are free text: only --student lm acts on it")
    if env != "shell":  # the lm student's settings carry their own learning rate
        lr = LEARNING_RATES.get(env, s.learning_rate) if s.student == "tiny" else s.learning_rate
        s = replace(s, env=env, learning_rate=lr)
        out = _common.variant_path(args, out, env)
    if not args.reward_only:
        return s, out
    return replace(s, reward_only=True), _common.variant_path(args, out, "reward-only")


def signal_of(s: Settings) -> str:
    """What the students of a run learn from, in words (every results file says it)."""
    if s.reward_only:
        if recipe_of(s).get("self_imitation") != REWARD_RECIPE["self_imitation"]:
            return "environment reward only (no teacher, nothing distilled): GRPO alone"
        return (
            "environment reward only (no teacher, nothing distilled): GRPO + self-imitation of "
            "its own successes + step-level progress credit"
        )
    return "the oracle's hints distilled at 0.5 (it knows every answer) on GRPO"


FULL = Settings(
    seeds=(0, 1, 2),
    epochs=6,
    tasks_per_epoch=6,
    train_tasks=60,
    heldout_tasks=30,
    learning_rate=3e-3,
)
QUICK = Settings(
    seeds=(0,),
    epochs=2,
    tasks_per_epoch=3,
    train_tasks=12,
    heldout_tasks=6,
    learning_rate=3e-3,
)


@dataclass(frozen=True)
class Arm:
    """One way of spending an epoch's rollouts."""

    name: str
    strategy: RolloutStrategy
    group_size: int
    """Rollouts per task (M), base rollouts and continuations together."""
    branching: BranchingSettings = field(default_factory=BranchingSettings)


ARMS = (
    Arm("uniform-8", "uniform", 8),
    Arm("uniform-4", "uniform", 4),
    Arm("entropy", "entropy", 8, BranchingSettings(initial=4)),
    Arm("dapo-filter", "dapo-filter", 4),
)
BASELINE = "uniform-8"


def arm_spec(arm: Arm, seed: int, s: Settings) -> CampaignSpec:
    """The campaign spec an arm plans with; one campaign id per seed, shared by the arms."""
    spec = CampaignSpec(
        campaign_id=f"strategies-s{seed}",
        environments={s.env.split("-", 1)[0]: 1.0},  # browser-miniwob: the browser's tasks
        tasks_per_epoch=s.tasks_per_epoch,
        group_size=arm.group_size,
        epochs=s.epochs,
        rollout_strategy=arm.strategy,
        branching=arm.branching,
        trainer=TrainerSettings(
            learning_rate=s.learning_rate,
            seed=seed,
            **recipe_of(s),
        ),
        seed=seed,
        reference_runs=0,
    )
    validate(spec)
    return spec


def arm_label(arm: Arm) -> str:
    """An arm's strategy and budget in a few words (for the settings line)."""
    b = arm.branching
    if arm.strategy == "entropy":
        return (
            f"{arm.name}: entropy M={arm.group_size} N={b.initial} Z={b.branch_width} "
            f"beta={b.beta} tau={b.tau} rounds<={b.max_rounds}"
        )
    if arm.strategy == "dapo-filter":
        return (
            f"{arm.name}: dapo-filter M={arm.group_size} cap={b.resample_cap or 'tasks_per_epoch'}"
        )
    if arm.strategy == "variance":
        n = b.initial or max(1, arm.group_size // 2)
        return f"{arm.name}: variance allocator M={arm.group_size} N={n}, the rest by p(1-p)"
    return f"{arm.name}: uniform M={arm.group_size}"


# -- every arm of every seed, through the kernel -------------------------------------------------


async def measure(
    s: Settings,
    log: Callable[[str], None],
    *,
    arms: Sequence[Arm] = ARMS,
    spec_of: Callable[[Arm, int, Settings], CampaignSpec] = arm_spec,
    rail_for: Callable[[CampaignSpec], LocalRail | None] = lambda _spec: None,
    rail_report: Callable[[LocalRail, Mapping[str, Task], str], dict] | None = None,
    earlier: Mapping[str, dict] | None = None,
    on_arm: Callable[[dict], None] | None = None,
) -> dict:
    """Every arm of every seed, each a ``train_run`` from the seed's initial weights, and the
    untrained student's held-out success per seed. ``rail_for`` gives an arm's spec its RAIL
    controller (``None``: the strategy plans its rounds), ``rail_report`` what a run's
    controller did, given it, the tasks and the arm's name (``bench/rail.py``).

    ``earlier``: the runs of an earlier measurement with the same settings (``{seed: {"before",
    "arms"}}``); its untrained scores and the arms it measured are kept, not run again (each arm
    is its own run from the seed's initial weights, so a long measurement may be made in
    pieces). ``on_arm`` is called with everything measured or kept so far after each arm, kept
    ones too, so a run stopped later still holds them."""
    torch.set_num_threads(1 if s.student == "tiny" else 2)  # lm: its passes dominate
    train, heldout = await env_splits(s.env, s.train_tasks, s.heldout_tasks, log)
    tasks = {t.task_id: t for t in [*train, *heldout]}
    async with env_hosts(s.env, list(tasks.values()), s.workers) as rollouts_for:
        out: dict = {}
        for seed in s.seeds:
            torch.manual_seed(seed)
            weights = new_student(s.student, seed=seed).to_bytes()
            prior = (earlier or {}).get(str(seed), {})
            if "before" in prior:
                before = prior["before"]
                kept = " (kept from the earlier run)"
            else:
                async with rollouts_for(LocalPolicy(load_student(weights))) as rollouts:
                    before, _ = await score(rollouts, heldout, "before")
                kept = ""
            log(f"seed {seed}: untrained held-out success {statistics.fmean(before):.0%}{kept}")
            runs: dict = {}
            out[str(seed)] = {"before": before, "arms": runs}
            for arm in arms:
                if arm.name in prior.get("arms", {}):
                    runs[arm.name] = prior["arms"][arm.name]
                    log(f"seed {seed} {arm.name}: kept from the earlier run")
                    if on_arm is not None:  # a run stopped after it still holds it
                        on_arm(out)
                    continue
                spec = spec_of(arm, seed, s)
                rail = rail_for(spec)
                runs[arm.name] = await train_run(
                    spec,
                    weights,
                    rollouts_for,
                    tasks,
                    heldout,
                    log,
                    name=arm.name,
                    mid_epoch=max(1, s.epochs // 2),
                    rail=rail,
                    teacher=not s.reward_only,
                )
                if rail is not None and rail_report is not None:
                    runs[arm.name]["rail"] = rail_report(rail, tasks, arm.name)
                if on_arm is not None:
                    on_arm(out)
        return out


# -- results -------------------------------------------------------------------------------------

COUNTS = (
    "rollouts",
    "rollouts_mid",
    "base",
    "continuations",
    "steps_sampled",
    "steps_replayed",
    "policy_calls",
    "contrast_before",
    "contrast_after",
    "groups",
    "dropped",
    "new_tasks",
    "rounds",
    "updates",
    "wall_s",
)
"""The numbers of a run that pool as a mean over seeds."""


def before_all(res: dict) -> list[float]:
    """The untrained student's held-out successes over every (seed, task)."""
    return [x for r in res.values() for x in r["before"]]


def pooled(res: dict, arm: str) -> dict:
    """One arm over every seed: held-out successes over every (seed, task), counts as the mean
    per seed."""
    runs = [r["arms"][arm] for r in res.values()]
    out: dict = {k: statistics.fmean(a[k] for a in runs) for k in COUNTS}
    out["mid"] = [x for a in runs for x in a["mid"]]
    out["after"] = [x for a in runs for x in a["after"]]
    return out


def seeds_of(res: dict, arm: str, key: str) -> dict[str, list[float]]:
    """Per-seed values of ``key`` for the arm and the baseline (kept in the JSON)."""
    return {
        "ours": [float(r["arms"][arm][key]) for r in res.values()],
        "baseline": [float(r["arms"][BASELINE][key]) for r in res.values()],
    }


def print_tables(res: dict, console: Console) -> None:
    """Per arm and seed (and pooled over seeds when there are several): held-out success and what
    training cost; the groups' contrast and what the strategy did with them."""
    success = Table(title="held-out success (before / mid / after training) and training cost")
    groups = Table(title="groups: reward contrast I(Y), base rollouts -> all rollouts")
    for table, cols in (
        (success, ("seed", "before", "mid", "after", "rollouts", "steps", "wall s")),
        (groups, ("seed", "I(Y)", "dropped", "new tasks", "rounds", "updates")),
    ):
        table.add_column("arm", min_width=len("dapo-filter"))
        for col in cols:
            table.add_column(col, justify="right")
    for arm in ARMS:
        runs = [(seed, r["before"], r["arms"][arm.name]) for seed, r in res.items()]
        if len(runs) > 1:
            runs.append(("pooled", before_all(res), pooled(res, arm.name)))
        for seed, before, a in runs:
            success.add_row(
                arm.name,
                seed,
                *(f"{statistics.fmean(x):.0%}" for x in (before, a["mid"], a["after"])),
                f"{a['rollouts']:.0f}",
                f"{a['steps_sampled']:.0f}+{a['steps_replayed']:.0f}",
                f"{a['wall_s']:.1f}",
            )
            groups.add_row(
                arm.name,
                seed,
                f"{a['contrast_before']:.3f}->{a['contrast_after']:.3f}",
                f"{a['dropped']:.0f}/{a['groups']:.0f}",
                *(f"{a[k]:.0f}" for k in ("new_tasks", "rounds", "updates")),
            )
    console.print(success)
    console.print(groups)
    console.print(
        "[dim]steps: sampled + replayed. pooled: success over every (seed, task); counts and "
        "seconds are means per seed[/dim]"
    )


def plot(res: dict, path: Path) -> None:
    """Held-out success against cumulative rollouts consumed (0, mid, end): the mean over seeds
    per arm as a line, each seed's points faint."""
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    for arm, color in zip(ARMS, colors, strict=True):
        xs, ys = [], []
        for r in res.values():
            a = r["arms"][arm.name]
            x = [0, a["rollouts_mid"], a["rollouts"]]
            y = [statistics.fmean(v) for v in (r["before"], a["mid"], a["after"])]
            ax.scatter(x, y, color=color, alpha=0.25, s=18, linewidths=0)
            xs.append(x)
            ys.append(y)
        mean_x = [statistics.fmean(col) for col in zip(*xs, strict=True)]
        mean_y = [statistics.fmean(col) for col in zip(*ys, strict=True)]
        ax.plot(mean_x, mean_y, marker="o", color=color, label=arm.name)
    ax.set_xlabel("rollouts consumed (base + continuations, cumulative)")
    ax.set_ylabel("held-out success (T=0.1)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Rollout strategies: held-out success vs rollouts ({len(res)} seed(s))")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def compare(res: dict, arm: str) -> list[_common.Row]:
    """``arm`` against the baseline: held-out success at the end and mid-training, costs, and
    the groups' contrast."""
    ours, base = pooled(res, arm), pooled(res, BASELINE)
    mid_epoch = next(iter(res.values()))["arms"][arm]["mid_epoch"]
    rows = [
        _common.Row(
            f"{arm}: held-out success after training, pooled",
            "rate",
            statistics.fmean(ours["after"]),
            statistics.fmean(base["after"]),
            samples={"ours": ours["after"], "baseline": base["after"]},
        ),
        _common.Row(
            f"{arm}: held-out success after {mid_epoch} epoch(s), pooled",
            "rate",
            statistics.fmean(ours["mid"]),
            statistics.fmean(base["mid"]),
            samples={"ours": ours["mid"], "baseline": base["mid"]},
        ),
    ]
    for key, what, unit in (
        ("rollouts", "rollouts consumed", "rollouts"),
        ("steps_sampled", "env steps sampled", "steps"),
        ("policy_calls", "policy calls", "calls"),
        ("wall_s", "training wall time", "s"),
    ):
        rows.append(
            _common.Row(
                f"{arm}: {what} per seed",
                unit,
                ours[key],
                base[key],
                higher_is_better=False,
                samples=seeds_of(res, arm, key),
            )
        )
    rows.append(
        _common.Row(
            f"{arm}: mean group contrast I(Y), all rollouts",
            "variance",
            ours["contrast_after"],
            base["contrast_after"],
            samples=seeds_of(res, arm, "contrast_after"),
        )
    )
    return rows


def arm_notes(res: dict, s: Settings) -> list[str]:
    """Per arm, in words: held-out success with intervals and what its training spent; per
    contender, the paired difference with the baseline."""
    n = len(before_all(res))
    untrained = wilson(int(sum(before_all(res))), n).pct()
    base_after = pooled(res, BASELINE)["after"]
    notes = [f"Untrained held-out success (shared by every arm of a seed): {untrained}."]
    for arm in ARMS:
        p = pooled(res, arm.name)
        notes.append(
            f"{arm.name}: held-out success mid {wilson(int(sum(p['mid'])), n).pct()}, after "
            f"{wilson(int(sum(p['after'])), n).pct()}; per seed {p['rollouts']:.0f} rollouts "
            f"({p['base']:.0f} base + {p['continuations']:.0f} continuations), "
            f"{p['steps_sampled']:.0f} steps sampled + {p['steps_replayed']:.0f} replayed, "
            f"{p['updates']:.1f}/{s.epochs} updates, {p['rounds']:.1f} planning rounds, "
            f"{p['new_tasks']:.1f} tasks drawn for tied groups, {p['dropped']:.1f}/"
            f"{p['groups']:.1f} groups left out of the update; mean group contrast I(Y) "
            f"{p['contrast_before']:.3f} over base rollouts, {p['contrast_after']:.3f} over all."
        )
        if arm.name == BASELINE:
            continue
        diff, low, high = paired_difference(base_after, p["after"])
        verdict = "beyond noise" if low > 0 or high < 0 else "not beyond noise"
        notes.append(
            f"{arm.name} - {BASELINE}, held-out success after training, paired over (seed, task): "
            f"{diff:+.3f}, bootstrap 95 % interval [{low:+.3f}, {high:+.3f}] ({verdict})."
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, s, out = _common.bench_args(
        "strategies", __doc__, "~30 s", full=FULL, quick=QUICK, argv=argv, parents=[signal_args()]
    )
    s, out = with_signal(args, s, out)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log), ["torch", "matplotlib"], console
    )
    print_tables(res, console)
    rows = [row for arm in ARMS if arm.name != BASELINE for row in compare(res, arm.name)]
    _common.print_rows(f"strategies: each arm vs {BASELINE}", rows, "arm", BASELINE, console)
    png = out.with_suffix(".png")
    plot(res, png)
    console.print(f"wrote {png}")
    notes = [
        *arm_notes(res, s),
        f"Ratios: arm / {BASELINE} for held-out success and contrast, {BASELINE} / arm for costs "
        "(rollouts, steps, calls, seconds): above 1, the arm did better or spent less; inf when "
        "the denominator is 0. Every arm was measured in the same run, on the same seeds, initial "
        "weights and epoch tasks.",
        f"{len(res)} seed(s) x {s.heldout_tasks} held-out tasks: held-out success is a small "
        "sample; read it with the Wilson and paired bootstrap intervals above. Nothing here is "
        "claimed beyond these numbers.",
        "Training: the in-process kernel (aios_rl.local; no NATS, no comparison gate, no teacher "
        "reward shaping): the campaign's rounds (plan_jobs, plan_next) as the campaign service "
        f"runs them, episodes through the runner's episode function on {s.env} at temperature 1, "
        f"learning from {signal_of(s)} (a hint on a continuation's replayed step is not "
        "distilled again), one update per epoch with the trainer service's configuration; dapo-filter's "
        "tied groups are left out of the update. Evaluation: one near-greedy (T=0.1) episode per "
        "held-out task, seeded; the same seeds for every arm.",
        "Wall time is the machine's at the time (2 cores, the load averages above): compare it "
        "between the arms of one run only.",
        f"Plot: {png.name}, held-out success (mean over seeds, each seed's points faint) against "
        "cumulative rollouts consumed, at 0, mid-training and the end.",
    ]
    _common.report(
        console,
        out,
        title="Rollout strategies: held-out success of the tiny student and what its training cost",
        rows=rows,
        ours="arm",
        baseline=BASELINE,
        machine=machine,
        settings={
            **asdict(s),
            "seeds": list(s.seeds),
            "arms": [arm_label(a) for a in ARMS],
        },
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
