"""Campaign summaries for people: one table row per epoch, from the ledger's records. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from contracts import EnvironmentRecipe, EpochRecord, TrainerSettings

__all__ = [
    "contrast",
    "epoch_table",
    "learning_signals",
    "rollout_table",
    "signals_line",
    "success_rate",
]

KNOWS_ANSWERS = frozenset({"oracle"})
"""Teachers that know every task's answer: test doubles for a strong teacher, never a claim
about a real one."""


def learning_signals(trainer: TrainerSettings, teacher: str) -> dict[str, str]:
    """What a campaign's student learns from, each signal named: the environment's reward
    (always), the teacher's shaping of it (the reward service fuses the score of ``teacher``,
    the gateway's backend; ``none``: no teacher), distillation of the teacher's hints (the
    trainer's ``distill_coef``; off by default), imitation of the student's own successful
    rollouts (``self_imitation``) and step-level credit from the environment's progress
    measure (``progress_coef``), reward signals both; ``per_environment``, the environments
    whose own recipe replaces those two (``by_environment``)."""
    label = teacher if teacher not in KNOWS_ANSWERS else f"{teacher}, which knows the answers"
    taught = teacher not in ("", "none")
    return {
        "environment_reward": "yes",
        "teacher_shaping": f"yes ({label})" if taught else "no (no teacher)",
        "hint_distillation": (
            f"weight {trainer.distill_coef:g} ({label})"
            if trainer.distill_coef > 0 and taught
            else "off"
        ),
        "self_imitation": (
            f"weight {trainer.imitation_coef:g} (its own successes)"
            if trainer.self_imitation and trainer.imitation_coef > 0
            else "off"
        ),
        "step_progress": (
            f"weight {trainer.progress_coef:g} (the environment's)"
            if trainer.progress_coef > 0
            else "off"
        ),
        "per_environment": "; ".join(
            f"{env}: {_recipe_words(trainer, r)}"
            for env, r in sorted(trainer.by_environment.items())
        )
        or "none",
    }


def _recipe_words(trainer: TrainerSettings, r: EnvironmentRecipe) -> str:
    si = trainer.self_imitation if r.self_imitation is None else r.self_imitation
    pc = trainer.progress_coef if r.progress_coef is None else r.progress_coef
    if not si and pc == 0:
        return "GRPO alone"
    parts = [f"self-imitation {'on' if si else 'off'}", f"step progress {pc:g}"]
    return ", ".join(parts)


def signals_line(trainer: TrainerSettings, teacher: str) -> str:
    """:func:`learning_signals` as one line for people."""
    s = learning_signals(trainer, teacher)
    extra = "".join(
        f"; {name}: {s[key]}"
        for key, name in (
            ("self_imitation", "self-imitation"),
            ("step_progress", "step progress"),
            ("per_environment", "per environment"),
        )
        if s[key] not in ("off", "none")
    )
    return (
        f"learns from: environment reward; teacher shaping: {s['teacher_shaping']}; "
        f"hint distillation: {s['hint_distillation']}{extra}"
    )


def success_rate(record: EpochRecord) -> float | None:
    """Share of the epoch's rollouts that succeeded (all environments), ``None`` without any."""
    n = sum(s.episodes for s in record.per_env.values())
    return sum(s.success for s in record.per_env.values()) / n if n else None


_SHORT = {"active": "active", "pre_update_ref": "pre", "last_stable": "stable"}


def contrast(record: EpochRecord) -> tuple[float, float] | None:
    """Mean group contrast ``I(Y)`` of the epoch's groups before and after continuations
    (groups dropped from the update included), ``None`` without groups."""
    if not record.groups:
        return None
    n = len(record.groups)
    return (
        sum(g.before for g in record.groups) / n,
        sum(g.after for g in record.groups) / n,
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def epoch_table(
    records: Sequence[EpochRecord], *, title: str = "", heldout: dict[int, float] | None = None
) -> Table:
    """Per epoch: episodes received of scheduled, rollout success (train) and held-out score,
    mean reward, verdict, decision, pointers moved, the rollouts' verdicts better / same / worse /
    failed (the replay lanes they feed) and the checkpoint training made."""
    table = Table(title=title or None)
    for col, right in (
        ("epoch", True),
        ("episodes", True),
        ("train", True),
        ("held-out", True),
        ("reward", True),
        ("verdict", False),
        ("decision", False),
        ("moved", False),
        ("b/s/w/f", False),
        ("new ckpt", False),
    ):
        table.add_column(col, justify="right" if right else "left", no_wrap=True)
    for r in records:
        n = sum(s.episodes for s in r.per_env.values())
        reward = sum(s.reward_sum for s in r.per_env.values()) / n if n else None
        moves = ",".join(_SHORT[m.pointer] for m in r.pointer_moves) or "-"
        lanes = "/".join(
            str(r.lane_counts.get(k, 0)) for k in ("better", "same", "worse", "comparison_failed")
        )
        table.add_row(
            str(r.epoch),
            f"{r.received}/{r.scheduled}",
            _pct(success_rate(r)),
            _pct((heldout or {}).get(r.epoch)),
            "-" if reward is None else f"{reward:.3f}",
            r.verdict or "-",
            (r.decision or "-").replace("rollback_", "rollback "),
            moves,
            lanes,
            (r.new_checkpoint or "-")[:8],
        )
    return table


def env_table(records: Sequence[EpochRecord], *, title: str = "") -> Table:
    """Per epoch and environment: rollouts, success, mean reward and the rollouts' verdicts
    better / same / worse / failed (the replay lanes they feed); the epoch's one verdict and
    decision for the whole student on its first row."""
    table = Table(title=title or None)
    for col in ("epoch", "env", "episodes", "success", "reward", "b/s/w/f", "verdict", "decision"):
        table.add_column(col, justify="left" if col in ("env", "verdict", "decision") else "right",
                         no_wrap=True)  # fmt: skip
    for r in records:
        for i, (env, s) in enumerate(sorted(r.per_env.items())):
            lanes = "/".join(
                str(s.verdicts.get(k, 0)) for k in ("better", "same", "worse", "comparison_failed")
            )
            table.add_row(
                str(r.epoch) if i == 0 else "",
                env,
                str(s.episodes),
                _pct(s.success / s.episodes if s.episodes else None),
                f"{s.mean_reward:.3f}" if s.episodes else "-",
                lanes,
                (r.verdict or "-") if i == 0 else "",
                (r.decision or "-").replace("rollback_", "rollback ") if i == 0 else "",
            )
    return table


def rollout_table(records: Sequence[EpochRecord], *, title: str = "") -> Table:
    """Per epoch, what its rollouts cost under the campaign's strategy: rollouts from the start
    state and continuations, environment steps sampled and replayed, policy calls, planning
    rounds, the groups' mean reward contrast ``I(Y)`` before and after continuations (and how
    many groups were dropped from the update), and the collection's wall time."""
    table = Table(title=title or None)
    for col in ("epoch", "strategy", "base", "cont.", "sampled", "replayed", "calls", "rounds",
                "I(Y) before", "after", "dropped", "wall"):  # fmt: skip
        table.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    for r in records:
        a = r.rollouts
        i_y = contrast(r)
        table.add_row(
            str(r.epoch),
            a.strategy,
            str(a.base),
            str(a.continuations),
            str(a.steps_sampled),
            str(a.steps_replayed),
            str(a.policy_calls),
            str(a.rounds),
            "-" if i_y is None else f"{i_y[0]:.4f}",
            "-" if i_y is None else f"{i_y[1]:.4f}",
            str(sum(g.dropped for g in r.groups)),
            f"{a.wall_s:.0f}s",
        )
    return table
