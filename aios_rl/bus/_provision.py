"""Apply the declared JetStream topology, idempotently: create what is missing, update what
differs, leave the rest alone."""

from __future__ import annotations

import nats.js.errors
from nats.js import api

from contracts import Topology, topology
from contracts.subjects import ConsumerSpec, StreamSpec

from ._bus import Bus
from ._errors import ProvisionError
from ._logging import get_logger

__all__ = ["consumer_config", "provision", "stream_config"]

_RETENTION = {
    "limits": api.RetentionPolicy.LIMITS,
    "workqueue": api.RetentionPolicy.WORK_QUEUE,
    "interest": api.RetentionPolicy.INTEREST,
}


def stream_config(spec: StreamSpec) -> api.StreamConfig:
    """The nats-py config for a declared stream."""
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
    )


def consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    """The nats-py config for a declared durable pull consumer.

    ``max_deliver`` on the server is one above ours: the kit dead-letters on its own last try,
    so the server's limit only trips when a process dies holding the message (and the kit then
    dead-letters it from the advisory)."""
    return api.ConsumerConfig(
        name=spec.durable,
        durable_name=spec.durable,
        filter_subject=spec.filter_subject,
        ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=spec.ack_wait_s,
        max_deliver=spec.max_deliver + 1,
        max_ack_pending=spec.max_ack_pending,
    )


async def provision(bus: Bus, topo: Topology | None = None) -> Topology:
    """Create or update every stream, durable consumer, KV bucket and object store of ``topo``
    (the stack's topology under ``bus.names`` by default). Safe to call from every service at
    start-up, concurrently. Raises ``ProvisionError`` when JetStream refuses a resource."""
    topo = topo or topology(bus.names)
    js = bus.js
    log = get_logger()
    try:
        for s in topo.streams:
            cfg = stream_config(s)
            try:
                await js.add_stream(cfg)
            except nats.js.errors.BadRequestError:
                # It exists with another config: bring it to the declared one.
                await js.update_stream(cfg)
        for c in topo.consumers:
            cfg = consumer_config(c)
            try:
                await js.add_consumer(c.stream, cfg)
            except nats.js.errors.BadRequestError:
                info = await js.consumer_info(c.stream, c.durable)
                if info.config.filter_subject != c.filter_subject:
                    raise ProvisionError(
                        f"consumer {c.durable} on {c.stream} filters {info.config.filter_subject!r}, "
                        f"declared {c.filter_subject!r}: delete it to re-create"
                    ) from None
        for b in topo.buckets:
            await js.create_key_value(
                api.KeyValueConfig(
                    bucket=b.name, history=b.history, description=b.description or None
                )
            )
        for o in topo.object_stores:
            try:
                await js.object_store(o.name)
            except nats.js.errors.BucketNotFoundError:
                await js.create_object_store(
                    o.name, api.ObjectStoreConfig(description=o.description or None)
                )
    except nats.js.errors.APIError as exc:
        raise ProvisionError(f"JetStream refused the topology: {exc}") from exc
    log.debug("jetstream.provisioned", streams=len(topo.streams), consumers=len(topo.consumers))
    return topo
