"""Connecting to NATS and typed publish / request / subscribe."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from contracts import DecodeError, Message, Names, decode, decode_any, encode
from contracts.access import inbox_prefix
from contracts.subjects import MSG_ID_HEADER

from ._errors import BusError, ConnectError, NoResponders, RemoteError, RequestTimeout
from ._logging import get_logger

__all__ = ["Bus", "StoredMessage", "connect"]

M = TypeVar("M", bound=Message)

Handler = Callable[[Message | DecodeError, Msg], Awaitable[None]]
"""Gets each message decoded by its schema header (or the ``DecodeError`` that says why it could
not be), and the raw message."""

_NO_MESSAGE = 10037
"""JetStream's error code for "no message found" (a missing stream is 10059)."""

STREAM_READ_TIMEOUT_S = 5.0
"""Longest wait for the next message of a finite stream read (the server holds them already)."""


class StoredMessage(NamedTuple):
    """One message as a stream holds it: decode ``data`` with ``contracts.decode``."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str] | None
    stored_at: float
    """Unix seconds when the stream stored it."""


_ERROR_HEADER = "Nats-Service-Error"
_ERROR_CODE_HEADER = "Nats-Service-Error-Code"


class Bus:
    """A connection with its JetStream context and the names of one namespace.

    Use :func:`connect` to get one."""

    def __init__(self, nc: Client, names: Names) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.names = names

    async def publish(
        self, subject: str, msg: Message, headers: dict[str, str] | None = None
    ) -> None:
        """Fire-and-forget publish on core NATS. Raises ``BusError`` when the connection cannot
        take it (closed, draining, its buffer full)."""
        data, hdrs = encode(msg, headers)
        try:
            await self.nc.publish(subject, data, headers=hdrs)
        except nats.errors.Error as exc:
            raise BusError(f"cannot publish on {subject!r}: {exc!r}") from exc

    async def publish_durable(
        self, subject: str, msg: Message, *, msg_id: str | None = None, timeout: float = 10.0
    ) -> int:
        """Publish into JetStream and wait for the stream's ack; returns the stream sequence.

        ``msg_id`` (``<episode_id>:<stage>``, ...) makes a republish within the duplicate window a
        no-op. While no stream answers (a clustered stream electing a new leader after its node
        died answers nothing or 503 for a few seconds; nothing was stored) the publish is tried
        again with back-off until ``timeout``. Raises ``BusError`` when no stream takes the
        subject by then or the ack does not come."""
        data, hdrs = encode(msg, {MSG_ID_HEADER: msg_id} if msg_id else None)
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + timeout, 0.05
        while True:
            left = deadline - loop.time()
            try:
                ack = await self.js.publish(subject, data, headers=hdrs, timeout=max(left, 0.1))
            except (
                nats.js.errors.NoStreamResponseError,
                nats.js.errors.ServiceUnavailableError,
            ) as exc:
                if loop.time() + pause < deadline:
                    await asyncio.sleep(pause)  # no stream answered: nothing stored, try again
                    pause = min(pause * 2, 1.0)
                    continue
                raise BusError(
                    f"no JetStream stream took a publish on {subject!r} within {timeout}s: "
                    "is the topology provisioned (or is the stream's cluster without a leader)?"
                ) from exc
            except nats.errors.TimeoutError as exc:
                raise BusError(
                    f"JetStream did not acknowledge a publish on {subject!r} within {timeout}s"
                ) from exc
            return ack.seq

    async def request(self, subject: str, msg: Message, reply: type[M], *, timeout: float) -> M:
        """Send ``msg`` and decode the reply as ``reply``.

        Raises ``RequestTimeout`` past the deadline, ``NoResponders`` when no service listens,
        ``RemoteError`` for an error reply and ``DecodeError`` for a reply of the wrong shape."""
        data, hdrs = encode(msg)
        try:
            resp = await self.nc.request(subject, data, timeout=timeout, headers=hdrs)
        except nats.errors.NoRespondersError as exc:
            raise NoResponders(f"no service answers on {subject!r}") from exc
        except nats.errors.TimeoutError as exc:
            raise RequestTimeout(f"no reply on {subject!r} within {timeout}s") from exc
        headers = resp.headers or {}
        if _ERROR_CODE_HEADER in headers or _ERROR_HEADER in headers:
            raise RemoteError(
                headers.get(_ERROR_CODE_HEADER, "500"), headers.get(_ERROR_HEADER, ""), subject
            )
        return decode(resp.data, headers, reply)

    async def subscribe(self, subject: str, handler: Handler, *, queue: str = "") -> Subscription:
        """Core subscription; the handler gets each message decoded by its schema header, or the
        ``DecodeError`` that says why it could not be (nothing is dropped silently)."""
        return await self.nc.subscribe(subject, queue=queue, cb=_decoding(handler))

    async def replay(
        self, subject: str, handler: Handler, *, stream: str, since: dt.datetime
    ) -> Subscription:
        """What ``stream`` stored on ``subject`` from ``since`` on, then what arrives live, through
        an ordered consumer (nothing left on the server); messages reach ``handler`` as with
        :meth:`subscribe`, and ``raw.metadata.timestamp`` says when each was stored.

        Raises ``BusError`` when JetStream refuses the consumer (no such stream, ...)."""
        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_TIME, opt_start_time=since
        )
        try:
            return await self.js.subscribe(
                subject,
                stream=stream,
                ordered_consumer=True,
                cb=_decoding(handler),
                config=config,
            )
        except nats.errors.Error as exc:
            raise BusError(f"cannot replay {subject!r} from stream {stream!r}: {exc!r}") from exc

    async def unsubscribe(self, *subs: Subscription) -> None:
        """End each of ``subs``; one that already ended (with the connection, ...) is no error."""
        for sub in subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def read_stream(
        self, stream: str, subject: str, *, since: float | None = None
    ) -> AsyncIterator[StoredMessage]:
        """Every message ``stream`` holds on ``subject`` (wildcards allowed), oldest first, from
        ``since`` (unix seconds; ``None``: the start) up to the last one it held when the read
        began: a finite read, complete whatever is published meanwhile.

        Raises ``BusError`` when JetStream refuses (no such stream) or stops delivering for
        ``STREAM_READ_TIMEOUT_S``."""
        try:
            last = await self.js.get_msg(stream, subject=subject)
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code == _NO_MESSAGE:
                return  # nothing stored on the subject
            raise BusError(f"cannot read {subject!r} from stream {stream!r}: {exc!r}") from exc
        except nats.errors.Error as exc:
            raise BusError(f"cannot read {subject!r} from stream {stream!r}: {exc!r}") from exc
        assert last.seq is not None
        if since is None:
            config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL)
        else:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_TIME,
                opt_start_time=dt.datetime.fromtimestamp(since, dt.UTC),
            )
        try:
            sub = await self.js.subscribe(
                subject, stream=stream, ordered_consumer=True, config=config
            )
            info = await sub.consumer_info()
        except nats.errors.Error as exc:
            raise BusError(f"cannot read {subject!r} from stream {stream!r}: {exc!r}") from exc
        try:
            # A push consumer delivers at once: "nothing pending" after some were delivered
            # means they are all on their way, not that there are none.
            if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
                return  # nothing stored since ``since``
            while True:
                try:
                    msg = await sub.next_msg(timeout=STREAM_READ_TIMEOUT_S)
                except nats.errors.TimeoutError as exc:
                    raise BusError(f"stream {stream!r} stopped delivering {subject!r}") from exc
                meta = msg.metadata
                yield StoredMessage(
                    meta.sequence.stream,
                    msg.subject,
                    msg.data,
                    msg.headers,
                    meta.timestamp.timestamp(),
                )
                if meta.sequence.stream >= last.seq or meta.num_pending == 0:
                    return
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def stored(self, stream: str, seq: int) -> StoredMessage | None:
        """The message ``stream`` holds at ``seq`` (a direct get), ``None`` when it holds none
        there (deleted, trimmed). Raises ``BusError`` when JetStream refuses or fails."""
        try:
            raw = await self.js.get_msg(stream, seq, direct=True)
        except nats.js.errors.NotFoundError as exc:
            if exc.err_code in (_NO_MESSAGE, None):
                return None
            raise BusError(f"cannot read {stream!r} at {seq}: {exc!r}") from exc
        except nats.errors.Error as exc:
            raise BusError(f"cannot read {stream!r} at {seq}: {exc!r}") from exc
        stamp = raw.time.timestamp() if raw.time is not None else 0.0
        return StoredMessage(raw.seq or seq, raw.subject or "", raw.data or b"", raw.headers, stamp)

    async def ack_wait(self, stream: str, durable: str) -> float | None:
        """The ack wait in force on the durable consumer (seconds), ``None`` when there is no
        such consumer. Raises ``BusError`` when JetStream fails."""
        try:
            info = await self.js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            raise BusError(f"cannot read consumer {durable!r} of {stream!r}: {exc!r}") from exc
        return info.config.ack_wait

    async def subject_counts(self, stream: str) -> dict[str, int]:
        """Messages ``stream`` holds per subject (``{}`` when there is no such stream). Raises
        ``BusError`` when JetStream fails."""
        try:
            info = await self.js.stream_info(stream, subjects_filter=">")
        except nats.js.errors.NotFoundError:
            return {}
        except nats.errors.Error as exc:
            raise BusError(f"cannot read stream {stream!r}: {exc!r}") from exc
        return dict(info.state.subjects or {})

    async def consumer_lag(self, stream: str) -> dict[str, int]:
        """Durable consumer name -> messages of ``stream`` not yet delivered to it (``{}`` when
        there is no such stream). Raises ``BusError`` when JetStream fails."""
        try:
            infos = await self.js.consumers_info(stream)
        except nats.js.errors.NotFoundError:
            return {}
        except nats.errors.Error as exc:
            raise BusError(f"cannot list the consumers of {stream!r}: {exc!r}") from exc
        return {
            c.config.durable_name: int(c.num_pending or 0) for c in infos if c.config.durable_name
        }

    async def put_object(self, bucket: str, name: str, data: bytes) -> None:
        """Store ``data`` as ``name`` in the Object Store ``bucket`` (its full name).

        Raises ``BusError`` when the bucket is missing, or the store refuses or does not answer."""
        try:
            obs = await self.js.object_store(bucket)
            await obs.put(name, data)
        except (nats.errors.Error, TimeoutError) as exc:
            raise BusError(f"Object Store {bucket!r} did not store {name!r}: {exc!r}") from exc


def _decoding(handler: Handler) -> Callable[[Msg], Awaitable[None]]:
    """A nats callback that decodes each message for ``handler``."""

    async def cb(raw: Msg) -> None:
        try:
            msg: Message | DecodeError = decode_any(raw.data, raw.headers)
        except DecodeError as exc:
            msg = exc
        await handler(msg, raw)

    return cb


def redacted(url: str) -> str:
    """``url`` (or a comma-separated list) without any user or password in it, for logs and
    messages."""
    parts = []
    for part in (p.strip() for p in url.split(",")):
        split = urllib.parse.urlsplit(part)
        if split.username is not None or split.password is not None:
            host = split.hostname or ""
            netloc = f"{host}:{split.port}" if split.port else host
            part = urllib.parse.urlunsplit(split._replace(netloc=netloc))
        parts.append(part)
    return ",".join(parts)


def _credentials_file(path: str) -> tuple[str, str]:
    """(user, password) from a credentials file of ``aios-rl up`` (``<data-dir>/auth/<user>.json``).
    Raises ``ConnectError`` for a file that cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return str(data["user"]), str(data["password"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConnectError(f"cannot read NATS credentials from {path}: {exc}") from exc


@contextlib.asynccontextmanager
async def connect(
    url: str,
    *,
    name: str,
    names: Names | None = None,
    connect_deadline: float = 30.0,
    user: str | None = None,
    password: str | None = None,
    ca: str | None = None,
) -> AsyncIterator[Bus]:
    """Connect (retrying with back-off until ``connect_deadline``), log every disconnect and
    reconnect, reconnect forever once connected, and drain on exit.

    ``user`` / ``password`` default to the environment's ``NATS_USER`` / ``NATS_PASSWORD`` (empty
    or unset: none), else to the credentials file ``AIOS_CREDENTIALS`` names (``aios-rl up``
    writes one per user under ``<data-dir>/auth/``). A user's replies arrive on its own inbox (``contracts.access.inbox_prefix``),
    which its permissions let only it read. ``ca`` (default: the environment's ``NATS_CA``) is a
    CA file to trust: the connection then speaks TLS. Raises ``ConnectError`` when no server answered in time
    (or refused the credentials until then)."""
    if user is None and not os.environ.get("NATS_USER") and os.environ.get("AIOS_CREDENTIALS"):
        user, password = _credentials_file(os.environ["AIOS_CREDENTIALS"])
    user = (os.environ.get("NATS_USER", "") if user is None else user) or None
    password = (os.environ.get("NATS_PASSWORD", "") if password is None else password) or None
    ca = (os.environ.get("NATS_CA", "") if ca is None else ca) or None
    try:
        tls = ssl.create_default_context(cafile=ca) if ca else None
    except OSError as exc:  # ssl.SSLError too
        raise ConnectError(f"cannot use the CA file {ca} to reach NATS: {exc}") from exc
    log = get_logger(nats_url=redacted(url), **({"nats_user": user} if user else {}))

    async def on_disconnect() -> None:
        if not (nc.is_closed or nc.is_draining):
            log.warning("nats.disconnected")

    async def on_reconnect() -> None:
        log.info("nats.reconnected")

    connected = False
    refused = False

    async def on_error(exc: Exception) -> None:
        nonlocal refused
        if connected:
            log.warning("nats.error", error=repr(exc))
        else:
            refused = refused or "authorization" in str(exc).lower()
            log.debug("nats.connect_retry", error=repr(exc))

    nc = Client()
    try:
        async with asyncio.timeout(connect_deadline):
            await nc.connect(
                [u.strip() for u in url.split(",") if u.strip()],  # a cluster: any member
                name=name,
                connect_timeout=2,
                allow_reconnect=True,
                max_reconnect_attempts=-1,  # long-running services never give up once connected
                reconnect_time_wait=0.5,
                drain_timeout=5,
                disconnected_cb=on_disconnect,
                reconnected_cb=on_reconnect,
                error_cb=on_error,
                **(
                    {"user": user, "password": password or "", "inbox_prefix": inbox_prefix(user)}
                    if user
                    else {}
                ),
                **({"tls": tls} if tls else {}),
            )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        await nc.close()
        if refused or isinstance(exc, nats.errors.AuthorizationError):
            raise ConnectError(
                f"the NATS server at {redacted(url)} refused "
                + (f"user {user}'s credentials" if user else "a connection without credentials")
                + " (aios-rl up keeps them in <data-dir>/auth/; see docs/security.md)"
            ) from exc
        raise ConnectError(
            f"no NATS server answered at {redacted(url)} within {connect_deadline:g}s"
            + (f" (as user {user})" if user else "")
        ) from exc
    connected = True
    log.debug("nats.connected")
    try:
        yield Bus(nc, names or Names())
    finally:
        if not nc.is_closed:
            try:
                await nc.drain()
            except (TimeoutError, nats.errors.ConnectionClosedError, nats.errors.FlushTimeoutError):
                await nc.close()
