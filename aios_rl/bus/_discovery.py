"""Service discovery through ``nats.micro``'s ``$SRV.INFO`` / ``$SRV.STATS``: who is running,
with which endpoints, and how busy. The merge into rows is pure."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["ServiceView", "discover", "gather", "merge"]


class EndpointView(msgspec.Struct, kw_only=True):
    name: str
    subject: str
    requests: int = 0
    errors: int = 0
    request_schema: str = ""
    """The schema of what it takes (its ``$SRV.INFO`` metadata); empty: any body (``status``)."""


class ConsumerView(msgspec.Struct, kw_only=True):
    consumer: str
    subject: str
    processed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    schema: str = ""
    """The schema of the messages it reads (from the service's status)."""


class ServiceView(msgspec.Struct, kw_only=True):
    """One running service instance as discovery sees it."""

    name: str
    id: str
    version: str
    description: str = ""
    namespace: str = ""
    pid: int | None = None
    endpoints: list[EndpointView] = []
    consumers: list[ConsumerView] = []
    extra: dict[str, float] = {}
    metadata: dict[str, str] = {}
    """What the service put in its ``$SRV.INFO`` metadata (``url`` for the dashboard)."""


async def gather(
    nc: Client, subject: str, *, window: float = 0.3, deadline: float = 2.0
) -> list[dict[str, Any]]:
    """Broadcast an empty request on ``subject`` and collect every JSON reply that arrives until
    no new one came for ``window`` seconds (or ``deadline`` passed)."""
    replies: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        with contextlib.suppress(ValueError):
            replies.append(json.loads(msg.data))
        arrived.set()

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(subject, b"", reply=inbox)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(deadline):
                while True:
                    arrived.clear()
                    try:
                        async with asyncio.timeout(window):
                            await arrived.wait()
                    except TimeoutError:
                        break
    finally:
        await sub.unsubscribe()
    return replies


def merge(
    infos: Iterable[dict[str, Any]],
    stats: Iterable[dict[str, Any]],
    *,
    namespace: str | None = None,
) -> list[ServiceView]:
    """Join INFO and STATS replies by instance id into views, sorted by name then id; with
    ``namespace``, keep only the services of that namespace."""
    by_id = {s.get("id"): s for s in stats}
    views: list[ServiceView] = []
    for info in infos:
        meta = info.get("metadata") or {}
        if namespace is not None and meta.get("namespace", "") != namespace:
            continue
        st = by_id.get(info.get("id"), {})
        endpoints: list[EndpointView] = []
        consumers: list[ConsumerView] = []
        extra: dict[str, float] = {}
        declared = {ep.get("name"): ep.get("metadata") or {} for ep in info.get("endpoints") or []}
        for ep in st.get("endpoints") or info.get("endpoints") or []:
            data = ep.get("data") or {}
            if ep.get("name") == "status" and isinstance(data, dict):
                consumers = [
                    ConsumerView(
                        consumer=c["consumer"],
                        subject=c["subject"],
                        processed=c.get("processed", 0),
                        retried=c.get("retried", 0),
                        dead_lettered=c.get("dead_lettered", 0),
                        schema=c.get("schema", ""),
                    )
                    for c in data.get("consumers", [])
                ]
                extra = {k: float(v) for k, v in (data.get("extra") or {}).items()}
                continue
            requests = ep.get("num_requests", 0)
            errors = ep.get("num_errors", 0)
            if isinstance(data, dict) and "num_requests" in data:
                requests, errors = data["num_requests"], data.get("num_errors", errors)
            endpoints.append(
                EndpointView(
                    name=ep.get("name", ""),
                    subject=ep.get("subject", ""),
                    requests=requests,
                    errors=errors,
                    request_schema=str(declared.get(ep.get("name"), {}).get("request_schema", "")),
                )
            )
        pid = meta.get("pid")
        views.append(
            ServiceView(
                name=info.get("name", ""),
                id=info.get("id", ""),
                version=info.get("version", ""),
                description=info.get("description", "") or "",
                namespace=meta.get("namespace", ""),
                pid=int(pid) if pid and str(pid).isdigit() else None,
                endpoints=endpoints,
                consumers=consumers,
                extra=extra,
                metadata={str(k): str(v) for k, v in meta.items()},
            )
        )
    return sorted(views, key=lambda v: (v.name, v.id))


async def discover(
    nc: Client, *, namespace: str | None = None, window: float = 0.3
) -> list[ServiceView]:
    """Every service instance that answers ``$SRV.INFO`` and ``$SRV.STATS`` now."""
    infos, stats = await asyncio.gather(
        gather(nc, "$SRV.INFO", window=window), gather(nc, "$SRV.STATS", window=window)
    )
    return merge(infos, stats, namespace=namespace)
