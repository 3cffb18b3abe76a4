"""``aios-rl tap SUBJECT...``: watch typed messages live.

Each message is decoded into its contract by the schema header and printed as one readable line
(time, subject, schema, key fields) or, with ``--json``, as a full JSON line. A message that does
not decode is shown as such, never dropped. With ``--since DURATION`` the JetStream streams that
hold the subject are replayed from that far back first, then followed live.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from contracts import DecodeError, Message, Names
from contracts.subjects import SCHEMA_HEADER

from ..bus import Bus, connect
from ._common import bus_args, run_until_interrupt, url

__all__ = ["add", "format_json", "format_line", "parse_duration", "subject_subset", "tap"]


def add(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tap", help="print typed messages on subjects live, e.g. aios-rl tap 'episode.>'"
    )
    bus_args(parser)
    parser.add_argument("subjects", nargs="+", metavar="SUBJECT")
    parser.add_argument(
        "--since",
        metavar="DURATION",
        help="first replay stored messages from this long ago (90s, 5m, 2h)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print each message as a full JSON line"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="stop after N messages")
    parser.set_defaults(run=lambda args: run_until_interrupt(_tap(args)))


async def _tap(args: argparse.Namespace) -> int:
    since = parse_duration(args.since) if args.since else None
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    async with connect(
        url(args), name="aios-rl-tap", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        ready = asyncio.Event()
        task = asyncio.create_task(
            tap(bus, args.subjects, since_s=since, as_json=args.json, limit=args.limit, ready=ready)
        )
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if ready.is_set():
            print(
                f"# tapping {' '.join(args.subjects)} on {url(args)} (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return 0


_KEY_FIELDS = (
    "episode_id",
    "environment",
    "task_id",
    "role",
    "outcome",
    "env_reward",
    "reward",
    "teacher_status",
    "lane",
    "campaign_id",
    "epoch",
    "phase",
    "kind",
    "checkpoint_id",
    "action",
    "logprob",
    "reason",
    "service",
    "consumer",
    "verdict",
    "decision",
    "budget",
    "realized_gain",
    "update_id",
)


def parse_duration(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"2h"``, ``"1d"`` or ``"1h30m"`` -> seconds; raises ``ValueError``."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not parts or "".join(a + b for a, b in parts) != text.strip():
        raise ValueError(f"duration {text!r} is not like 90s, 5m, 2h, 1d or 1h30m")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * unit[u] for n, u in parts)


def subject_subset(inner: str, outer: str) -> bool:
    """Whether every subject matched by pattern ``inner`` is matched by pattern ``outer``."""
    a, b = inner.split("."), outer.split(".")
    for i, tok in enumerate(b):
        if tok == ">":
            return len(a) > i
        if i >= len(a):
            return False
        if a[i] == ">":
            return False
        if tok != "*" and (a[i] == "*" or a[i] != tok):
            return False
    return len(a) == len(b)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _summary(msg: Message) -> str:
    fields: list[str] = []
    for name in _KEY_FIELDS:
        value = getattr(msg, name, None)
        if value is None or value == "":
            continue
        fields.append(f"{name}={_short(value)}")
    comparison = getattr(msg, "comparison", None)
    if comparison is not None:
        fields.append(f"verdict={comparison.verdict}")
    trajectory = getattr(msg, "trajectory", None)
    if trajectory:
        fields.append(f"steps={len(trajectory)}")
    return " ".join(fields)


def _stamp(when: float | None) -> str:
    t = dt.datetime.fromtimestamp(when, dt.UTC) if when else dt.datetime.now(dt.UTC)
    return t.strftime("%H:%M:%S.%f")[:-3]


def format_line(
    subject: str, decoded: Message | DecodeError, raw: bytes, *, when: float | None = None
) -> str:
    """One readable line for a message (or for a message that did not decode)."""
    if isinstance(decoded, DecodeError):
        preview = raw[:80].decode(errors="replace").replace("\n", " ")
        return f"{_stamp(when)}  {subject}  !! undecodable ({decoded.reason}: {decoded.detail})  {preview!r}"
    return f"{_stamp(when)}  {subject}  {decoded.SCHEMA}  {_summary(decoded)}"


def format_json(
    subject: str, decoded: Message | DecodeError, raw: bytes, headers: dict[str, str]
) -> str:
    """One JSON line: subject, schema and the whole message (or the error and raw text)."""
    if isinstance(decoded, DecodeError):
        doc: dict[str, Any] = {
            "subject": subject,
            "schema": headers.get(SCHEMA_HEADER, ""),
            "error": decoded.reason,
            "detail": decoded.detail,
            "raw": raw.decode(errors="replace"),
        }
    else:
        doc = {
            "subject": subject,
            "schema": decoded.SCHEMA,
            "message": msgspec.to_builtins(decoded),
        }
    return json.dumps(doc, separators=(",", ":"))


async def _streams_for(bus: Bus, subject: str) -> list[tuple[str, str]]:
    """(stream, filter) pairs that replay what ``subject`` matches from JetStream."""
    out: list[tuple[str, str]] = []
    infos = []
    while page := await bus.js.streams_info(offset=len(infos)):  # the API pages the list
        infos.extend(page)
    for info in infos:
        for stream_subject in info.config.subjects or []:
            if subject_subset(subject, stream_subject):
                out.append((info.config.name, subject))
            elif subject_subset(stream_subject, subject):
                out.append((info.config.name, stream_subject))
    return out


async def tap(
    bus: Bus,
    subjects: Sequence[str],
    *,
    since_s: float | None = None,
    as_json: bool = False,
    out: TextIO = sys.stdout,
    limit: int | None = None,
    ready: asyncio.Event | None = None,
) -> int:
    """Print messages on ``subjects`` (relative to the bus namespace) until cancelled, or until
    ``limit`` messages were printed; returns the count printed."""
    names: Names = bus.names
    done = asyncio.Event()
    count = 0

    async def show(decoded: Message | DecodeError, raw: Any, when: float | None = None) -> None:
        nonlocal count
        if done.is_set():
            return
        headers = dict(raw.headers or {})
        subject = names.strip(raw.subject)
        line = (
            format_json(subject, decoded, raw.data, headers)
            if as_json
            else format_line(subject, decoded, raw.data, when=when)
        )
        out.write(line + "\n")
        out.flush()
        count += 1
        if limit is not None and count >= limit:
            done.set()

    async def replayed(decoded: Message | DecodeError, raw: Any) -> None:
        when = raw.metadata.timestamp.timestamp() if raw.metadata.timestamp else None
        await show(decoded, raw, when)

    subs = []
    for rel in subjects:
        full = names.subject(rel)
        if since_s is None:
            subs.append(await bus.subscribe(full, show))
            continue
        start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=since_s)
        pairs = await _streams_for(bus, full)
        if not pairs:
            raise ValueError(f"no JetStream stream holds {rel!r}: --since needs a stored subject")
        for stream, filt in pairs:
            subs.append(await bus.replay(filt, replayed, stream=stream, since=start))
    await bus.nc.flush()  # the server has every subscription before we say we are tapping
    if ready is not None:
        ready.set()
    try:
        await done.wait()
    finally:
        await bus.unsubscribe(*subs)
    return count
