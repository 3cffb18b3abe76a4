"""Campaign summaries for people: one table row per epoch, from the ledger's records. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from contracts import EpochRecord

__all__ = ["epoch_table", "success_rate"]


def success_rate(record: EpochRecord) -> float | None:
    """Share of the epoch's rollouts that succeeded (all environments), ``None`` without any."""
    n = sum(s.episodes for s in record.per_env.values())
    return sum(s.success for s in record.per_env.values()) / n if n else None


_SHORT = {"active": "active", "pre_update_ref": "pre", "last_stable": "stable"}


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
