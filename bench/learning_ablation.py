"""Learning ablations (``bench/learning_ablation.py``, on ``bench/learning.py``'s runs): why does the tiny student stop far below
the oracle on held-out shell tasks, and what raises it at the demo's episode budget?

Every variant changes one thing against the demo's configuration (the ``baseline`` variant):
the learning rate, the student's capacity, an entropy bonus, the teacher hints' weight, the
advantages' normalisation, the number of update passes, what the observation shows. Each variant
trains a fresh tiny student per seed with ``bench._kernel.train_one`` (the in-process kernel:
GRPO groups at temperature 1 in the real sandbox, oracle hints distilled, one update per
epoch with the trainer service's configuration) for the demo's budget (``aios-rl demo``: 4 epochs
x 16 tasks x 4 rollouts = 256 episodes per seed, learning rate 5e-3) and scores it near-greedily
(T=0.1, seeded) on the same held-out tasks. Every variant's students start from the same weights
per seed (a capacity change aside) and see the same tasks in the same order.

Reported per variant: pooled held-out success (Wilson 95 %), the paired difference against the
baseline variant over (seed, task) with a bootstrap 95 % interval, the untrained score, the mean
rollout success per epoch, and wall time. ``--variants a,b`` runs a subset (the baseline always
runs: every difference is measured against it in the same run).

Run from the repo root:

    .venv/bin/python bench/learning_ablation.py          # ~35 min; bench/results/learning_ablation.md
    .venv/bin/python bench/learning_ablation.py --quick  # ~1 min smoke run (one seed, one epoch)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

from rich.console import Console

from aios_rl.envs.shell.episode import ShellEnvConfig
from aios_rl.stats import paired_difference, wilson
from aios_rl.student.base import StudentBackend
from aios_rl.student.tiny import TinyConfig, TinyStudent
from bench import _common
from bench._kernel import Settings
from bench.learning import measure

DEMO = Settings(
    seeds=(0, 1, 2),
    epochs=4,
    tasks_per_epoch=16,
    group_size=4,
    train_tasks=60,
    heldout_tasks=50,
    learning_rate=5e-3,
)
"""The demo's budget and learning rate (``aios-rl demo``'s defaults); 50 held-out tasks (the demo
scores 30) for tighter intervals."""
QUICK = Settings(
    seeds=(0,),
    epochs=1,
    tasks_per_epoch=4,
    group_size=2,
    train_tasks=12,
    heldout_tasks=8,
    learning_rate=5e-3,
)


@dataclass(frozen=True)
class Variant:
    """One change against the baseline."""

    name: str
    what: str
    learning_rate: float | None = None
    trainer: dict[str, Any] = field(default_factory=dict)
    student: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    score_on_train: bool = False
    """A diagnostic, not a change: the baseline scored on train tasks instead of held-out."""


VARIANTS = (
    Variant("baseline", "the demo's configuration"),
    Variant("lr-1e-2", "learning rate 1e-2 (baseline 5e-3)", learning_rate=1e-2),
    Variant("lr-2e-3", "learning rate 2e-3", learning_rate=2e-3),
    Variant(
        "capacity-x2",
        "embedding 128, hidden 256 (baseline 64, 128)",
        student={"embed_dim": 128, "hidden_dim": 256},
    ),
    Variant("entropy-0.01", "entropy bonus 0.01 (baseline 0)", trainer={"entropy_coef": 0.01}),
    Variant(
        "hints-off",
        "no teacher hints distilled (weight 0; baseline 0.5)",
        trainer={"distill_coef": 0.0},
    ),
    Variant("hints-2", "teacher hints' weight 2.0", trainer={"distill_coef": 2.0}),
    Variant(
        "no-adv-std",
        "advantages centred, not divided by the group's std",
        trainer={"std_normalize": False},
    ),
    Variant(
        "passes-8", "8 passes over each epoch's batch (baseline 4)", trainer={"update_epochs": 8}
    ),
    Variant(
        "obs-short",
        "command output clipped to 200 characters (baseline 2,400)",
        env={"observation_chars": 200},
    ),
    Variant(
        "no-reoffer",
        "an edit undone is not offered again (the search over edits never repeats)",
        env={"offer_undone": False},
    ),
    Variant(
        "obs-undone", "the observation names the edits tried and undone", env={"show_undone": True}
    ),
)
DIAGNOSTICS = (
    Variant(
        "scored-on-train",
        "the baseline scored on 50 tasks of its train split (most seen in training), not held-out",
        score_on_train=True,
    ),
    Variant(
        "combined",
        "capacity x2, entropy bonus 0.01, output clipped to 200 characters, undone edits not "
        "re-offered (the four best single changes together)",
        trainer={"entropy_coef": 0.01},
        student={"embed_dim": 128, "hidden_dim": 256},
        env={"observation_chars": 200, "offer_undone": False},
    ),
)
"""Run on demand (``--variants``): what the ablation table suggested looking at next."""
BY_NAME = {v.name: v for v in (*VARIANTS, *DIAGNOSTICS)}


def student_factory(v: Variant) -> Callable[[int], StudentBackend] | None:
    if not v.student:
        return None
    return lambda seed: TinyStudent(TinyConfig(seed=seed, **v.student))


async def run_variants(
    s: Settings, variants: list[Variant], log: Callable[[str], None]
) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for v in variants:
        log(f"-- {v.name}: {v.what}")
        settings = replace(s, learning_rate=v.learning_rate or s.learning_rate)
        out[v.name] = await measure(
            settings,
            lambda line, n=v.name: log(f"{n}: {line}"),
            student=student_factory(v),
            trainer=v.trainer,
            env=ShellEnvConfig(**v.env) if v.env else None,
            score_on_train=v.score_on_train,
        )
    return out


def pooled(r: dict, key: str) -> list[float]:
    return [x for seed in sorted(r) for x in r[seed][key]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--variants", default="", help="comma-separated subset of variants")
    known, rest = parser.parse_known_args(argv)
    names = [n for n in known.variants.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(
            f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(BY_NAME)}"
        )
    variants = [BY_NAME["baseline"]] + [BY_NAME[n] for n in names if n != "baseline"]
    if not names:
        variants = list(VARIANTS)
    _, s, out = _common.bench_args(
        "learning_ablation", __doc__, "~1 min", full=DEMO, quick=QUICK, argv=rest, parents=[parser]
    )
    console = Console()
    res, machine, elapsed = _common.run(
        lambda log: run_variants(s, variants, log), ["torch"], console
    )
    rows, notes = summarise(res, variants, s)
    _common.print_rows(
        "learning ablations: variant vs baseline", rows, "variant", "baseline", console
    )
    for n in notes:
        console.print(n)
    _common.report(
        console,
        out,
        title="Learning ablations: the tiny student on held-out shell tasks at the demo's budget",
        rows=rows,
        ours="variant",
        baseline="baseline",
        machine=machine,
        settings={**asdict(s), "seeds": list(s.seeds), "variants": [asdict(v) for v in variants]},
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


def summarise(
    res: dict[str, dict], variants: list[Variant], s: Settings
) -> tuple[list[_common.Row], list[str]]:
    """One row per variant (held-out success pooled over seeds, against the baseline's) and a
    note per variant with its interval, paired difference, untrained score and train curve."""
    base = pooled(res["baseline"], "after")
    rows: list[_common.Row] = []
    notes: list[str] = []
    episodes = s.epochs * s.tasks_per_epoch * s.group_size
    for v in variants:
        r = res[v.name]
        after, before = pooled(r, "after"), pooled(r, "before")
        rows.append(
            _common.Row(
                f"{v.name}: held-out success, pooled over seeds",
                "rate",
                statistics.fmean(after),
                statistics.fmean(base),
                samples={"ours": after, "baseline": base},
            )
        )
        a, b = wilson(int(sum(after)), len(after)), wilson(int(sum(before)), len(before))
        curve = [statistics.fmean(r[seed]["train_curve"][e] for seed in r) for e in range(s.epochs)]
        wall = sum(sum(r[seed]["seconds"].values()) for seed in r)
        note = (
            f"{v.name} ({v.what}): trained {a.pct()}, untrained {b.pct()}; rollout success per "
            f"epoch (mean over seeds) {' '.join(f'{x:.0%}' for x in curve)}; {wall:.0f} s."
        )
        if v.score_on_train:
            note += " Scored on other tasks than the baseline: no paired difference."
        elif v.name != "baseline":
            d, lo, hi = paired_difference(base, after)
            verdict = "better" if lo > 0 else "worse" if hi < 0 else "no difference"
            note += (
                f" Against the baseline: {d:+.3f} [{lo:+.3f}, {hi:+.3f}] ({verdict} beyond noise)."
            )
        notes.append(note)
    notes += [
        f"Budget per seed: {s.epochs} epochs x {s.tasks_per_epoch} tasks x {s.group_size} "
        f"rollouts = {episodes} training episodes; {s.heldout_tasks} held-out tasks, one "
        f"near-greedy episode each, before and after; seeds {list(s.seeds)}.",
        "ratio = variant / baseline pooled held-out success; the paired differences (bootstrap "
        "95 % over (seed, task)) say which are beyond noise.",
    ]
    return rows, notes


if __name__ == "__main__":
    raise SystemExit(main())
