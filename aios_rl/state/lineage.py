"""Checkpoint lineage, pure: the three pointer moves, the registry's errors, the tree drawing.

No NATS here; :mod:`aios_rl.state.checkpoints` applies these rules with one compare-and-set each.

The rules (the design's checkpoint lineage):

- **advance** to ``new``: ``active`` becomes ``new`` and the ``active`` from before becomes
  ``pre_update_ref``. The first advance (no ``active`` yet) also sets ``last_stable``.
  Advancing to the checkpoint already active is a no-op.
- **rollback** to ``pre_update_ref`` or ``last_stable``: ``active`` becomes that checkpoint, and so
  does ``pre_update_ref`` (after a rollback the reference *is* the active: a second rollback to
  ``pre_update_ref`` has nothing to go back to, and a degraded checkpoint rolled back over can
  never come back as a rollback target). ``last_stable`` never moves on a rollback. A rollback
  whose target is unset or already active raises :class:`InvalidMoveError`.
- **promote**: ``last_stable`` becomes ``active``; a no-op when it already is, and
  :class:`InvalidMoveError` when nothing is active.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple, get_args

import msgspec

from contracts import CheckpointMeta, CheckpointPointers, PointerMove, PointerName

from ._errors import ContentionError, CorruptError, NotFoundError, StateError

__all__ = [
    "POINTER_NAMES",
    "CorruptCheckpointError",
    "EventNotPublishedError",
    "InvalidMoveError",
    "Moved",
    "PointerContentionError",
    "RegistryError",
    "RollbackTarget",
    "StalePointersError",
    "UnknownCheckpointError",
    "plan_advance",
    "plan_promote",
    "plan_rollback",
    "render_tree",
]

POINTER_NAMES: tuple[PointerName, ...] = get_args(PointerName)
RollbackTarget = Literal["pre_update_ref", "last_stable"]


# -- errors -------------------------------------------------------------------------------------


class RegistryError(StateError):
    """Root of every error the checkpoint registry raises."""


class UnknownCheckpointError(RegistryError, NotFoundError):
    """No checkpoint with this id is stored."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"no checkpoint {checkpoint_id!r} is stored in the registry")
        self.checkpoint_id = checkpoint_id


class CorruptCheckpointError(RegistryError, CorruptError):
    """Stored weights or metadata do not match what the registry recorded for them."""


class InvalidMoveError(RegistryError):
    """The move makes no sense for the current pointers (nothing to roll back to or promote)."""


class StalePointersError(RegistryError):
    """The pointers are no longer what the caller based its move on; nothing was written."""

    def __init__(self, message: str, current: CheckpointPointers) -> None:
        super().__init__(message)
        self.current = current


class PointerContentionError(StalePointersError, ContentionError):
    """Other writers won the compare-and-set every time the move was tried; nothing was written."""


class EventNotPublishedError(RegistryError):
    """The write is durable, but the event announcing it could not be published."""

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


# -- moves ---------------------------------------------------------------------------------------


class Moved(NamedTuple):
    """The pointers after a move and the pointers that changed (empty for a no-op)."""

    pointers: CheckpointPointers
    moves: list[PointerMove]


def _moved(old: CheckpointPointers, reason: str, now: float, **changes: str | None) -> Moved:
    moves = [
        PointerMove(pointer=name, old=getattr(old, name), new=changes[name], reason=reason)
        for name in POINTER_NAMES
        if name in changes and changes[name] != getattr(old, name)
    ]
    if not moves:
        return Moved(old, [])
    return Moved(msgspec.structs.replace(old, **changes, updated_at=now, reason=reason), moves)


def plan_advance(p: CheckpointPointers, new_id: str, *, reason: str, now: float) -> Moved:
    """Make ``new_id`` active; the previous active becomes ``pre_update_ref``."""
    if p.active == new_id:
        return Moved(p, [])
    return _moved(
        p,
        reason,
        now,
        active=new_id,
        pre_update_ref=p.active,
        last_stable=p.last_stable if p.last_stable is not None else new_id,
    )


def plan_rollback(p: CheckpointPointers, to: RollbackTarget, *, reason: str, now: float) -> Moved:
    """Make the ``to`` pointer's checkpoint active (and ``pre_update_ref``).

    Raises ``InvalidMoveError`` when ``to`` is unset or already active, or not a rollback
    target."""
    if to not in get_args(RollbackTarget):
        raise InvalidMoveError(
            f"cannot roll back to {to!r}: choose 'pre_update_ref' or 'last_stable'."
        )
    target = getattr(p, to)
    if target is None or target == p.active:
        raise InvalidMoveError(
            f"nothing to roll back to: {to} is {target!r} and active is {p.active!r}."
        )
    return _moved(p, reason, now, active=target, pre_update_ref=target)


def plan_promote(p: CheckpointPointers, *, reason: str, now: float) -> Moved:
    """Make the active checkpoint ``last_stable``. Raises ``InvalidMoveError`` when none is
    active."""
    if p.active is None:
        raise InvalidMoveError("nothing to promote: no checkpoint is active.")
    return _moved(p, reason, now, last_stable=p.active)


# -- the tree --------------------------------------------------------------------------------------


def _label(meta: CheckpointMeta, markers: list[str], max_metrics: int, orphan: bool) -> str:
    parts = [meta.checkpoint_id, f"seq={meta.seq}", str(meta.algorithm)]
    parts.append(f"by={meta.created_by or '-'}")
    shown = sorted(meta.metrics.items())[:max_metrics]
    if shown:
        parts.append(" ".join(f"{k}={v:.4g}" for k, v in shown))
    if orphan:
        parts.append(f"(parent {meta.parent_id} missing)")
    parts += [f"[{m}]" for m in markers]
    return "  ".join(parts)


def render_tree(
    pointers: CheckpointPointers,
    metas: Mapping[str, CheckpointMeta],
    *,
    max_metrics: int = 3,
) -> str:
    """The lineage as a tree, parent above children, one checkpoint a line::

        <id>  seq=<n>  <algorithm>  by=<created_by>  <metric>=<v> ...  [active] ...

    Children are drawn with ``├──`` / ``└──`` when a checkpoint has several; an only child goes
    on the next line at its parent's indentation (a long linear history stays flat). Siblings
    and roots are ordered by ``seq``, creation time, id. A checkpoint whose parent is not in
    ``metas`` is drawn as a root marked ``(parent ... missing)``; a pointer naming a checkpoint
    not in ``metas`` gets a line of its own at the end. At most ``max_metrics`` metrics per line,
    by name."""
    markers: dict[str, list[str]] = {}
    for name in POINTER_NAMES:
        target = getattr(pointers, name)
        if target is not None:
            markers.setdefault(target, []).append(name)

    def order(m: CheckpointMeta) -> tuple[int, float, str]:
        return (m.seq, m.created_at, m.checkpoint_id)

    children: dict[str, list[CheckpointMeta]] = {}
    roots: list[CheckpointMeta] = []
    for meta in metas.values():
        if meta.parent_id is not None and meta.parent_id in metas:
            children.setdefault(meta.parent_id, []).append(meta)
        else:
            roots.append(meta)
    for kids in children.values():
        kids.sort(key=order)
    roots.sort(key=order)

    lines: list[str] = []
    # (meta, prefix of its own line, prefix of its descendants' lines); a stack, so a deep
    # lineage cannot exhaust the recursion limit.
    stack: list[tuple[CheckpointMeta, str, str]] = [(r, "", "") for r in reversed(roots)]
    while stack:
        meta, head, tail = stack.pop()
        orphan = meta.parent_id is not None and meta.parent_id not in metas
        lines.append(head + _label(meta, markers.get(meta.checkpoint_id, []), max_metrics, orphan))
        kids = children.get(meta.checkpoint_id, [])
        if len(kids) == 1:
            stack.append((kids[0], tail, tail))
            continue
        for i in reversed(range(len(kids))):
            last = i == len(kids) - 1
            stack.append(
                (kids[i], tail + ("└── " if last else "├── "), tail + ("    " if last else "│   "))
            )

    for name in POINTER_NAMES:
        target = getattr(pointers, name)
        if target is not None and target not in metas:
            lines.append(f"[{name}] -> {target} (no metadata)")
    return "\n".join(lines) if lines else "(no checkpoints)"
