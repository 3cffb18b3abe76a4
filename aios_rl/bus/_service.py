"""The service runner: endpoints (request/reply through ``nats.micro``), durable consumers with
retry, back-off and dead-lettering, background tasks, and graceful shutdown.

A service is plain functions registered on a :class:`Service`::

    svc = Service(bus, name="reward", version=__version__, description="...")
    svc.consume("reward", Episode, on_taught)            # durable, declared in the topology
    svc.endpoint("sample", bus.names.replay_sample(), ReplaySampleRequest, sample)
    await svc.run()                                      # until SIGTERM / SIGINT / stop()

No input stops a service: a message that does not decode (too large, too deep, not the
contract) or that its handler rejects is dead-lettered and acked; a dead letter too large for a
bus message keeps its payload in the Object Store ``evidence`` (or, failing that, cut short with
its digest); a request that fails in any way gets an error reply (400, 422 or 500).

A request without a reply subject (a plain publish on an endpoint's subject) is one nobody can
read the answer of, and ``nats.micro`` cannot answer it at all. It is refused before anything
else: not decoded, its handler not run (no side effect), logged (``endpoint.no_reply_subject``),
counted as a request and an error of its endpoint (``$SRV.STATS``), and dead-lettered whole on
``dlq.REQUESTS`` (reason ``no_reply``, ``endpoint`` naming it; a large payload in ``evidence``
as above), so nothing it carried is lost. One on the ``status`` endpoint, whose body nothing
reads, is only logged. No reply that fails to go out, for that or any other reason, ends the
service: it is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.micro import ServiceConfig, add_service
from nats.micro.request import Request
from nats.micro.service import EndpointStats, ServiceError

from contracts import (
    ConsumerStats,
    ContractError,
    DeadLetter,
    DecodeError,
    ErrorReply,
    Message,
    ServiceStatus,
    Topology,
    decode,
    encode,
)
from contracts import topology as stack_topology
from contracts.codec import EncodeError
from contracts.ops import dead_letter_object, request_dead_letter_object
from contracts.subjects import DLQ_REQUESTS, OBJECTS_EVIDENCE, SCHEMA_HEADER, ConsumerSpec

from ._bus import Bus
from ._errors import BusError, PermanentError
from ._logging import get_logger
from ._provision import apply_ack_wait

__all__ = ["ConsumerHandler", "EndpointHandler", "Service"]

_HEADROOM = 4096
"""Bytes of a bus message left for its headers and protocol line when sizing a dead letter."""
_ERROR_CHARS = 2000
"""Longest error a dead letter or an error reply carries (the rest is cut)."""
_HEADER_CHARS = 256
_HEADER_COUNT = 32
"""A dead letter too large even without its payload keeps this many original headers, cut."""

Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message)

EndpointHandler = Callable[[Req], Awaitable[Rep]]
"""Takes one decoded request Struct, answers one Struct (or raises ``ServiceError`` /
``PermanentError`` for a typed error reply)."""

ConsumerHandler = Callable[[Req], Awaitable[None]]
"""Takes one decoded durable message; returning acks it, raising retries or dead-letters it."""


@dataclass
class _Counters:
    processed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    errors: int = 0
    last_error: str = ""


@dataclass
class _Consumer(Generic[Req]):
    spec: ConsumerSpec
    type: type[Req]
    handler: ConsumerHandler[Req]
    concurrency: int
    ack_wait_s: float | None = None
    """The service's ack wait for this consumer; ``None``: the declared one."""
    in_force_s: float = 0.0
    """The ack wait on the server once the service runs (paces the in-progress heartbeats)."""
    counters: _Counters = field(default_factory=_Counters)


@dataclass
class _Endpoint(Generic[Req, Rep]):
    name: str
    subject: str
    type: type[Req]
    handler: EndpointHandler[Req, Rep]
    concurrency: int
    reply: type[Rep] | None = None
    counters: _Counters = field(default_factory=_Counters)

    def metadata(self) -> dict[str, str]:
        """What ``$SRV.INFO`` says of it: the schema names of its request and reply."""
        out = {"request_schema": getattr(self.type, "SCHEMA", "")}
        if self.reply is not None:
            out["response_schema"] = getattr(self.reply, "SCHEMA", "")
        return out


class Service:
    """One service process: its endpoints, durable consumers and tasks, run under one lifetime."""

    def __init__(
        self,
        bus: Bus,
        *,
        name: str,
        version: str,
        description: str = "",
        shutdown_grace_s: float = 10.0,
        fetch_timeout_s: float = 1.0,
        topology: Topology | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """``topology`` is where :meth:`consume` looks durable consumers up: the stack's, under
        ``bus.names``, unless given (pass the one you gave :func:`provision`). ``metadata``
        goes into its ``$SRV.INFO`` answer beside the namespace and pid (the dashboard's
        URL, ...)."""
        self.bus = bus
        self.name = name
        self.version = version
        self.description = description
        self.shutdown_grace_s = shutdown_grace_s
        self.fetch_timeout_s = fetch_timeout_s
        self.instance = ""
        self.metadata = dict(metadata or {})
        self.log = get_logger(service=name)
        self._endpoints: list[_Endpoint[Any, Any]] = []
        self._consumers: list[_Consumer[Any]] = []
        self._tasks: list[Callable[[], Awaitable[None]]] = []
        self._extra: list[Callable[[], dict[str, float]]] = []
        self._stopping = asyncio.Event()
        self._task_failure: BaseException | None = None
        self._topology = topology if topology is not None else stack_topology(bus.names)
        self.ready = asyncio.Event()
        """Set once every endpoint and consumer is live (tests wait on it)."""

    # -- registration ---------------------------------------------------------------------------
    def endpoint(
        self,
        name: str,
        subject: str,
        request: type[Req],
        handler: EndpointHandler[Req, Rep],
        *,
        concurrency: int = 1,
        reply: type[Rep] | None = None,
    ) -> None:
        """Answer requests on ``subject`` (queue group ``q``: replicas split the load).

        With ``concurrency`` > 1, up to that many requests run at once in this process.
        ``reply`` is the message type it answers with: with ``request``, its schema name goes
        into the endpoint's ``$SRV.INFO`` metadata (``request_schema``, ``response_schema``),
        so a client in any language can find the contract of every endpoint. Raises
        ``ValueError`` for a name another endpoint of this service (or the kit's ``status``)
        already has."""
        if name == "status" or any(e.name == name for e in self._endpoints):
            raise ValueError(f"service {self.name!r} already has an endpoint named {name!r}")
        self._endpoints.append(
            _Endpoint(name, subject, request, handler, max(1, concurrency), reply)
        )

    def consume(
        self,
        durable: str,
        message: type[Req],
        handler: ConsumerHandler[Req],
        *,
        concurrency: int = 1,
        ack_wait_s: float | None = None,
    ) -> None:
        """Process the durable consumer ``durable`` (declared in the service's topology, by default
        ``contracts.subjects.topology``) with up to ``concurrency`` messages in flight. Raises
        ``KeyError`` for an undeclared one.

        ``ack_wait_s`` replaces the declared ack wait: how long a message held by a process that
        died waits before JetStream hands it to another. :meth:`run` sets it on the consumer, and
        provisioning by other services keeps it; without it, :meth:`run` restores the declared
        one. A handler may run longer than the ack wait: while it runs, the kit tells JetStream
        it is still working every third of the ack wait. Raises ``ValueError`` below one
        second."""
        if ack_wait_s is not None and not ack_wait_s >= 1.0:
            raise ValueError(
                f"The ack wait of consumer {durable!r} must be at least 1 second, got {ack_wait_s}."
            )
        self._consumers.append(
            _Consumer(
                self._topology.consumer(durable),
                message,
                handler,
                max(1, concurrency),
                ack_wait_s=ack_wait_s,
            )
        )

    def task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` for the service's lifetime (cancelled at shutdown)."""
        self._tasks.append(fn)

    def stats(self, fn: Callable[[], dict[str, float]]) -> None:
        """Add service-specific counters to the status (``aios-rl services`` shows them)."""
        self._extra.append(fn)

    def stop(self) -> None:
        """Ask the service to shut down gracefully."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def status(self) -> ServiceStatus:
        extra: dict[str, float] = {}
        for fn in self._extra:
            extra.update(fn())
        return ServiceStatus(
            service=self.name,
            instance=self.instance,
            version=self.version,
            consumers=[
                ConsumerStats(
                    consumer=c.spec.durable,
                    subject=self.bus.names.strip(c.spec.filter_subject),
                    processed=c.counters.processed,
                    retried=c.counters.retried,
                    dead_lettered=c.counters.dead_lettered,
                    last_error=c.counters.last_error,
                    schema=getattr(c.type, "SCHEMA", ""),
                )
                for c in self._consumers
            ],
            extra=extra,
        )

    # -- lifetime -------------------------------------------------------------------------------
    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Serve until SIGTERM/SIGINT or :meth:`stop`, then shut down gracefully: stop pulling,
        let in-flight work finish for ``shutdown_grace_s`` (then hand it back with a nak), stop
        the endpoints and drain. Raises ``ProvisionError`` when a consumer is not provisioned or
        JetStream refuses its ack wait."""
        for c in self._consumers:
            c.in_force_s = await apply_ack_wait(self.bus, c.spec, c.ack_wait_s)
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stopping.set)
        by_name = {ep.name: ep for ep in self._endpoints}

        def stats_handler(stats: EndpointStats) -> Any:
            ep = by_name.get(stats.name)
            if stats.name == "status":
                return msgspec.to_builtins(self.status())
            if ep is not None:
                # Endpoints answer from tasks, so micro's own counters miss errors.
                return {"num_requests": ep.counters.processed, "num_errors": ep.counters.errors}
            return None

        micro = await add_service(
            self.bus.nc,
            ServiceConfig(
                name=self.name,
                version=self.version,
                description=self.description,
                metadata={
                    **self.metadata,
                    "namespace": self.bus.names.namespace,
                    "pid": str(os.getpid()),
                },
                stats_handler=stats_handler,
            ),
        )
        self.instance = micro.id
        self.log = self.log.bind(instance=micro.id)
        subs: list[Any] = []
        requests: set[asyncio.Task[None]] = set()
        try:
            async with asyncio.TaskGroup() as tg:
                await micro.add_endpoint(
                    name="status",
                    subject=self.bus.names.status(self.name),
                    handler=self._answer_status,
                    metadata={"request_schema": "", "response_schema": ServiceStatus.SCHEMA},
                )
                for ep in self._endpoints:
                    await micro.add_endpoint(
                        name=ep.name,
                        subject=ep.subject,
                        handler=self._endpoint_callback(ep, tg, requests),
                        metadata=ep.metadata(),
                    )
                workers: list[asyncio.Task[None]] = []
                for c in self._consumers:
                    psub = await self.bus.js.pull_subscribe_bind(
                        durable=c.spec.durable, stream=c.spec.stream
                    )
                    subs.append(psub)
                    subs.append(await self._watch_max_deliveries(c))
                    for i in range(c.concurrency):
                        workers.append(
                            tg.create_task(self._pull_loop(c, psub), name=f"{c.spec.durable}-{i}")
                        )
                # Background tasks live outside the task group: a task that swallows its
                # cancellation (seen with nats-py requests on 3.11) must not hang shutdown.
                background = [
                    asyncio.create_task(fn(), name=getattr(fn, "__name__", "task"))
                    for fn in self._tasks
                ]
                for b in background:
                    b.add_done_callback(self._on_task_done)
                await self.bus.nc.flush()
                self.ready.set()
                self.log.info(
                    "service.ready",
                    endpoints=[e.name for e in self._endpoints],
                    consumers=[c.spec.durable for c in self._consumers],
                )
                await self._stopping.wait()
                self.log.info("service.stopping")
                await micro.stop()
                # Pull loops see the flag and return after the message in hand; requests in
                # flight get their answer.
                in_flight = [*workers, *requests]
                try:
                    async with asyncio.timeout(self.shutdown_grace_s):
                        await asyncio.gather(*in_flight, return_exceptions=True)
                except TimeoutError:
                    self.log.warning("service.grace_expired", handing_back=True)
                    await _cancel(in_flight, self.shutdown_grace_s, self.log)
                await _cancel(background, self.shutdown_grace_s, self.log)
        finally:
            for sub in subs:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
            if not micro.stopped.is_set():
                await micro.stop()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            self.log.info("service.stopped")
        if self._task_failure is not None:
            raise self._task_failure

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """A background task that fails stops the service, which then raises its error."""
        if task.cancelled() or task.exception() is None:
            return
        if self._task_failure is None:
            self._task_failure = task.exception()
        self.log.error("service.task_failed", task=task.get_name(), error=repr(task.exception()))
        self._stopping.set()

    # -- endpoints ------------------------------------------------------------------------------
    async def _answer_status(self, req: Request) -> None:
        if not _reply_subject(req):
            self.log.warning("endpoint.no_reply_subject", endpoint="status", subject=req.subject)
            return
        data, headers = encode(self.status())
        try:
            await req.respond(data, headers=headers)
        except nats.errors.Error as exc:  # the connection is gone: nobody to tell
            self.log.warning("endpoint.reply_failed", endpoint="status", error=repr(exc))

    def _endpoint_callback(
        self, ep: _Endpoint[Any, Any], tg: asyncio.TaskGroup, in_flight: set[asyncio.Task[None]]
    ) -> Callable[[Request], Awaitable[None]]:
        sem = asyncio.Semaphore(ep.concurrency)
        where = (self.name, ep.name, getattr(ep.type, "SCHEMA", ""))

        async def handle(req: Request) -> None:
            """Answer ``req``; raises ``ServiceError`` for every way it can fail before the reply
            is sent (undecodable 400, rejected 422, handler error or unencodable reply 500)."""
            ep.counters.processed += 1
            headers = req.headers or {}
            if not headers.get(SCHEMA_HEADER):
                # No schema named: decode as the endpoint's declared request (its $SRV metadata
                # names it); a header naming another schema is still refused.
                headers = {**headers, SCHEMA_HEADER: getattr(ep.type, "SCHEMA", "")}
            try:
                request = decode(req.data, headers, ep.type)
            except DecodeError as exc:
                ep.counters.errors += 1
                raise ServiceError("400", str(exc)) from exc
            try:
                reply = await ep.handler(request)
            except ServiceError:
                ep.counters.errors += 1
                raise
            except PermanentError as exc:
                ep.counters.errors += 1
                raise ServiceError("422", str(exc)) from exc
            except Exception as exc:
                ep.counters.errors += 1
                ep.counters.last_error = repr(exc)
                self.log.exception("endpoint.failed", endpoint=ep.name)
                raise ServiceError("500", f"{type(exc).__name__}: {exc}") from exc
            try:
                data, headers = encode(reply)
            except EncodeError as exc:
                ep.counters.errors += 1
                ep.counters.last_error = repr(exc)
                self.log.error("endpoint.reply_unencodable", endpoint=ep.name, error=repr(exc))
                raise ServiceError("500", f"the reply could not be encoded: {exc}") from exc
            await req.respond(data, headers=headers)

        async def run_one(req: Request) -> None:
            # Runs in the service's task group: whatever escapes here ends the service, so
            # nothing may, whatever the request was.
            try:
                if not _reply_subject(req):
                    await self._refuse_unanswerable(ep, req)
                    return
                await handle(req)
            except ServiceError as err:
                await _respond_error(req, err.code, err.description, self.log, where=where)
            except Exception as exc:
                # The reply could not be sent (larger than max_payload, connection gone, or
                # anything else nats-py raised on the way): answer with an error if we still
                # can, as micro does, rather than fail the service. Logged with its traceback.
                ep.counters.errors += 1
                ep.counters.last_error = repr(exc)
                self.log.exception("endpoint.reply_failed", endpoint=ep.name)
                await _respond_error(
                    req, "500", f"the reply could not be sent: {exc!r}", self.log, where=where
                )
            finally:
                sem.release()

        async def spawn(req: Request) -> None:
            # Every request runs as a task of the service, never inside the subscription's
            # callback: stopping the endpoint cancels that callback, and a request in flight must
            # still get its answer during the shutdown grace period.
            await sem.acquire()  # back-pressure: the subscription waits while all slots are busy
            task = tg.create_task(run_one(req))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)

        return spawn

    async def _refuse_unanswerable(self, ep: _Endpoint[Any, Any], req: Request) -> None:
        """Refuse a request that came without a reply subject (see the module docstring): count
        it, log it and dead-letter it on ``dlq.REQUESTS``, its handler never run. Never raises
        but for cancellation."""
        ep.counters.processed += 1
        ep.counters.errors += 1
        ep.counters.last_error = "a request without a reply subject"
        self.log.warning(
            "endpoint.no_reply_subject",
            endpoint=ep.name,
            subject=req.subject,
            schema=(req.headers or {}).get(SCHEMA_HEADER, ""),
            size=len(req.data),
        )
        payload = req.data
        headers = dict(req.headers or {})
        letter = _letter(
            self.name,
            subject=req.subject,
            reason="no_reply",
            error=(
                f"a request to endpoint {ep.name!r} without a reply subject: nobody could read "
                "its answer, so it was not handled"
            ),
            headers=headers,
            payload=payload,
            stream="",
            consumer="",
            endpoint=ep.name,
        )
        digest = hashlib.sha256(payload).hexdigest()
        await self._keep_dead_letter(
            letter,
            payload,
            self.bus.names.dlq(DLQ_REQUESTS),
            msg_id=None,
            object_name=request_dead_letter_object(self.name, ep.name, digest),
            counters=ep.counters,
            log=self.log.bind(endpoint=ep.name, subject=letter.subject),
            kind="endpoint",
        )

    # -- durable consumers ----------------------------------------------------------------------
    async def _pull_loop(self, c: _Consumer[Any], psub: Any) -> None:
        while not self._stopping.is_set():
            try:
                msgs = await psub.fetch(1, timeout=self.fetch_timeout_s)
            except nats.errors.TimeoutError:
                continue
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError):
                return
            except nats.js.errors.APIError as exc:
                self.log.warning("consumer.fetch_failed", consumer=c.spec.durable, error=str(exc))
                await asyncio.sleep(
                    self.fetch_timeout_s
                )  # broker-side hiccup: back off before pulling again
                continue
            for msg in msgs:
                await self._process(c, msg)

    async def _process(self, c: _Consumer[Any], msg: Msg) -> None:
        meta = msg.metadata
        deliveries = meta.num_delivered
        try:
            decoded = decode(msg.data, msg.headers, c.type)
        except DecodeError as exc:
            self.log.warning(
                "consumer.undecodable",
                consumer=c.spec.durable,
                subject=msg.subject,
                reason=exc.reason,
                detail=exc.detail,
            )
            await self._dead_letter(c, msg, "undecodable", str(exc))
            return
        keepalive = asyncio.create_task(self._keep_alive(msg, c.in_force_s))
        try:
            await c.handler(decoded)
        except asyncio.CancelledError:
            # Shutdown past the grace period: hand the message back for another replica.
            await self._settle(c, msg, ack=False)
            raise
        except PermanentError as exc:
            self.log.warning("consumer.rejected", consumer=c.spec.durable, error=str(exc))
            await self._dead_letter(c, msg, "rejected", str(exc))
            return
        except Exception as exc:
            c.counters.last_error = repr(exc)
            if deliveries >= c.spec.max_deliver:
                self.log.exception(
                    "consumer.failed_for_good", consumer=c.spec.durable, deliveries=deliveries
                )
                await self._dead_letter(c, msg, "failed", repr(exc))
            else:
                backoff = _backoff(c.spec, deliveries)
                self.log.exception(
                    "consumer.retry", consumer=c.spec.durable, deliveries=deliveries, in_s=backoff
                )
                c.counters.retried += 1
                await self._settle(c, msg, ack=False, delay=backoff)
            return
        finally:
            keepalive.cancel()
        if await self._settle(c, msg, ack=True):
            c.counters.processed += 1

    async def _settle(self, c: _Consumer[Any], msg: Msg, *, ack: bool, delay: float = 0) -> bool:
        """Ack ``msg`` (or hand it back after ``delay``); False when the connection refused it
        (logged: JetStream redelivers it after the ack wait)."""
        try:
            await (msg.ack() if ack else msg.nak(delay=delay))
        except nats.errors.Error as exc:
            self.log.warning(
                "consumer.ack_failed" if ack else "consumer.nak_failed",
                consumer=c.spec.durable,
                seq=msg.metadata.sequence.stream,
                error=repr(exc),
            )
            return False
        return True

    @staticmethod
    async def _keep_alive(msg: Msg, ack_wait_s: float) -> None:
        """Tell JetStream a long handler is still working, so it does not redeliver meanwhile."""
        while True:
            await asyncio.sleep(
                max(ack_wait_s / 3, 0.5)
            )  # periodic heartbeat, not a condition wait
            try:
                await msg.in_progress()
            except (nats.errors.Error, OSError):
                return

    async def _dead_letter(self, c: _Consumer[Any], msg: Msg, reason: str, error: str) -> None:
        """Dead-letter ``msg`` and ack it. When the dead letter cannot be published, the message
        goes back (a nak after the back-off) to be tried again, and once the server stops
        redelivering it, its advisory tries once more (:meth:`_watch_max_deliveries`)."""
        meta = msg.metadata
        kept = await self._publish_dead_letter(
            c,
            subject=msg.subject,
            seq=meta.sequence.stream,
            deliveries=meta.num_delivered,
            reason=reason,
            error=error,
            headers=dict(msg.headers or {}),
            payload=msg.data,
        )
        if not kept:
            await self._settle(c, msg, ack=False, delay=_backoff(c.spec, meta.num_delivered))
        elif await self._settle(c, msg, ack=True):
            c.counters.dead_lettered += 1

    async def _publish_dead_letter(
        self,
        c: _Consumer[Any],
        *,
        subject: str,
        seq: int,
        deliveries: int,
        reason: str,
        error: str,
        headers: dict[str, str],
        payload: bytes,
    ) -> bool:
        """Publish the dead letter of one message on ``dlq.<stream>``; False (logged) when it
        could not be published. Never raises but for cancellation (see
        :meth:`_keep_dead_letter`)."""
        names = self.bus.names
        stream_base = c.spec.stream[len(names.stream("")) :]
        letter = _letter(
            self.name,
            subject=subject,
            reason=reason,
            error=error,
            headers=headers,
            payload=payload,
            stream=c.spec.stream,
            consumer=c.spec.durable,
            stream_seq=seq,
            deliveries=deliveries,
        )
        return await self._keep_dead_letter(
            letter,
            payload,
            names.dlq(stream_base),
            msg_id=f"dlq:{c.spec.stream}:{c.spec.durable}:{seq}",
            object_name=dead_letter_object(c.spec.stream, seq),
            counters=c.counters,
            log=self.log.bind(consumer=c.spec.durable, subject=letter.subject, seq=seq),
            kind="consumer",
        )

    async def _keep_dead_letter(
        self,
        letter: DeadLetter,
        payload: bytes,
        subject: str,
        *,
        msg_id: str | None,
        object_name: str,
        counters: _Counters,
        log: Any,
        kind: str,
    ) -> bool:
        """Publish ``letter`` (which holds ``payload``) on ``subject``; False (logged, and the
        error kept in ``counters``) when it could not be published. Never raises but for
        cancellation. ``kind`` (``consumer``, ``endpoint``) prefixes the log events.

        A payload that would make the dead letter larger than a bus message is stored in the
        Object Store ``evidence`` as ``object_name`` and named by ``payload_ref``; when that
        fails too, the dead letter keeps as much of it as fits. Either way it keeps its size and
        digest."""
        budget = self.bus.nc.max_payload - _HEADROOM
        try:
            if _size(letter) > budget:
                letter = msgspec.structs.replace(
                    letter, payload=b"", payload_sha256=hashlib.sha256(payload).hexdigest()
                )
                try:
                    await self.bus.put_object(
                        self.bus.names.bucket(OBJECTS_EVIDENCE), object_name, payload
                    )
                except BusError as exc:
                    log.warning(f"{kind}.dead_letter_payload_not_stored", error=repr(exc))
                    letter = _fitted(letter, payload, budget)
                else:
                    letter = _fitted(
                        msgspec.structs.replace(letter, payload_ref=object_name), b"", budget
                    )
            await self.bus.publish_durable(subject, letter, msg_id=msg_id)
        except (BusError, ContractError, nats.errors.Error) as exc:
            counters.last_error = repr(exc)
            log.error(f"{kind}.dead_letter_failed", reason=letter.reason, error=repr(exc))
            return False
        log.warning(
            f"{kind}.dead_lettered",
            reason=letter.reason,
            payload_ref=letter.payload_ref or None,
            cut=len(letter.payload) < len(payload) and not letter.payload_ref,
        )
        return True

    async def _watch_max_deliveries(self, c: _Consumer[Any]) -> Any:
        """Dead-letter messages the server gave up on (a process died holding them too often)."""
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{c.spec.stream}.{c.spec.durable}"

        async def on_advisory(raw: Msg) -> None:
            # Whatever arrives here is logged and dropped or dead-lettered, never raised: an
            # error would only reach the connection's error callback, the message unrecorded.
            try:
                event = json.loads(raw.data)
                seq = int(event["stream_seq"])
                deliveries = int(event.get("deliveries", 0))
                if seq < 1:
                    raise ValueError(f"stream_seq {seq} is not a sequence")
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                self.log.warning(
                    "consumer.advisory_unreadable", consumer=c.spec.durable, error=repr(exc)
                )
                return
            try:
                stored = await self.bus.js.get_msg(c.spec.stream, seq)
            except nats.errors.Error as exc:  # gone (deleted, trimmed) or JetStream failed
                self.log.warning(
                    "consumer.advisory_unreadable", consumer=c.spec.durable, error=repr(exc)
                )
                return
            if await self._publish_dead_letter(
                c,
                subject=stored.subject or "",
                seq=seq,
                deliveries=deliveries,
                reason="failed",
                error="the server stopped redelivering (max deliveries reached)",
                headers=dict(stored.headers or {}),
                payload=stored.data or b"",
            ):
                c.counters.dead_lettered += 1

        return await self.bus.nc.subscribe(subject, queue=f"dlq-{c.spec.durable}", cb=on_advisory)


def _reply_subject(req: Request) -> str:
    """Where the answer of ``req`` goes; empty for a plain publish. ``nats.micro``'s ``Request``
    does not expose it (``respond`` raises ``ValueError`` without one), its message does."""
    return req._msg.reply or ""


def _letter(
    service: str,
    *,
    subject: str,
    reason: str,
    error: str,
    headers: dict[str, str],
    payload: bytes,
    **where: Any,
) -> DeadLetter:
    """The dead letter of ``payload`` (received on ``subject`` with ``headers``), its texts made
    encodable and cut; ``where`` says what held it (stream and consumer, or endpoint)."""
    return DeadLetter(
        service=service,
        subject=_text(subject),
        reason=reason,
        error=_text(error, _ERROR_CHARS),
        schema=_text(headers.get(SCHEMA_HEADER, ""), _HEADER_CHARS),
        headers={_text(k): _text(v) for k, v in headers.items()},
        payload=payload,
        at=time.time(),
        payload_size=len(payload),
        **where,
    )


def _backoff(spec: ConsumerSpec, deliveries: int) -> float:
    """The declared wait before the next delivery of a message delivered ``deliveries`` times."""
    if not spec.backoff_s:
        return 0.0
    return spec.backoff_s[min(max(deliveries, 1), len(spec.backoff_s)) - 1]


def _text(value: str, limit: int | None = None) -> str:
    """``value`` as text any encoder takes (lone surrogates escaped), cut to ``limit``."""
    value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value if limit is None or len(value) <= limit else value[:limit] + "..."


def _size(letter: DeadLetter) -> int:
    """Bytes of ``letter`` encoded. Raises ``EncodeError`` as ``encode`` does."""
    return len(encode(letter)[0])


def _fitted(letter: DeadLetter, payload: bytes, budget: int) -> DeadLetter:
    """``letter`` (its payload out of it) within ``budget`` encoded bytes: the original headers
    cut when they alone are too many, then as much of ``payload`` as fits (base64: four
    characters per three bytes)."""
    if _size(letter) > budget:
        kept = list(letter.headers.items())[:_HEADER_COUNT]
        letter = msgspec.structs.replace(
            letter, headers={k[:_HEADER_CHARS]: v[:_HEADER_CHARS] for k, v in kept}
        )
    room = (budget - _size(letter)) // 4 * 3
    return msgspec.structs.replace(letter, payload=payload[: max(room, 0)])


async def _respond_error(
    req: Request,
    code: str,
    description: str,
    log: Any,
    *,
    where: tuple[str, str, str] = ("", "", ""),
) -> None:
    """Send an error reply: the service API's headers (the description one line of text a
    header can carry) and an ``error.v1`` body (``ErrorReply``) with the code, the message and,
    from ``where`` = (service, endpoint, expected request schema), where it came from. Never
    raises but for cancellation: it runs where an exception would end the service, so an error
    reply that cannot be built or sent (the connection is gone, no reply subject, anything
    else) is logged instead."""
    text = " ".join(_text(description, _ERROR_CHARS).split())
    service, endpoint, expected = where
    try:
        body, headers = encode(
            ErrorReply(
                code=_text(code, 8),
                message=_text(description, _ERROR_CHARS * 4),
                expected_schema=expected,
                service=service,
                endpoint=endpoint,
            )
        )
        await req.respond_error(_text(code, 8), text, data=body, headers=headers)
    except nats.errors.Error as exc:
        log.warning("endpoint.error_reply_failed", endpoint=endpoint, code=code, error=repr(exc))
    except Exception:
        # Not the connection: a bug here or in nats-py, kept loud (its traceback) but not fatal.
        log.exception("endpoint.error_reply_failed", endpoint=endpoint, code=code)


async def _cancel(tasks: list[asyncio.Task[Any]], deadline_s: float, log: Any) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again while one ignores it, up to
    ``deadline_s``; a task still running then is abandoned with an error log."""
    pending = {t for t in tasks if not t.done()}
    try:
        async with asyncio.timeout(deadline_s):
            while pending:
                for t in pending:
                    t.cancel()
                _, pending = await asyncio.wait(pending, timeout=0.2)
    except TimeoutError:
        log.error("service.tasks_ignored_cancel", tasks=[t.get_name() for t in pending])
