"""A campaign's report as PNG plots and a Markdown summary (``aios-rl report``): pure functions
of the ledger's epoch records and held-out scores, drawn with matplotlib's Agg canvas (no
display, no global pyplot state).

The figures: success over epochs (rollouts per environment, held-out where measured), mean
reward over epochs, the comparison's verdicts per epoch with each epoch's decision, the replay
lanes the epochs fed (per environment), and the strategy's accounting (base rollouts,
continuations, policy calls, reference runs).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from contracts import EpochRecord, HeldoutScore

__all__ = ["CAPTIONS", "DPI", "FIGURE_SIZE", "figures", "markdown", "write_report"]

FIGURE_SIZE = (8.0, 4.5)
"""Inches; at :data:`DPI` every PNG is 1200 x 675 pixels."""
DPI = 150

_VERDICTS = (
    ("better", "#4e9a06"),
    ("same", "#c4a000"),
    ("worse", "#cc0000"),
    ("comparison_failed", "#888a85"),
)
_LANES = {
    "better": "positive",
    "same": "neutral",
    "worse": "negative",
    "comparison_failed": "failed",
}


def _figure() -> tuple[Figure, object]:
    fig = Figure(figsize=FIGURE_SIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _done(records: Sequence[EpochRecord]) -> list[EpochRecord]:
    return sorted((r for r in records if r.received or r.verdict), key=lambda r: r.epoch)


def _per_env(ax: Any, records: Sequence[EpochRecord], value: Callable[[Any], float]) -> None:
    """One line per environment: ``value`` of its stats in each finished epoch it ran in."""
    done = _done(records)
    for env in sorted({env for r in done for env in r.per_env}):
        pts = [
            (r.epoch, value(r.per_env[env]))
            for r in done
            if r.per_env.get(env) and r.per_env[env].episodes
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"rollouts, {env}")


def success_figure(records: Sequence[EpochRecord], heldout: Sequence[HeldoutScore]) -> Figure:
    fig, ax = _figure()
    _per_env(ax, records, lambda st: st.success / st.episodes)
    by_env: dict[str, list[tuple[int, float]]] = {}
    for s in heldout:
        if s.tasks:
            by_env.setdefault(s.environment, []).append((s.epoch, s.successes / s.tasks))
    for env, pts in sorted(by_env.items()):
        ax.plot(
            *zip(*sorted(pts), strict=True), marker="s", linestyle="--", label=f"held-out, {env}"
        )
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("epoch (held-out: the policy active when the epoch began)")
    ax.set_ylabel("success rate")
    ax.set_title("success over epochs")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return fig


def reward_figure(records: Sequence[EpochRecord], heldout: Sequence[HeldoutScore]) -> Figure:
    fig, ax = _figure()
    _per_env(ax, records, lambda st: st.mean_reward)
    pts = sorted((s.epoch, s.mean_reward) for s in heldout if s.tasks)
    if pts:
        ax.plot(*zip(*pts, strict=True), marker="s", linestyle="--", label="held-out")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean reward")
    ax.set_title("reward over epochs")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return fig


def verdict_figure(records: Sequence[EpochRecord]) -> Figure:
    fig, ax = _figure()
    done = _done(records)
    epochs = [r.epoch for r in done]
    bottom = [0] * len(done)
    for verdict, color in _VERDICTS:
        counts = [sum(s.verdicts.get(verdict, 0) for s in r.per_env.values()) for r in done]
        ax.bar(epochs, counts, bottom=bottom, color=color, label=verdict)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    for r, top in zip(done, bottom, strict=True):
        label = f"{r.verdict or '-'}\n{r.decision or '-'}"
        ax.annotate(label, (r.epoch, top), ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, max(bottom, default=1) * 1.3 + 1)
    ax.set_xlabel("epoch (label: the epoch's verdict and decision)")
    ax.set_ylabel("rollouts")
    ax.set_title("comparison verdicts per epoch")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def lanes_figure(records: Sequence[EpochRecord]) -> Figure:
    fig, ax = _figure()
    done = _done(records)
    totals: dict[tuple[str, str], int] = {}
    for r in done:
        for env, s in r.per_env.items():
            for verdict, n in s.verdicts.items():
                key = (env, _LANES.get(verdict, verdict))
                totals[key] = totals.get(key, 0) + n
    envs = sorted({env for env, _ in totals}) or ["-"]
    lanes = ["positive", "neutral", "negative", "failed"]
    width = 0.8 / len(lanes)
    for i, lane in enumerate(lanes):
        xs = [j + i * width for j in range(len(envs))]
        ax.bar(
            xs,
            [totals.get((env, lane), 0) for env in envs],
            width=width,
            label=lane,
            color=_VERDICTS[i][1],
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(envs))], envs)
    ax.set_ylabel("rollouts routed over the campaign")
    ax.set_title("replay lanes fed, per environment")
    ax.legend(loc="best", fontsize=8)
    return fig


def accounting_figure(records: Sequence[EpochRecord]) -> Figure:
    fig, ax = _figure()
    done = _done(records)
    epochs = [r.epoch for r in done]
    series = (
        ("base rollouts", [r.rollouts.base for r in done]),
        ("continuations", [r.rollouts.continuations for r in done]),
        ("reference runs", [r.rollouts.references for r in done]),
    )
    width = 0.8 / len(series)
    for i, (label, ys) in enumerate(series):
        ax.bar([e + (i - 1) * width for e in epochs], ys, width=width, label=label)
    ax2 = ax.twinx()
    ax2.plot(
        epochs,
        [r.rollouts.policy_calls for r in done],
        color="black",
        marker="o",
        label="policy calls",
    )
    ax2.set_ylabel("policy calls")
    strategy = done[0].rollouts.strategy if done else "-"
    ax.set_xlabel("epoch")
    ax.set_ylabel("episodes")
    ax.set_title(f"what the rollouts cost (strategy: {strategy})")
    handles = ax.get_legend_handles_labels()
    handles2 = ax2.get_legend_handles_labels()
    ax.legend(handles[0] + handles2[0], handles[1] + handles2[1], loc="best", fontsize=8)
    return fig


CAPTIONS = {
    "success": "Success over epochs (rollouts and held-out)",
    "reward": "Mean reward over epochs",
    "verdicts": "Comparison verdicts and decisions per epoch",
    "lanes": "Replay lanes fed, per environment",
    "rollouts": "Strategy accounting",
}
"""File stem -> caption, in the report's order."""


def figures(records: Sequence[EpochRecord], heldout: Sequence[HeldoutScore]) -> dict[str, Figure]:
    """File stem -> figure (the stems of :data:`CAPTIONS`)."""
    return {
        "success": success_figure(records, heldout),
        "reward": reward_figure(records, heldout),
        "verdicts": verdict_figure(records),
        "lanes": lanes_figure(records),
        "rollouts": accounting_figure(records),
    }


def _pct(num: int, den: int) -> str:
    return f"{100 * num / den:.1f}%" if den else "-"


def markdown(
    campaign_id: str,
    records: Sequence[EpochRecord],
    heldout: Sequence[HeldoutScore],
    images: dict[str, str],
) -> str:
    """The summary: a table per epoch and the images (stem -> file name, caption order)."""
    done = _done(records)
    lines = [
        f"# Campaign {campaign_id}",
        "",
        f"- written: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- epochs: {len(done)}",
        "",
        "| epoch | verdict | decision | episodes | rollout success | mean reward | held-out "
        "success | better / same / worse / failed | pointer moves |",
        "|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    held = {s.epoch: s for s in heldout}
    for r in done:
        episodes = sum(s.episodes for s in r.per_env.values())
        success = sum(s.success for s in r.per_env.values())
        reward = sum(s.reward_sum for s in r.per_env.values())
        v = {k: sum(s.verdicts.get(k, 0) for s in r.per_env.values()) for k, _ in _VERDICTS}
        h = held.get(r.epoch)
        lines.append(
            f"| {r.epoch} | {r.verdict or '-'} | {r.decision or '-'} | {episodes} | "
            f"{_pct(success, episodes)} | {reward / episodes if episodes else 0:.3f} | "
            f"{_pct(h.successes, h.tasks) if h else '-'} | "
            f"{v['better']} / {v['same']} / {v['worse']} / {v['comparison_failed']} | "
            + (
                ", ".join(
                    f"{m.pointer} {(m.old or '-')[:8]} -> {(m.new or '-')[:8]}"
                    for m in r.pointer_moves
                )
                or "-"
            )
            + " |"
        )
    last = held.get(max(held)) if held else None
    if last is not None:
        lines += [
            "",
            f"Final policy {last.checkpoint_id[:12]}: held-out success "
            f"{_pct(last.successes, last.tasks)} over {last.tasks} tasks.",
        ]
    for stem, name in images.items():
        caption = CAPTIONS.get(stem, stem)
        lines += ["", f"## {caption}", "", f"![{caption}]({name})"]
    return "\n".join(lines) + "\n"


def write_report(
    out: Path,
    campaign_id: str,
    records: Sequence[EpochRecord],
    heldout: Sequence[HeldoutScore],
) -> list[Path]:
    """Write ``<stem>.png`` for every figure and ``README.md`` into ``out``; returns the paths
    written (the PNGs, then the Markdown)."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: dict[str, str] = {}
    for stem, fig in figures(records, heldout).items():
        fig.tight_layout()
        path = out / f"{stem}.png"
        fig.savefig(path, dpi=DPI)
        images[stem] = path.name
        written.append(path)
    md = out / "README.md"
    md.write_text(markdown(campaign_id, records, heldout, images), encoding="utf-8")
    written.append(md)
    return written
