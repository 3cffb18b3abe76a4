"""Blocked checkpoints from the other environments' episodes: how the environments feed each
other. A real ``blocked`` or failed shell or browser episode becomes a clarity-gate task (the run
starts blocked on that episode's evidence), labelled by its cause.

The cause, from what the episode recorded (first rule that matches):

==========================================================  ============  =======================
what the episode says                                       cause         the right decision
==========================================================  ============  =======================
the task could not be loaded (``error: task: ...``)         human         someone fixes the task
the environment or the sampler crashed, the sandbox         transient     retry
failed, the evaluation run timed out
(``error: environment|policy: ...``, ``ended: sandbox``,
``blocked_reason: evaluation: ...``)
invalid actions in a row, a command over a sandbox limit,   replan        re-plan
the step limit (``ended: invalid_actions|limit``,
``error: limit: ...``)
the agent changed a test file (``touched_tests``)           human         a reviewer decides
==========================================================  ============  =======================

Anything else (a plain wrong answer) says nothing about a checkpoint and is skipped. The pure part
(:func:`checkpoint_of`, :func:`tasks_from_episodes`) has no NATS; :func:`read_episodes` reads the
``EPISODES`` stream.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

from aios_rl.bus import Bus
from contracts import Checkpoint, DecodeError, Episode, OrchestratorTask, decode
from contracts.subjects import STREAM_EPISODES

from .tasks import split_of_combination, task_for_checkpoint

__all__ = ["SOURCES", "checkpoint_of", "read_episodes", "split_of_episode", "tasks_from_episodes"]

SOURCES = ("shell", "browser")
"""The environments whose episodes become checkpoints."""


def _cause(ep: Episode) -> tuple[str, str] | None:
    info = ep.info
    error = info.get("error", "")
    ended = info.get("ended", "")
    reason = info.get("blocked_reason", "")
    if error.startswith("task:"):
        return "human", error
    if error.startswith(("environment:", "policy:")):
        return "transient", error
    if ended == "sandbox" or reason.startswith("evaluation:"):
        return "transient", reason or "the sandbox failed"
    if ended in ("invalid_actions", "limit") or error.startswith("limit:"):
        return "replan", reason or error or f"ended: {ended}"
    if info.get("touched_tests"):
        return "human", f"the agent changed test files: {info['touched_tests']}"
    return None


def _tail(text: str, n: int = 160) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else "..." + one[-n:]


def checkpoint_of(ep: Episode) -> Checkpoint | None:
    """``ep`` as a blocked checkpoint (evidence text and cause), or ``None`` when it says nothing
    about one (only ``blocked`` and ``failure`` episodes of :data:`SOURCES` can)."""
    if ep.environment not in SOURCES or ep.outcome not in ("blocked", "failure"):
        return None
    found = _cause(ep)
    if found is None:
        return None
    cause, why = found
    steps = len(ep.trajectory)
    evidence = (
        f"the {ep.environment} subagent stopped after {steps} steps ({ep.outcome}): {_tail(why)}"
    )
    if ep.trajectory:
        evidence += f"; its last action was {_tail(ep.trajectory[-1].action, 80)!r}"
    return Checkpoint(
        cause=cause,  # type: ignore[arg-type]
        evidence=evidence,
        source=f"episode:{ep.environment}:{ep.episode_id}",
    )


def split_of_episode(episode_id: str) -> str:
    """The split an episode's checkpoint goes to (stable, about one in four held out)."""
    return split_of_combination(f"episode:{episode_id}")


def tasks_from_episodes(episodes: Iterable[Episode], *, seed: int = 0) -> list[OrchestratorTask]:
    """A clarity-gate task for each episode that is a checkpoint (:func:`checkpoint_of`), in the
    split of its episode id, over a work item drawn for that split; one task per episode."""
    out: list[OrchestratorTask] = []
    seen: set[str] = set()
    for ep in episodes:
        cp = checkpoint_of(ep)
        if cp is None or ep.episode_id in seen:
            continue
        seen.add(ep.episode_id)
        h = hashlib.sha256(f"{seed}:{ep.episode_id}".encode()).hexdigest()[:12]
        rng = random.Random(int(h, 16))
        out.append(task_for_checkpoint(rng, split_of_episode(ep.episode_id), cp))
    return out


async def read_episodes(bus: Bus, environments: Iterable[str] = SOURCES) -> list[Episode]:
    """Every completed episode of ``environments`` the ``EPISODES`` stream holds (blocked and
    failed ones are what :func:`tasks_from_episodes` keeps)."""
    out: list[Episode] = []
    stream = bus.names.stream(STREAM_EPISODES)
    for env in environments:
        async for msg in bus.read_stream(stream, bus.names.episode("completed", env)):
            try:
                ep = decode(msg.data, msg.headers, Episode)
            except DecodeError:
                continue  # a malformed entry in the ledger is skipped, not fatal
            out.append(ep)
    return out
