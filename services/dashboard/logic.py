"""What the dashboard shows, as pure functions of what it read from the bus (no NATS here).

``View`` holds the latest of everything: campaigns' epoch records, the checkpoint pointers and
lineage, services, replay lanes, RAIL's state, recent episodes and the counters behind the
Prometheus endpoint. The service's watchers call its ``on_*`` methods; each change bumps
``version`` so the web side knows when to push. ``snapshot`` is what the page draws (JSON),
``episode_detail`` one episode's drill-down, ``prometheus`` the metrics text.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from contracts import CheckpointMeta, CheckpointPointers, Episode, EpochRecord, HeldoutScore
from contracts.replay import lane_for

__all__ = [
    "LATENCY_BUCKETS",
    "STAGES",
    "ServiceRow",
    "View",
    "campaign_view",
    "episode_detail",
    "episode_row",
    "escape_label",
    "lineage",
    "matches",
    "prometheus",
    "stage_latencies",
]

STAGES = ("completed", "taught", "rewarded", "compared")
"""The pipeline's stages after an episode ran, in order (``Timings.stages`` keys)."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Upper bounds (seconds) of the stage-latency histogram."""


@dataclass(frozen=True)
class ServiceRow:
    """One service instance as ``$SRV`` discovery saw it."""

    name: str
    instance: str
    version: str = ""
    healthy: bool = True
    detail: str = ""
    lag: int = 0
    """Messages its durable consumers have not yet been delivered (0 when it has none)."""


def stage_latencies(ep: Episode) -> dict[str, float]:
    """Seconds each stage took: ``run`` (started -> finished) and, for every stage stamped,
    the time since the previous stamp (finished -> completed -> taught -> rewarded ->
    compared). Missing or out-of-order stamps give no entry."""
    t = ep.timings
    out: dict[str, float] = {}
    if t.started_at and t.finished_at >= t.started_at:
        out["run"] = t.finished_at - t.started_at
    prev = t.finished_at
    for stage in STAGES:
        at = t.stages.get(stage)
        if at is None:
            continue
        if prev and at >= prev:
            out[stage] = at - prev
        prev = at
    return out


def episode_row(ep: Episode) -> dict[str, Any]:
    """The live feed's line for ``ep``."""
    return {
        "episode_id": ep.episode_id,
        "environment": ep.environment,
        "task_id": ep.task_id,
        "campaign_id": ep.campaign_id,
        "epoch": ep.epoch,
        "role": ep.role,
        "outcome": ep.outcome,
        "reward": ep.reward if ep.reward is not None else ep.env_reward,
        "verdict": ep.comparison.verdict if ep.comparison else None,
        "lane": ep.lane or lane_for(ep),
        "steps": len(ep.trajectory),
        "checkpoint_id": ep.checkpoint_id,
        "at": ep.timings.stages.get("compared") or ep.timings.finished_at,
    }


def matches(row: Mapping[str, Any], filters: Mapping[str, str]) -> bool:
    """Whether a feed row passes the filters (environment, outcome, lane, campaign_id; an
    empty value passes everything)."""
    for key in ("environment", "outcome", "lane", "campaign_id"):
        want = filters.get(key, "")
        if want and str(row.get(key) or "") != want:
            return False
    return True


def episode_detail(ep: Episode) -> dict[str, Any]:
    """Everything the drill-down shows: each step (observation, candidates, chosen action,
    log-prob, entropy, the teacher's hint there), the reward breakdown, the teacher signal,
    the comparison, the evidence (screenshots) and the stage latencies."""
    hints: dict[int, list[dict[str, Any]]] = {}
    if ep.teacher_signal is not None:
        for h in ep.teacher_signal.hints:
            hints.setdefault(h.step, []).append(msgspec.to_builtins(h))
    steps = [
        {
            "index": s.index,
            "observation": s.observation,
            "candidates": list(s.candidates),
            "action": s.action,
            "action_index": s.action_index,
            "logprob": s.logprob,
            "prob": math.exp(s.logprob) if s.logprob <= 0 else None,
            "entropy": s.entropy,
            "value": s.value,
            "replayed": s.replayed,
            "hints": hints.get(s.index, []),
        }
        for s in ep.trajectory
    ]
    signal = msgspec.to_builtins(ep.teacher_signal) if ep.teacher_signal else None
    return {
        **episode_row(ep),
        "group_id": ep.group_id,
        "seed": ep.seed,
        "env_reward": ep.env_reward,
        "branch": msgspec.to_builtins(ep.branch) if ep.branch else None,
        "steps": steps,
        "reward_breakdown": msgspec.to_builtins(ep.reward_breakdown)
        if ep.reward_breakdown
        else None,
        "teacher_status": ep.teacher_status,
        "teacher_signal": signal,
        "comparison": msgspec.to_builtins(ep.comparison) if ep.comparison else None,
        "evidence": [msgspec.to_builtins(e) for e in ep.evidence],
        "info": dict(ep.info),
        "latencies": stage_latencies(ep),
    }


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def campaign_view(
    records: Iterable[EpochRecord], heldout: Iterable[HeldoutScore] = ()
) -> dict[str, Any]:
    """One campaign's epochs for the page: per epoch the phase, verdict, decision, pointer
    moves, per-environment success and mean reward, lanes (better / same / worse / failed),
    the rollouts spent by the strategy, the held-out success of the policy that ran it (when
    measured); and the curves over epochs."""
    held = {s.epoch: s for s in heldout}
    epochs = []
    for r in sorted(records, key=lambda r: r.epoch):
        per_env = {
            env: {
                "episodes": s.episodes,
                "success": _rate(s.success, s.episodes),
                "mean_reward": s.mean_reward if s.episodes else None,
                "verdicts": dict(s.verdicts),
            }
            for env, s in sorted(r.per_env.items())
        }
        episodes = sum(s.episodes for s in r.per_env.values())
        successes = sum(s.success for s in r.per_env.values())
        reward_sum = sum(s.reward_sum for s in r.per_env.values())
        lanes: Counter[str] = Counter()
        for s in r.per_env.values():
            lanes.update(s.verdicts)
        epochs.append(
            {
                "epoch": r.epoch,
                "phase": r.phase,
                "verdict": r.verdict,
                "verdict_detail": r.verdict_detail,
                "decision": r.decision,
                "active_checkpoint": r.active_checkpoint,
                "new_checkpoint": r.new_checkpoint,
                "pointer_moves": [msgspec.to_builtins(m) for m in r.pointer_moves],
                "scheduled": r.scheduled,
                "received": r.received,
                "success": _rate(successes, episodes),
                "mean_reward": reward_sum / episodes if episodes else None,
                "per_env": per_env,
                "lanes": {k: lanes.get(k, 0) for k in ("better", "same", "worse")}
                | {"failed": lanes.get("comparison_failed", 0)},
                "rollouts": msgspec.to_builtins(r.rollouts),
                "degradation_streak": r.degradation_streak,
                "heldout": _rate(held[r.epoch].successes, held[r.epoch].tasks)
                if r.epoch in held
                else None,
            }
        )
    done = [e for e in epochs if e["verdict"] is not None]
    return {
        "epochs": epochs,
        "curves": {
            "epoch": [e["epoch"] for e in done],
            "success": [e["success"] for e in done],
            "heldout": [e["heldout"] for e in done],
            "mean_reward": [e["mean_reward"] for e in done],
        },
        "heldout": [
            {
                "epoch": s.epoch,
                "success": _rate(s.successes, s.tasks),
                "tasks": s.tasks,
                "checkpoint_id": s.checkpoint_id,
            }
            for s in sorted(held.values(), key=lambda s: s.epoch)
        ],
    }


def lineage(pointers: CheckpointPointers, metas: Mapping[str, CheckpointMeta]) -> dict[str, Any]:
    """The checkpoint lineage as a graph: nodes (oldest first, each with its depth and the
    pointers that mark it), edges parent -> child, and every rollback (a pointer move whose
    reason says so) so the page can draw them."""
    marks: dict[str, list[str]] = {}
    for name in ("active", "pre_update_ref", "last_stable"):
        cid = getattr(pointers, name)
        if cid:
            marks.setdefault(cid, []).append(name)
    nodes = [
        {
            "id": m.checkpoint_id,
            "parent": m.parent_id,
            "seq": m.seq,
            "created_by": m.created_by,
            "algorithm": m.algorithm,
            "created_at": m.created_at,
            "metrics": dict(m.metrics),
            "markers": marks.get(m.checkpoint_id, []),
        }
        for m in sorted(metas.values(), key=lambda m: (m.seq, m.created_at, m.checkpoint_id))
    ]
    edges = [(m.parent_id, m.checkpoint_id) for m in metas.values() if m.parent_id in metas]
    return {
        "nodes": nodes,
        "edges": sorted(edges),
        "pointers": msgspec.to_builtins(pointers),
        "unknown": sorted(cid for cid in marks if cid not in metas),
    }


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * len(LATENCY_BUCKETS))
    total: int = 0
    sum: float = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for i, bound in enumerate(LATENCY_BUCKETS):
            if value <= bound:
                self.counts[i] += 1


@dataclass
class View:
    """The dashboard's model (see the module docstring)."""

    feed_size: int = 500
    version: int = 0
    services: list[ServiceRow] = field(default_factory=list)
    records: dict[str, dict[int, EpochRecord]] = field(default_factory=dict)
    heldout: dict[str, dict[int, HeldoutScore]] = field(default_factory=dict)
    pointers: CheckpointPointers = field(default_factory=CheckpointPointers)
    metas: dict[str, CheckpointMeta] = field(default_factory=dict)
    lanes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Lane -> environment -> messages in the replay stream."""
    rail: dict[str, Any] = field(default_factory=dict)
    """RAIL's control state (mode, sign agreement, MAE, eta, action histogram) as stored."""
    rail_history: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: Counter[str] = field(default_factory=Counter)
    """Dead-lettered messages held, by the stream they were meant for."""
    episodes_seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(environment, outcome) -> rollouts compared since the dashboard started."""
    latency: dict[str, _Histogram] = field(default_factory=dict)
    pointer_moves: Counter[str] = field(default_factory=Counter)
    """Pointer name -> moves seen in the ledger."""
    trainer_seconds: dict[str, float] = field(default_factory=dict)
    """Checkpoint id -> seconds its update took (from the checkpoint's metrics)."""
    started_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.feed: deque[Episode] = deque(maxlen=self.feed_size)
        self._seen_ids: set[str] = set()

    def _changed(self) -> None:
        self.version += 1

    # -- updates ----------------------------------------------------------------------------
    def on_epoch(self, record: EpochRecord) -> None:
        by_epoch = self.records.setdefault(record.campaign_id, {})
        old = by_epoch.get(record.epoch)
        if old == record:
            return
        known = {(m.pointer, m.old, m.new) for m in old.pointer_moves} if old else set()
        for m in record.pointer_moves:
            if (m.pointer, m.old, m.new) not in known:
                self.pointer_moves[m.pointer] += 1
        by_epoch[record.epoch] = record
        self._changed()

    def on_heldout(self, score: HeldoutScore) -> None:
        by_epoch = self.heldout.setdefault(score.campaign_id, {})
        if by_epoch.get(score.epoch) != score:
            by_epoch[score.epoch] = score
            self._changed()

    def on_pointers(self, pointers: CheckpointPointers) -> None:
        if pointers != self.pointers:
            self.pointers = pointers
            self._changed()

    def on_meta(self, meta: CheckpointMeta) -> None:
        if self.metas.get(meta.checkpoint_id) == meta:
            return
        self.metas[meta.checkpoint_id] = meta
        seconds = meta.metrics.get("update_s")
        if seconds is not None:
            self.trainer_seconds[meta.checkpoint_id] = float(seconds)
        self._changed()

    def on_services(self, rows: Sequence[ServiceRow]) -> None:
        rows = sorted(rows, key=lambda r: (r.name, r.instance))
        if rows != self.services:
            self.services = list(rows)
            self._changed()

    def on_lanes(self, lanes: Mapping[str, Mapping[str, int]]) -> None:
        new = {lane: dict(envs) for lane, envs in lanes.items()}
        if new != self.lanes:
            self.lanes = new
            self._changed()

    def on_rail(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        if state == self.rail:
            return
        self.rail = state
        self.rail_history.append({"at": time.time(), **state})
        del self.rail_history[:-200]
        self._changed()

    def on_dead_letters(self, counts: Mapping[str, int]) -> None:
        """Dead-lettered messages held per stream they were meant for."""
        new = Counter({k: v for k, v in counts.items() if v})
        if new != self.dead_letters:
            self.dead_letters = new
            self._changed()

    def on_episode(self, ep: Episode) -> None:
        """A compared episode: into the feed (once per id) and the counters."""
        if ep.episode_id in self._seen_ids:
            return
        if len(self.feed) == self.feed.maxlen:
            self._seen_ids.discard(self.feed[0].episode_id)
        self.feed.append(ep)
        self._seen_ids.add(ep.episode_id)
        self.episodes_seen[(ep.environment, ep.outcome)] += 1
        for stage, seconds in stage_latencies(ep).items():
            self.latency.setdefault(stage, _Histogram()).observe(seconds)
        self._changed()

    # -- reads ------------------------------------------------------------------------------
    def episode(self, episode_id: str) -> Episode | None:
        for ep in reversed(self.feed):
            if ep.episode_id == episode_id:
                return ep
        return None

    def feed_rows(self, filters: Mapping[str, str] | None = None, limit: int = 100) -> list[dict]:
        rows = [episode_row(ep) for ep in reversed(self.feed)]
        return [r for r in rows if matches(r, filters or {})][:limit]

    def snapshot(self, filters: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Everything the page draws, JSON-ready."""
        return {
            "version": self.version,
            "services": [row.__dict__ for row in self.services],
            "dead_letters": dict(self.dead_letters),
            "campaigns": {
                cid: campaign_view(by_epoch.values(), self.heldout.get(cid, {}).values())
                for cid, by_epoch in sorted(
                    self.records.items(),
                    key=lambda kv: max(
                        (r.timings.get("collect", 0.0) for r in kv[1].values()), default=0.0
                    ),
                    reverse=True,
                )
            },
            "lineage": lineage(self.pointers, self.metas),
            "lanes": self.lanes,
            "rail": {"state": self.rail, "history": self.rail_history[-100:]},
            "episodes": self.feed_rows(filters),
        }


def escape_label(value: str) -> str:
    """A Prometheus label value escaped (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(view: View) -> str:
    """The metrics in the Prometheus text exposition format (version 0.0.4)."""
    out: list[str] = []

    def family(name: str, kind: str, help_: str) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")

    family("aios_episodes_total", "counter", "Compared episodes by environment and outcome.")
    for (env, outcome), n in sorted(view.episodes_seen.items()):
        out.append(
            f'aios_episodes_total{{environment="{escape_label(env)}",'
            f'outcome="{escape_label(outcome)}"}} {n}'
        )
    family("aios_stage_latency_seconds", "histogram", "Seconds each pipeline stage took.")
    for stage, h in sorted(view.latency.items()):
        label = f'stage="{escape_label(stage)}"'
        for bound, n in zip(LATENCY_BUCKETS, h.counts, strict=True):
            out.append(f'aios_stage_latency_seconds_bucket{{{label},le="{bound}"}} {n}')
        out.append(f'aios_stage_latency_seconds_bucket{{{label},le="+Inf"}} {h.total}')
        out.append(f"aios_stage_latency_seconds_sum{{{label}}} {h.sum:.6f}")
        out.append(f"aios_stage_latency_seconds_count{{{label}}} {h.total}")
    family("aios_consumer_lag", "gauge", "Messages not yet delivered to a service's consumers.")
    for row in view.services:
        out.append(
            f'aios_consumer_lag{{service="{escape_label(row.name)}",'
            f'instance="{escape_label(row.instance)}"}} {row.lag}'
        )
    family("aios_service_up", "gauge", "1 when a service instance answers discovery healthy.")
    for row in view.services:
        out.append(
            f'aios_service_up{{service="{escape_label(row.name)}",'
            f'instance="{escape_label(row.instance)}"}} {1 if row.healthy else 0}'
        )
    family("aios_dead_letters_total", "counter", "Dead-lettered messages by stream.")
    for stream, n in sorted(view.dead_letters.items()):
        out.append(f'aios_dead_letters_total{{stream="{escape_label(stream)}"}} {n}')
    family("aios_pointer_moves_total", "counter", "Checkpoint pointer moves seen in the ledger.")
    for pointer, n in sorted(view.pointer_moves.items()):
        out.append(f'aios_pointer_moves_total{{pointer="{escape_label(pointer)}"}} {n}')
    family("aios_replay_lane_messages", "gauge", "Episodes in each replay lane.")
    for lane, envs in sorted(view.lanes.items()):
        for env, n in sorted(envs.items()):
            out.append(
                f'aios_replay_lane_messages{{lane="{escape_label(lane)}",'
                f'environment="{escape_label(env)}"}} {n}'
            )
    family(
        "aios_trainer_update_seconds", "gauge", "Seconds the update that made a checkpoint took."
    )
    for cid, seconds in sorted(view.trainer_seconds.items()):
        out.append(f'aios_trainer_update_seconds{{checkpoint="{escape_label(cid)}"}} {seconds}')
    family("aios_checkpoints", "gauge", "Checkpoints in the lineage.")
    out.append(f"aios_checkpoints {len(view.metas)}")
    return "\n".join(out) + "\n"
