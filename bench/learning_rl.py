"""Learning from reward: does the tiny student improve on tasks it never saw from the
environment's reward alone, and how much does a teacher add, by the signal it adds?

For each environment (``shell``, ``orchestrator``, ``browser-sites``: the local web sites'
flows, ``browser-miniwob``: MiniWoB++ tasks) and seed, a fresh tiny student (initial weights
from that seed) is trained from scratch on the train split by each variant, and scored on the
held-out split before (untrained: the same weights for every variant of a seed) and after:

- ``grpo``: environment reward only, GRPO alone; no teacher judges, nothing is distilled;
- ``rl``: environment reward only, learned from by the recipe ``--levers`` found: GRPO, plus
  imitation of each update's own successful rollouts (``self_imitation``), plus each step
  credited with the progress the environment measured for it (``progress_coef`` 1; shell
  measures it, the others report none);
- ``rl+noisy-shaping``: ``rl``, with the noisy oracle (accuracy 0.7: each hint and verdict wrong
  30 % of the time) judging every rollout and its score fused into the reward as the reward
  service fuses it (weight 0.3, clipped at 0.5); its hints are not distilled;
- ``rl+oracle-distill``: ``rl``, with the oracle, which knows every answer, judging every rollout
  and its hints distilled at weight 0.5 (how the benchmarks on main were measured); the reward is
  the environment's.

``--sweep`` (shell): the teacher's accuracy against held-out success, on top of the recipe: a
teacher of accuracy 1.0 / 0.7 / 0.4 shaping the reward and distilled (both channels), and no
teacher (``rl``: the recipe alone).

``--levers`` (shell; on browser-sites, ``rl+typed-progress``: progress counting a right value as
soon as it is typed, not once its form is sent): what was tried to make reward alone generalise, at the same budget:
step-level credit from the environment's progress measure (``rl+progress``: the tests' state
after each edit, ``progress_coef`` 1), episodes that offer each read once per state of the code
(``/no-repeat-reads``: no loop of ``show`` or ``run the tests``), and both. On browser-sites
the levers also change the student: relational features (``rl+named-values``,
``rl+action-kinds``) and a pretrained one (``rl+minilm``: the minilm student, a frozen
all-MiniLM-L6-v2 encoder under a trained head). ``--variants a,b`` runs some of a run's variants.

The loop is the product's, in one process (the in-process kernel, ``aios_rl.local``, through
``bench/_kernel.py``'s ``train_one``), **with the comparison gate on**: every epoch also runs 2
reference runs of each task under the weights before the last update, the epoch verdict (the
task-level paired test and the per-environment degradation veto) and the campaign's decision
(``decide_epoch``) follow, and a rollback restores the weights and skips the update, as the
campaign service does. Each update reports what its episodes gave policy gradient to learn from
(``reward_signal``: tied groups, reward spread) and the trainer's own metrics (gradient norm,
entropy, KL to the weights before it), kept per epoch in the JSON.

Evaluation: one near-greedy (temperature 0.1) seeded episode per held-out task, never judged by a
teacher. Verdict on held-out **success** (the environment's outcome): the pooled paired
difference trained - untrained over (seed, task), bootstrap 95 %; ``rl_only_paired_ci_low`` per
environment is the lower end of the ``rl`` variant's interval: above 0, the student learned from
reward beyond noise. ``--seeds 3,4,5`` runs other seeds (a confirmation on seeds the levers were
not chosen on); the results path gains ``-seeds-3-4-5``.

Run from the repo root:

    .venv/bin/python bench/learning_rl.py                    # every environment (hours)
    .venv/bin/python bench/learning_rl.py --env shell        # one environment
    .venv/bin/python bench/learning_rl.py --env shell --sweep  # the teacher-accuracy sweep
    .venv/bin/python bench/learning_rl.py --env shell --levers # levers for reward alone
    .venv/bin/python bench/learning_rl.py --env browser-sites --levers --variants rl+typed-progress
    .venv/bin/python bench/learning_rl.py --env shell --quick  # a smoke run (~2 min)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import torch
from rich.console import Console

from aios_rl.envs.browser import flows as site_flows
from aios_rl.envs.shell.episode import ShellEnvConfig
from aios_rl.stats import paired_difference, wilson
from aios_rl.student import StudentBackend, new_student
from bench import _common
from bench._kernel import (
    BENCH_ENVS,
    RolloutsFor,
    Settings,
    Task,
    Teacher,
    env_hosts,
    env_splits,
    shell_rollouts,
    train_one,
)

ENVS = BENCH_ENVS


@dataclass(frozen=True)
class Variant:
    """One way of training: what the teacher contributes and whether its hints are distilled."""

    what: str
    teacher: Teacher
    distill: float = 0.0
    progress: float = 0.0
    """Step-level credit from the environment's progress measure (``progress_coef``)."""
    trainer: tuple[tuple[str, Any], ...] = ()
    """Other trainer settings of this variant (field, value)."""
    temperature: float | None = None
    """Sampling temperature of the training rollouts (None: the settings')."""
    shell: tuple[tuple[str, Any], ...] = ()
    """Shell only: ``ShellEnvConfig`` fields of this variant's episodes (training and held-out
    alike, so its untrained score is measured on the same environment)."""
    browser: tuple[tuple[str, Any], ...] = ()
    """Browser only: ``BrowserRunnerSettings`` fields of this variant's runner (training and
    held-out alike)."""
    student: tuple[tuple[str, Any], ...] = ()
    """``TinyConfig`` fields of this variant's student (``new_student("tiny", **...)``); its
    untrained score is measured with them too."""
    backend: str = "tiny"
    """The student's backend (``minilm``: a frozen pretrained sentence encoder under the tiny
    student's kind of head); its untrained score is that student's."""
    easy: bool = False
    """Site flows only: train on the first stage of the flows that have one (``flows.generate``
    with ``easy``: sign-in from the page asked for, lists whose target is in the first two
    chunks), a curriculum; held out on the full flows as every variant is."""


NO_TEACHER = Teacher(accuracy=None)
RECIPE = (("self_imitation", True),)
"""Learning from reward, as measured to work on shell (``--levers``): GRPO, plus imitation of
the update's own successful rollouts (``self_imitation``), plus each step credited with the
progress the environment measured for it (``progress_coef`` 1; shell measures it)."""
VARIANTS = {
    "grpo": Variant("environment reward only, GRPO alone (no teacher)", NO_TEACHER),
    "rl": Variant(
        "environment reward only (no teacher): GRPO + self-imitation of its own successes + "
        "step-level progress credit",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
    ),
    "rl+noisy-shaping": Variant(
        "rl, its reward shaped by the noisy oracle (accuracy 0.7, weight 0.3), no distillation",
        Teacher(accuracy=0.7, shaping=0.3),
        progress=1.0,
        trainer=RECIPE,
    ),
    "rl+oracle-distill": Variant(
        "rl, plus the oracle's hints distilled at 0.5 (it knows the answers), reward unshaped",
        Teacher(accuracy=1.0),
        distill=0.5,
        progress=1.0,
        trainer=RECIPE,
    ),
}
NO_REPEAT = (("repeat_reads", False),)
LEVERS = {
    "rl": VARIANTS["grpo"],
    "rl+progress": Variant(
        "environment reward only, each step also credited with the progress the environment "
        "measured for it (the tests' state after an edit; progress_coef 1)",
        NO_TEACHER,
        progress=1.0,
    ),
    "rl/no-repeat-reads": Variant(
        "environment reward only, on episodes that offer each read once per state of the code "
        "(repeat_reads off: no loop of reads)",
        NO_TEACHER,
        shell=NO_REPEAT,
    ),
    "rl+progress/no-repeat-reads": Variant(
        "both: step-level progress credit and each read offered once per state of the code",
        NO_TEACHER,
        progress=1.0,
        shell=NO_REPEAT,
    ),
}
"""``--levers`` (shell): the levers tried against reward alone, at the same budget."""
SITE_LEVERS = {
    "rl": VARIANTS["rl"],
    "rl+typed-progress": Variant(
        "rl, its step-level progress counting a right value as soon as it is typed (the page's "
        "unsent field values, progress_typed), not only once its form is sent",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
        browser=(("progress_typed", True),),
    ),
    "rl+named-values": Variant(
        "rl+typed-progress, its student also reading whether the task names a field right "
        'before the value typed into it (named_values: `city "Belfast"` binds Belfast to the '
        "City textbox, not to the Postcode one after it)",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
        browser=(("progress_typed", True),),
        student=(("named_values", True),),
    ),
    "rl+action-kinds": Variant(
        "rl+named-values, its student picking a kind of action before one of that kind "
        "(kind_balance: a form's 80 fills no longer drown its one scroll) and reading each "
        "candidate's kind and whether the page shows what the task names (page_context)",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
        browser=(("progress_typed", True),),
        student=(("named_values", True), ("page_context", True), ("kind_balance", True)),
    ),
    "rl+minilm": Variant(
        "rl+typed-progress with the minilm student (all-MiniLM-L6-v2, frozen, under a trained "
        "head): a pretrained encoder in which a task's words and a page's may match by meaning, "
        "not only by the n-grams a held-out template shares with the train ones",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
        browser=(("progress_typed", True),),
        backend="minilm",
    ),
}
"""``--levers`` (browser-sites): the levers tried against reward alone, at the same budget."""
EASY = {
    "grpo+easy-flows": Variant(
        "environment reward only, GRPO alone, trained on the flows' first stages (a curriculum: "
        "sign-in from the page asked for, lists whose target is in the first two chunks)",
        NO_TEACHER,
        easy=True,
    ),
    "rl+easy-flows": Variant(
        "environment reward only (no teacher), the rl recipe (GRPO + self-imitation + "
        "step-level progress credit), trained on the flows' first stages (sign-in from the page "
        "asked for, lists whose target is in the first two chunks)",
        NO_TEACHER,
        progress=1.0,
        trainer=RECIPE,
        easy=True,
    ),
}
"""Site flows: a curriculum. No training rollout of the full flows ever succeeds (every group
tied at 0: nothing for policy gradient), so the student is trained on the flows' first stages,
where a few rollouts succeed, and held out on the full flows."""
SITE_LEVERS.update(EASY)
SWEEP = {
    **{
        f"accuracy {a:g}": Variant(
            f"rl, plus a teacher of accuracy {a:g}: shaping (0.3) and distillation (0.5)",
            Teacher(accuracy=a, shaping=0.3),
            distill=0.5,
            progress=1.0,
            trainer=RECIPE,
        )
        for a in (1.0, 0.7, 0.4)
    },
    "none": VARIANTS["rl"],
}
"""``--sweep`` (shell): the teacher's accuracy against held-out success, every row on top of the
recipe (``rl``), ``none`` the recipe alone."""

FULL = {
    "shell": Settings(
        seeds=(0, 1, 2), epochs=15, tasks_per_epoch=8, group_size=4, train_tasks=100,
        heldout_tasks=50, learning_rate=3e-3,
    ),
    "orchestrator": Settings(
        seeds=(0, 1, 2), epochs=20, tasks_per_epoch=16, group_size=8, train_tasks=400,
        heldout_tasks=100, learning_rate=1e-3,
    ),
    "browser-sites": Settings(
        seeds=(0, 1, 2), epochs=10, tasks_per_epoch=8, group_size=4, train_tasks=40,
        heldout_tasks=15, learning_rate=3e-3,
    ),
    "browser-miniwob": Settings(
        seeds=(0, 1, 2), epochs=10, tasks_per_epoch=8, group_size=4, train_tasks=48,
        heldout_tasks=32, learning_rate=3e-3,
    ),
}  # fmt: skip
"""The learning benchmarks' settings on main (``bench/learning.py``), the orchestrator's halved
in epochs and held-out tasks (it runs three variants plus reference runs); the browser kinds'
doubled in epochs (5 epochs of 6 tasks left every variant within noise of untrained, on 12
held-out tasks a seed), MiniWoB++'s held-out split two seeds of each of its 16 tasks."""
QUICK = {
    env: replace(s, seeds=(0,), epochs=2, tasks_per_epoch=3, group_size=2, heldout_tasks=6)
    for env, s in FULL.items()
}


@dataclass(frozen=True)
class Plan:
    """What one run measures: environments, variants, settings per environment."""

    envs: tuple[str, ...]
    variants: dict[str, Variant]
    settings: dict[str, Settings]


@contextlib.asynccontextmanager
async def own_rollouts(
    env: str, v: Variant, shared: RolloutsFor, tasks: Sequence[Task], workers: int
) -> AsyncIterator[RolloutsFor]:
    """The rollouts of variant ``v``: its own environment when it changes one (shell episode
    config, browser runner settings), else ``shared``."""
    if env == "shell" and v.shell:
        yield shell_rollouts(tasks, workers, ShellEnvConfig(**dict(v.shell)))  # type: ignore[arg-type]
    elif env.startswith("browser") and v.browser:
        async with env_hosts(env, tasks, workers, v.browser) as own:
            yield own
    else:
        yield shared


async def measure(plan: Plan, log: Callable[[str], None]) -> dict[str, dict[str, dict]]:
    """Per environment, per variant, per seed: ``train_one``'s result (gate on)."""
    torch.set_num_threads(1)
    out: dict[str, dict[str, dict]] = {}
    for env in plan.envs:
        s = plan.settings[env]
        train, heldout = await env_splits(env, s.train_tasks, s.heldout_tasks, log)
        log(f"{env}: {len(train)} train and {len(heldout)} held-out tasks")
        easy: list[Task] = []
        if env == "browser-sites" and any(v.easy for v in plan.variants.values()):
            easy = list(site_flows.generate(s.train_tasks, 0, "train", easy=True))
            log(f"{env}: {len(easy)} train tasks of the flows' first stages")
        out[env] = {}
        every = [*train, *heldout, *easy]
        async with env_hosts(env, every, s.workers) as rollouts_for:
            for name, v in plan.variants.items():
                out[env][name] = {}
                async with own_rollouts(env, v, rollouts_for, every, s.workers) as here:
                    for seed in s.seeds:
                        out[env][name][str(seed)] = await train_one(
                            seed,
                            s if v.temperature is None else replace(s, temperature=v.temperature),
                            easy if v.easy and easy else train,
                            heldout,
                            here,
                            lambda line, e=env, n=name: log(f"{e} {n}: {line}"),
                            trainer={
                                "distill_coef": v.distill,
                                "progress_coef": v.progress,
                                **dict(v.trainer),
                            },
                            teacher=v.teacher,
                            gate=True,
                            student=student_of(v),
                        )
                        if env == "browser-sites":  # held-out success flow by flow
                            out[env][name][str(seed)]["heldout_flows"] = [t.flow for t in heldout]
    return out


def student_of(v: Variant) -> Callable[[int], StudentBackend] | None:
    """How ``v``'s student is made from a seed (``None``: the default tiny student)."""
    if not v.student and v.backend == "tiny":
        return None
    settings = dict(v.student)
    return lambda seed: new_student(v.backend, seed=seed, **settings)


def pooled(runs: dict[str, dict], key: str) -> list[float]:
    return [x for seed in sorted(runs) for x in runs[seed][key]]


def summarize(runs: dict[str, dict]) -> dict[str, Any]:
    """One variant's numbers pooled over seeds: success before/after with Wilson intervals, the
    paired difference with its bootstrap interval, mean rewards, the gate's decisions and the
    updates' diagnostics (means over epochs and seeds)."""
    before, after = pooled(runs, "before"), pooled(runs, "after")
    d, lo, hi = paired_difference(before, after)
    gate = [g for r in runs.values() for g in r["gate"]]
    updates = [u for r in runs.values() for u in r["updates"]]
    keys = ("tied_group_share", "group_reward_std", "grad_norm", "entropy", "kl_ref")
    keys += tuple(sorted({k for u in updates for k in u if k.startswith(("share:", "credit:"))}))
    return {
        "success_before": statistics.fmean(before),
        "success_after": statistics.fmean(after),
        "wilson_before": list(wilson(int(sum(before)), len(before))),
        "wilson_after": list(wilson(int(sum(after)), len(after))),
        "paired_difference": d,
        "paired_ci_low": lo,
        "paired_ci_high": hi,
        "reward_before": statistics.fmean(pooled(runs, "reward_before")),
        "reward_after": statistics.fmean(pooled(runs, "reward_after")),
        "pairs": len(before),
        "rollbacks": sum(g["decision"].startswith("rollback") for g in gate),
        "vetoes": sum(bool(g["vetoed_by"]) for g in gate),
        "epochs_judged": len(gate),
        "updates": len(updates),
        "heldout_profile": {
            when: _mean_profiles([r["heldout_profile"][when] for r in runs.values()])
            for when in ("before", "after")
        },
        "diagnostics": {
            k: statistics.fmean(u[k] for u in updates if k in u)
            for k in keys
            if any(k in u for u in updates)
        },
        **({"by_flow": by_flow(runs)} if all("heldout_flows" in r for r in runs.values()) else {}),
    }


def by_flow(runs: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Held-out success before and after, flow by flow (site flows), pooled over seeds."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in runs.values():
        for flow, b, a in zip(r["heldout_flows"], r["before"], r["after"], strict=True):
            cell = out.setdefault(flow, {"before": [], "after": []})
            cell["before"].append(b)
            cell["after"].append(a)
    return {
        flow: {
            "before": statistics.fmean(c["before"]),
            "after": statistics.fmean(c["after"]),
            "pairs": len(c["before"]),
        }
        for flow, c in sorted(out.items())
    }


def _mean_profiles(profiles: list[dict[str, float]]) -> dict[str, float]:
    """Seeds' held-out profiles averaged key by key (a kind a seed never took counts 0)."""
    keys = sorted({k for p in profiles for k in p})
    return {k: statistics.fmean(p.get(k, 0.0) for p in profiles) for k in keys}


def direction(lo: float, hi: float) -> str:
    if lo > 0:
        return "better beyond noise"
    if hi < 0:
        return "worse beyond noise"
    return "no difference beyond noise"


# -- --combine: one table over the per-environment runs -------------------------------------------


def combine(results: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``learning_rl.md`` and ``.json`` from per-environment results (file name -> its JSON):
    each environment's variants (a later run of a variant replaces an earlier one), the paired
    difference to untrained, ``rl_only_paired_ci_low`` per environment and where every number
    came from. Pure."""
    known = {env: {**VARIANTS, **(SITE_LEVERS if env == "browser-sites" else {})} for env in ENVS}
    chosen: dict[str, dict[str, tuple[str, dict[str, Any], str]]] = {}
    hinted: dict[tuple[str, str], float] = {}
    """Largest share of an update's episodes that carried a teacher's hint, per row."""
    for name, payload in sorted(results.items(), key=lambda kv: kv[1].get("date", "")):
        for env in ENVS:
            for variant, sm in (payload.get(env) or {}).items():
                if isinstance(sm, dict) and variant in known[env]:
                    code = (payload.get("machine") or {}).get("code", "")
                    label = f"{name}, code {code}" if code else name
                    chosen.setdefault(env, {})[variant] = (label, sm, payload.get("date", ""))
                    runs = ((payload.get("runs") or {}).get(env) or {}).get(variant) or {}
                    shares = [
                        u.get("hinted_share", 0.0) for r in runs.values() for u in r["updates"]
                    ]
                    hinted[env, variant] = max(shares, default=float("nan"))
    lines = [
        "# Learning from reward: every environment (tiny student unless a row says otherwise, gate on)",
        "",
        "Combined by `python bench/learning_rl.py --combine` from the per-environment runs "
        "(each row names its source file, which holds the machine, settings, per-seed runs and "
        "per-epoch diagnostics, and the commit it ran: rows of different runs may differ in "
        "code). Every run goes through the in-process kernel (aios_rl.local), "
        "the product's own loop. Held-out success is the environment's outcome; held-out "
        "episodes are never judged by a teacher.",
        "",
        "| environment | variant | learns from | held-out success, untrained -> trained | "
        "paired difference [95 % CI] | verdict | held-out mean reward | gate rollbacks | source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, Any] = {}
    for env in ENVS:
        rows = chosen.get(env, {})
        if not rows:
            lines.append(f"| {env} | (not measured yet) | | | | | | | |")
            continue
        summary[env] = {}
        for variant in known[env]:
            if variant not in rows:
                if variant in VARIANTS:
                    lines.append(f"| {env} | {variant} | (not measured yet) | | | | | | |")
                continue
            source, sm, date = rows[variant]
            summary[env][variant] = {**sm, "source": source, "date": date}
            wb, wa = sm["wilson_before"], sm["wilson_after"]
            lines.append(
                f"| {env} | `{variant}` | {known[env][variant].what} | "
                f"{wb[0]:.1%} [{wb[1]:.0%}, {wb[2]:.0%}] -> {wa[0]:.1%} [{wa[1]:.0%}, {wa[2]:.0%}]"
                f" ({sm['pairs']} pairs) | {sm['paired_difference']:+.3f} "
                f"[{sm['paired_ci_low']:+.3f}, {sm['paired_ci_high']:+.3f}] | "
                f"{direction(sm['paired_ci_low'], sm['paired_ci_high'])} | "
                f"{_reward_change(sm)} | "
                f"{sm['rollbacks']} in {sm['epochs_judged']} epochs | `{source}` |"
            )
        if "rl" in summary[env]:
            summary[env]["rl_only_paired_ci_low"] = summary[env]["rl"]["paired_ci_low"]
    silent = [
        f"`{variant}` on {env}"
        for env in ENVS
        for variant in chosen.get(env, {})
        if known[env][variant].teacher.accuracy is not None and hinted.get((env, variant)) == 0.0
    ]
    if silent:
        lines += [
            "",
            "The teacher gave no hint in any update of "
            + ", ".join(silent)
            + " (it judged none of their episodes): those rows learned from the environment's "
            "reward alone, as `rl` did.",
        ]
    lines += [
        "",
        "## The goal: RL from reward alone above untrained beyond noise",
        "",
        "Per environment, the lower end of the paired interval of every row that learns from the "
        "environment's reward alone (no teacher, nothing distilled); the goal is met when one of "
        "them is above 0. `rl_only_paired_ci_low` is the `rl` recipe's.",
        "",
    ]
    for env in ENVS:
        rows = summary.get(env, {})
        lows = {
            v: sm["paired_ci_low"]
            for v, sm in rows.items()
            if v in known[env] and reward_only(known[env][v])
        }
        if not lows:
            lines.append(f"- {env}: not measured yet")
            continue
        best = max(lows, key=lambda v: lows[v])
        rows["reward_only_best"] = {"variant": best, "paired_ci_low": lows[best]}
        shown = ", ".join(f"`{v}` {low:+.3f}" for v, low in lows.items())
        verdict = f"{'met' if lows[best] > 0 else '**not met**'} ({shown})"
        if env.startswith("browser") and "grpo" in lows:
            verdict += "; browser episodes learn by GRPO alone by default (`--env-recipe`)"
        lines.append(f"- {env}: {verdict}")
    return "\n".join(lines) + "\n", {"title": lines[0][2:], "sources": sorted(results), **summary}


def reward_only(v: Variant) -> bool:
    """Whether ``v`` learns from the environment's reward alone: no teacher, nothing distilled."""
    return v.teacher.accuracy is None and v.distill == 0.0


def _reward_change(sm: dict[str, Any]) -> str:
    """The environment's mean held-out reward before -> after (partial credit included)."""
    if "reward_before" not in sm or "reward_after" not in sm:
        return ""
    return f"{sm['reward_before']:.3f} -> {sm['reward_after']:.3f}"


def combine_files(directory: Path) -> tuple[Path, Path]:
    """Write ``learning_rl.md`` / ``.json`` in ``directory`` from its ``learning_rl-<env>*.json``
    (confirmation runs on other seeds and quick runs left out)."""
    found = {
        p.name: json.loads(p.read_text())
        for p in sorted(directory.glob("learning_rl-*.json"))
        if "-seeds-" not in p.name and "-quick" not in p.name
    }
    if not found:
        raise SystemExit(f"--combine: no learning_rl-<env>*.json in {directory}")
    md, payload = combine(found)
    md_path, json_path = directory / "learning_rl.md", directory / "learning_rl.json"
    md_path.write_text(md)
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return md_path, json_path


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--combine" in argv:
        if len(argv) != 1:
            raise SystemExit("--combine takes no other argument")
        for path in combine_files(Path(__file__).parent / "results"):
            print(f"wrote {path}")
        return 0
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", choices=ENVS, default=None, help="one environment (default: all)")
    pre.add_argument(
        "--sweep", action="store_true", help="the teacher-accuracy sweep (with --env shell)"
    )
    pre.add_argument(
        "--levers",
        action="store_true",
        help="the levers of RL from reward (with --env shell or --env browser-sites)",
    )
    pre.add_argument(
        "--variants", default=None, help="comma-separated variants of the run (default: all)"
    )
    pre.add_argument(
        "--seeds",
        type=_common._seed_list,
        default=None,
        help="comma-separated seeds instead of the settings' (the default results path gains "
        "a -seeds-<list> suffix)",
    )
    pre.add_argument(
        "--combine",
        action="store_true",
        help="no run: write learning_rl.md / .json from each variant's latest results",
    )
    known, rest = pre.parse_known_args(argv)
    envs = (known.env,) if known.env else ENVS
    if known.sweep and known.levers:
        raise SystemExit("--sweep and --levers are two runs: choose one")
    if known.sweep and envs != ("shell",):
        raise SystemExit("--sweep runs on shell: add --env shell")
    if known.levers and envs not in (("shell",), ("browser-sites",)):
        raise SystemExit(
            "--levers runs on shell or browser-sites: add --env shell or --env browser-sites"
        )
    levers = SITE_LEVERS if envs == ("browser-sites",) else LEVERS
    variants = SWEEP if known.sweep else levers if known.levers else VARIANTS
    if known.variants is not None:
        asked = [v.strip() for v in known.variants.split(",") if v.strip()]
        unknown = [v for v in asked if v not in variants]
        if unknown or not asked:
            raise SystemExit(
                f"--variants: unknown {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(variants)}"
            )
        variants = {v: variants[v] for v in asked}
    name = (
        "learning_rl_sweep"
        if known.sweep
        else "learning_rl_levers"
        if known.levers
        else "learning_rl"
    )
    if known.env and not known.sweep and not (known.levers and known.env == "shell"):
        name += f"-{known.env}"
    args, settings, out = _common.bench_args(
        name, __doc__, "~2 min a variant", full=FULL, quick=QUICK, argv=rest, parents=[pre]
    )
    if known.seeds is not None:
        settings = {env: replace(x, seeds=known.seeds) for env, x in settings.items()}
        out = _common.variant_path(args, out, "seeds-" + "-".join(map(str, known.seeds)))
    plan = Plan(envs, variants, settings)
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: measure(plan, log), ["torch", "msgspec", "playwright"], console
    )
    rows: list[_common.Row] = []
    summary: dict[str, dict[str, Any]] = {}
    notes = [
        "Signals: every row names what its student learned from. The oracle knows every "
        "answer (a test double for a strong teacher); the noisy oracle is it, wrong on purpose "
        "at the stated rate. Held-out episodes are never judged by a teacher.",
        "The product's own loop: every run goes through the in-process kernel "
        "(aios_rl.local: collect_epoch, train_epoch, Gate), as the campaign runs it.",
        "Gate on: 2 reference runs a task an epoch, the epoch verdict and decide_epoch; a "
        "rollback restores the weights before the update and skips that epoch's update.",
    ]
    for env in envs:
        summary[env] = {}
        for variant, runs in res[env].items():
            sm = summarize(runs)
            summary[env][variant] = sm
            rows.append(
                _common.Row(
                    f"{env}, {variant}: held-out success, pooled over {len(runs)} seeds",
                    "rate",
                    sm["success_after"],
                    sm["success_before"],
                    samples={"ours": pooled(runs, "after"), "baseline": pooled(runs, "before")},
                )
            )
            notes.append(
                f"{env}, {variant} ({plan.variants[variant].what}): held-out success "
                f"{sm['success_before']:.1%} -> {sm['success_after']:.1%}, paired "
                f"{sm['paired_difference']:+.3f} [{sm['paired_ci_low']:+.3f}, "
                f"{sm['paired_ci_high']:+.3f}]: {direction(sm['paired_ci_low'], sm['paired_ci_high'])}; "
                f"gate: {sm['rollbacks']} rollback(s) in {sm['epochs_judged']} epochs."
                + (
                    " By flow (held-out success before -> after): "
                    + ", ".join(
                        f"{flow} {c['before']:.0%} -> {c['after']:.0%}"
                        for flow, c in sm["by_flow"].items()
                    )
                    + "."
                    if "by_flow" in sm
                    else ""
                )
            )
        if "rl" in summary[env]:
            summary[env]["rl_only_paired_ci_low"] = summary[env]["rl"]["paired_ci_low"]  # type: ignore[assignment]
    _common.print_rows("learning from reward", rows, "trained", "untrained", console)
    _common.report(
        console,
        out,
        title="Learning benchmark: learning from reward, signal by signal (tiny student unless a row says otherwise, gate on)",
        rows=rows,
        ours="trained",
        baseline="untrained",
        machine=machine,
        settings={env: asdict(settings[env]) for env in envs},
        notes=notes,
        elapsed_s=elapsed,
    )
    json_path = out.with_suffix(".json")
    payload = json.loads(json_path.read_text())
    json_path.write_text(json.dumps({**payload, **summary, "runs": res}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
