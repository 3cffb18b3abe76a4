"""Apply the declared JetStream topology, idempotently: create what is missing, update what
differs, leave the rest alone.

**Look before writing.** Every resource is read first and written only when it is missing or
differs from the declaration. Under authorization (``contracts.access``) only the admin (``aios-rl
up``, before it starts any service) may create or update streams and buckets; a service may
create only its own durable consumers. A service starting on a provisioned stack therefore only
reads, and one that finds something it may not fix fails with a ``ProvisionError`` naming it.

A durable consumer's ``ack_wait`` may be set by the service that processes it
(``Service.consume(..., ack_wait_s=...)``, e.g. from a deployment's settings): the consumer's
metadata records it under :data:`ACK_WAIT_OVERRIDE`, and provisioning by any other service keeps
it instead of resetting the declared one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from contracts import Topology, topology
from contracts.subjects import BucketSpec, ConsumerSpec, StreamSpec

from ._bus import Bus
from ._errors import ProvisionError
from ._logging import get_logger

__all__ = [
    "ACK_WAIT_OVERRIDE",
    "apply_ack_wait",
    "consumer_config",
    "jetstream_ready",
    "provision",
    "stream_config",
]

ACK_WAIT_OVERRIDE = "aios_ack_wait_s"
"""Consumer metadata key: the ack wait (seconds) its service set in place of the declared one."""

_ALREADY_EXISTS = 10148  # JetStream's err_code for "consumer already exists" (create action)
_MANAGED = (
    "filter_subject",
    "ack_policy",
    "deliver_policy",
    "ack_wait",
    "max_deliver",
    "max_ack_pending",
)
"""The consumer settings provisioning owns (the server fills in the others)."""

_RETENTION = {
    "limits": api.RetentionPolicy.LIMITS,
    "workqueue": api.RetentionPolicy.WORK_QUEUE,
    "interest": api.RetentionPolicy.INTEREST,
}


def stream_config(spec: StreamSpec, replicas: int | None = None) -> api.StreamConfig:
    """The nats-py config for a declared stream, with ``replicas`` copies (``None``: one for a
    new stream; an existing one keeps its own)."""
    return api.StreamConfig(
        name=spec.name,
        description=spec.description or None,
        subjects=list(spec.subjects),
        retention=_RETENTION[spec.retention],
        storage=api.StorageType.FILE,
        max_age=spec.max_age_s or None,
        max_msgs_per_subject=spec.max_msgs_per_subject,
        max_bytes=spec.max_bytes,
        duplicate_window=spec.duplicate_window_s,
        allow_direct=True,
        num_replicas=replicas or 1,
    )


def consumer_config(spec: ConsumerSpec, ack_wait_s: float | None = None) -> api.ConsumerConfig:
    """The nats-py config for a declared durable pull consumer; with ``ack_wait_s``, that ack wait
    instead of the declared one, recorded in the metadata under :data:`ACK_WAIT_OVERRIDE`.

    ``max_deliver`` on the server is one above ours: the kit dead-letters on its own last try,
    so the server's limit only trips when a process dies holding the message (and the kit then
    dead-letters it from the advisory)."""
    return api.ConsumerConfig(
        name=spec.durable,
        durable_name=spec.durable,
        filter_subject=spec.filter_subject,
        ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=spec.ack_wait_s if ack_wait_s is None else ack_wait_s,
        max_deliver=spec.max_deliver + 1,
        max_ack_pending=spec.max_ack_pending,
        metadata=None if ack_wait_s is None else {ACK_WAIT_OVERRIDE: repr(float(ack_wait_s))},
    )


def _override(cfg: api.ConsumerConfig) -> float | None:
    """The ack wait a service set on this consumer, if any."""
    mark = (cfg.metadata or {}).get(ACK_WAIT_OVERRIDE)
    return None if mark is None else float(mark)


def _differs(actual: api.ConsumerConfig, wanted: api.ConsumerConfig) -> bool:
    return _override(actual) != _override(wanted) or any(
        getattr(actual, f) != getattr(wanted, f) for f in _MANAGED
    )


async def _create_only(bus: Bus, stream: str, cfg: api.ConsumerConfig) -> bool:
    """Create the consumer with JetStream's ``create`` action: unlike nats-py's create-or-update,
    it never overwrites a consumer another process configured meanwhile. False when one of that
    name exists with another config; raises ``nats.js.errors.APIError`` for any other refusal."""
    req = {"stream_name": stream, "config": cfg.as_dict(), "action": "create"}
    try:
        reply = await bus.nc.request(
            f"{api.DEFAULT_PREFIX}.CONSUMER.CREATE.{stream}.{cfg.durable_name}",
            json.dumps(req).encode(),
            timeout=5,
        )
    except nats.errors.NoRespondersError as exc:
        raise nats.js.errors.ServiceUnavailableError(
            description="JetStream is not enabled"
        ) from exc
    error = json.loads(reply.data).get("error")
    if error is None:
        return True
    if error.get("err_code") == _ALREADY_EXISTS:
        return False
    raise nats.js.errors.APIError.from_error(error)


async def apply_ack_wait(bus: Bus, spec: ConsumerSpec, ack_wait_s: float | None) -> float:
    """Give the provisioned consumer ``spec`` the ack wait its service asks for: ``ack_wait_s``
    (marked, so :func:`provision` keeps it), or with ``None`` the declared one (dropping an earlier
    mark). Leaves an unmarked consumer alone when ``ack_wait_s`` is ``None``. Returns the ack wait
    in force. Raises ``ProvisionError`` when the consumer does not exist or JetStream refuses."""
    try:
        info = await bus.js.consumer_info(spec.stream, spec.durable)
        if _override(info.config) != ack_wait_s or (
            ack_wait_s is not None and info.config.ack_wait != ack_wait_s
        ):
            info = await bus.js.add_consumer(spec.stream, consumer_config(spec, ack_wait_s))
            get_logger().info(
                "consumer.ack_wait_set",
                consumer=spec.durable,
                ack_wait_s=info.config.ack_wait,
                declared_s=spec.ack_wait_s,
            )
    except nats.js.errors.NotFoundError as exc:
        raise ProvisionError(
            f"consumer {spec.durable} on {spec.stream} does not exist: provision the topology first"
        ) from exc
    except nats.js.errors.APIError as exc:
        raise ProvisionError(
            f"JetStream refused the ack wait of consumer {spec.durable}: {exc}"
        ) from exc
    return float(info.config.ack_wait or spec.ack_wait_s)


_STREAM_MANAGED = (
    "subjects",
    "retention",
    "max_age",
    "max_msgs_per_subject",
    "max_bytes",
    "duplicate_window",
    "description",
    "allow_direct",
)
"""The stream settings provisioning owns."""


def _stream_differs(
    actual: api.StreamConfig, wanted: api.StreamConfig, replicas: int | None = None
) -> bool:
    def norm(cfg: api.StreamConfig, field: str) -> object:
        value = getattr(cfg, field)
        if field == "subjects":
            return sorted(value or [])
        if field in ("max_age", "description"):
            return value or None
        return value

    if replicas is not None and (actual.num_replicas or 1) != replicas:
        return True
    return any(norm(actual, f) != norm(wanted, f) for f in _STREAM_MANAGED)


async def _bucket(js: JetStreamContext, b: BucketSpec, replicas: int | None) -> None:
    """Create the KV bucket ``b``, or bring an existing one's history, TTL, description (and
    replicas, when given) to the declaration (its keys stay)."""
    try:
        info = await js.stream_info(f"KV_{b.name}")
    except nats.js.errors.NotFoundError:
        config = api.KeyValueConfig(
            bucket=b.name,
            history=b.history,
            description=b.description or None,
            ttl=b.ttl_s or None,
            replicas=replicas or 1,
        )
        if await created(
            lambda: js.create_key_value(config), lambda: _stream_exists(js, f"KV_{b.name}")
        ):
            return
        info = await js.stream_info(f"KV_{b.name}")  # created meanwhile: check it below
    cfg = info.config
    want_age = b.ttl_s or None
    want_replicas = replicas or cfg.num_replicas or 1
    if (
        cfg.max_msgs_per_subject,
        cfg.max_age or None,
        cfg.description or None,
        cfg.num_replicas or 1,
    ) != (b.history, want_age, b.description or None, want_replicas):
        cfg.max_msgs_per_subject = b.history
        cfg.max_age = want_age
        cfg.description = b.description or None
        cfg.num_replicas = want_replicas
        await js.update_stream(cfg)
        get_logger().info("kv.bucket_updated", bucket=b.name, history=b.history, ttl_s=b.ttl_s)


async def _stream_exists(js: JetStreamContext, name: str) -> bool:
    try:
        await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        return False
    return True


async def created(
    create: Callable[[], Awaitable[object]],
    exists: Callable[[], Awaitable[bool]],
    *,
    within: float = 30.0,
) -> bool:
    """Create a stream, bucket or object store with ``create``: True when this call created it,
    False when JetStream refused because another process created it meanwhile (``exists()``
    after the refusal). A refusal while it still does not exist is not a race: a cluster that
    has just formed refuses replicas it cannot place yet ("insufficient resources", "no suitable
    peers") until its peers have joined, so ``create`` is asked again with back-off until
    ``within`` seconds, then the refusal is raised."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + within, 0.1
    while True:
        try:
            await create()
            return True
        except nats.js.errors.BadRequestError:
            if await exists():
                return False
            if loop.time() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


async def jetstream_ready(bus: Bus, within: float = 60.0) -> None:
    """Wait until JetStream answers (a new cluster elects its meta leader first: seconds).
    Raises ``ProvisionError`` when it has not within ``within`` seconds."""
    last: Exception | None = None
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    await bus.js.account_info()
                    return
                except nats.errors.Error as exc:
                    last = exc  # no meta leader yet: each try waits for its own timeout
                    await asyncio.sleep(0.2)
    except TimeoutError:
        raise ProvisionError(f"JetStream did not answer within {within:g} s: {last!r}") from None


async def provision(
    bus: Bus, topo: Topology | None = None, *, replicas: int | None = None
) -> Topology:
    """Create or update every stream, durable consumer, KV bucket and object store of ``topo``
    (the stack's topology under ``bus.names`` by default). ``replicas``: how many servers keep
    a copy of each (3 in a cluster, 1 on one server); existing resources are brought to it.
    ``None`` (what services pass) creates with one and leaves existing ones' replicas alone.
    Safe to call from every service at start-up, concurrently. Raises ``ProvisionError`` when
    JetStream refuses a resource."""
    if replicas is not None and not 1 <= replicas <= 5:
        raise ProvisionError(f"replicas must be between 1 and 5, not {replicas}")
    topo = topo or topology(bus.names)
    js = bus.js
    log = get_logger()
    try:
        for s in topo.streams:
            cfg = stream_config(s, replicas)
            try:
                current = (await js.stream_info(s.name)).config
            except nats.js.errors.NotFoundError:
                current = None
            if current is None:
                if await created(
                    lambda cfg=cfg: js.add_stream(cfg), lambda s=s: _stream_exists(js, s.name)
                ):
                    continue
                # created meanwhile with another config: bring it to the declared one
            elif not _stream_differs(current, cfg, replicas):
                continue
            if replicas is None and current is not None:
                cfg.num_replicas = current.num_replicas  # a service never changes replicas
            await js.update_stream(cfg)
        for c in topo.consumers:
            try:
                info = await js.consumer_info(c.stream, c.durable)
            except nats.js.errors.NotFoundError:
                if await _create_only(bus, c.stream, consumer_config(c)):
                    continue
                info = await js.consumer_info(c.stream, c.durable)
            # It exists: bring it to the declared config, keeping an ack wait its service set.
            # Written only when something differs: a service starting with the same contract
            # never rewrites the consumer, so it cannot undo an override set meanwhile.
            cfg = consumer_config(c, _override(info.config))
            if not _differs(info.config, cfg):
                continue
            try:
                await js.add_consumer(c.stream, cfg)
            except nats.js.errors.BadRequestError:
                if info.config.filter_subject != c.filter_subject:
                    raise ProvisionError(
                        f"consumer {c.durable} on {c.stream} filters {info.config.filter_subject!r}, "
                        f"declared {c.filter_subject!r}: delete it to re-create"
                    ) from None
        for b in topo.buckets:
            await _bucket(js, b, replicas)
        for o in topo.object_stores:
            try:
                await js.object_store(o.name)
            except nats.js.errors.BucketNotFoundError:
                store = api.ObjectStoreConfig(
                    description=o.description or None, replicas=replicas or 1
                )
                if await created(
                    lambda o=o, store=store: js.create_object_store(o.name, store),
                    lambda o=o: _stream_exists(js, f"OBJ_{o.name}"),
                ):
                    continue
            if replicas is not None:
                info = await js.stream_info(f"OBJ_{o.name}")
                if (info.config.num_replicas or 1) != replicas:
                    info.config.num_replicas = replicas
                    await js.update_stream(info.config)
    except nats.js.errors.APIError as exc:
        raise ProvisionError(f"JetStream refused the topology: {exc}") from exc
    except nats.errors.TimeoutError as exc:
        # A request the user may not send gets no answer (the server logs the violation).
        raise ProvisionError(
            "JetStream did not answer while provisioning: is this user permitted to create or "
            "update the topology? (only the admin may; run aios-rl up first)"
        ) from exc
    log.debug("jetstream.provisioned", streams=len(topo.streams), consumers=len(topo.consumers))
    return topo
