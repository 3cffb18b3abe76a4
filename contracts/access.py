"""Who may do what on the bus: one declaration per service, and the NATS permissions derived
from it.

A service's :class:`Access` names what it does in the words of the rest of ``contracts``: the
durable consumers of :func:`~contracts.subjects.topology` it pulls, the subjects it serves,
publishes and requests, the KV buckets and Object Stores it writes, the streams it purges.
:func:`permissions` turns that into the ``publish`` / ``subscribe`` allow and deny lists a
nats-server enforces; :func:`access` declares every built-in service. A service added later
declares its own ``Access`` (a runner of a new environment gets one from :func:`runner_access`).

What every service may do: read any stream, KV bucket and Object Store (JetStream info, direct
gets, ephemeral ordered consumers), answer the requests it receives (``allow_responses``), answer
``nats.micro`` discovery (``$SRV.>``), receive replies on its own inbox (``_INBOX.<user>.>``),
dead-letter what it consumes (``dlq.<stream>`` and the ``evidence`` Object Store), and, when it
serves endpoints, the requests it refuses for want of a reply subject (``dlq.REQUESTS`` and
``evidence``). A service that serves endpoints may also publish to the inboxes of the users
declared to request them and to the admin's (:func:`answerers`): nats-server keeps the one-reply
permission of ``allow_responses`` per connection, so without it an answer is refused when the
responder reconnected (to another node of a cluster, say) between a request and its reply, and
the requester waits out its whole timeout. What no service may do: create, update, delete,
purge (but its own), snapshot or restore a stream, delete a consumer, or touch another
service's durable consumer. Those belong to the admin user (``aios-rl up`` and the command
line), which has no restrictions and provisions the topology.

Pure data and functions: imports only msgspec and the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from .subjects import (
    BUCKET_AGENT_EPISODES,
    BUCKET_CHECKPOINTS,
    BUCKET_COMPARISON,
    BUCKET_CONTROL,
    BUCKET_LEDGER,
    DLQ_REQUESTS,
    OBJECTS_EVIDENCE,
    OBJECTS_RAIL,
    OBJECTS_WEIGHTS,
    STREAM_REPLAY,
    Names,
    Topology,
    runner_name,
    topology,
)
from .vocab import ENVIRONMENTS

__all__ = [
    "ADMIN",
    "Access",
    "Permissions",
    "access",
    "answerers",
    "inbox_prefix",
    "permissions",
    "runner_access",
    "teacher_access",
]

ADMIN = "admin"
"""The unrestricted user: ``aios-rl up`` (which provisions the topology) and the command line."""

TEACHER_BACKENDS = (
    "oracle",
    "noisy-oracle",
    "claude",
    "codex",
    "gemini",
    "opencode",
    "openai",
    "ts",
)
"""The teacher backends the stack deploys, each as the service ``teacher-<backend>``."""

_JS = "$JS.API"

_READ = (
    f"{_JS}.INFO",
    f"{_JS}.STREAM.INFO.*",
    f"{_JS}.STREAM.NAMES",
    f"{_JS}.STREAM.LIST",
    f"{_JS}.STREAM.MSG.GET.*",
    f"{_JS}.DIRECT.GET.>",
    f"{_JS}.CONSUMER.INFO.*.*",
    f"{_JS}.CONSUMER.NAMES.*",
    f"{_JS}.CONSUMER.LIST.*",
    # Ephemeral consumers only (KV watches, object reads, ordered stream reads): the server
    # refuses a durable name on this subject.
    f"{_JS}.CONSUMER.CREATE.*",
    "$JS.FC.>",  # flow-control replies of ordered consumers
)
"""What every service may publish to read JetStream state."""

_ADMIN_ONLY = (
    f"{_JS}.STREAM.CREATE.>",
    f"{_JS}.STREAM.UPDATE.>",
    f"{_JS}.STREAM.DELETE.>",
    f"{_JS}.STREAM.SNAPSHOT.>",
    f"{_JS}.STREAM.RESTORE.>",
    f"{_JS}.STREAM.PEER.>",
    f"{_JS}.STREAM.LEADER.>",
    f"{_JS}.CONSUMER.DELETE.>",
    f"{_JS}.ACCOUNT.>",
    f"{_JS}.SERVER.>",
    f"{_JS}.META.>",
)
"""Denied to every service whatever it declares (a deny beats an allow)."""


class Access(msgspec.Struct, frozen=True, kw_only=True):
    """What one service does on the bus (full names and subjects, under one namespace)."""

    user: str
    """Its NATS user: the service's name (``trainer``, ``shell-runner``, ...)."""
    consumes: tuple[str, ...] = ()
    """Durable consumers of the topology it pulls (it may create them and set their ack wait)."""
    serves: tuple[str, ...] = ()
    """Subjects it subscribes to (endpoints: it answers each request once)."""
    publishes: tuple[str, ...] = ()
    """Subjects it publishes on, core or JetStream."""
    requests: tuple[str, ...] = ()
    """Subjects it sends requests on."""
    kv_writes: tuple[str, ...] = ()
    """KV buckets it writes (puts, deletes, purges of its keys)."""
    kv_keys: tuple[tuple[str, str], ...] = ()
    """(bucket, key pattern) pairs it may put, where it writes only some keys of a bucket."""
    object_writes: tuple[str, ...] = ()
    """Object Stores it writes."""
    purges: tuple[str, ...] = ()
    """Streams it trims (``$JS.API.STREAM.PURGE``)."""


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    """A nats-server user's ``permissions`` block."""

    publish_allow: tuple[str, ...]
    publish_deny: tuple[str, ...]
    subscribe_allow: tuple[str, ...]
    subscribe_deny: tuple[str, ...] = ()
    allow_responses: bool = True
    """Whether it may answer the requests it receives (on their reply subject, once each)."""
    response_window_s: float = 3600.0
    """How long after a request its answer may still go out. nats-server's default is two
    minutes; a trainer update may take fifteen (``CampaignSettings.train_timeout_s``)."""


def inbox_prefix(user: str) -> str:
    """The inbox a user's connection receives replies on: its own, so no other service can read
    them (``_INBOX.<user>``)."""
    return f"_INBOX.{user}"


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _overlaps(a: str, b: str) -> bool:
    """Whether some subject matches both NATS subject patterns ``a`` and ``b``."""
    ta, tb = a.split("."), b.split(".")
    for x, y in zip(ta, tb, strict=False):
        if ">" in (x, y):
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(ta) == len(tb)


def answerers(grants: Mapping[str, Access]) -> dict[str, tuple[str, ...]]:
    """For each service of ``grants`` that serves endpoints, the users whose requests it may
    answer on their inboxes whatever connection it answers from: those that declare a request
    on a subject it serves, and the admin (the command line), sorted."""
    out: dict[str, tuple[str, ...]] = {}
    for user, grant in grants.items():
        if not grant.serves:
            continue
        askers = {
            other.user
            for other in grants.values()
            if other.user != user
            and any(_overlaps(r, s) for r in other.requests for s in grant.serves)
        }
        out[user] = tuple(sorted({ADMIN, *askers}))
    return out


def permissions(
    names: Names,
    grant: Access,
    topo: Topology | None = None,
    *,
    answers: tuple[str, ...] = (),
) -> Permissions:
    """The permissions of ``grant`` under ``names``: reads for everyone, writes as declared,
    stream and consumer management for nobody (see the module docstring). ``answers``: the
    users on whose inboxes it may always publish its answers (:func:`answerers`).

    Raises ``KeyError`` when ``grant`` consumes a durable the topology does not declare."""
    topo = topo or topology(names)
    pub: list[str] = [*_READ]
    sub: list[str] = [f"{inbox_prefix(grant.user)}.>", "$SRV.>"]
    dead_letters = bool(grant.consumes or grant.serves)
    if grant.serves:
        pub.append(names.dlq(DLQ_REQUESTS))
    for durable in grant.consumes:
        spec = topo.consumer(durable)
        stream, base = spec.stream, spec.stream[len(names.stream("")) :]
        pub += [
            f"{_JS}.CONSUMER.CREATE.{stream}.{durable}",
            f"{_JS}.CONSUMER.CREATE.{stream}.{durable}.>",
            f"{_JS}.CONSUMER.DURABLE.CREATE.{stream}.{durable}",
            f"{_JS}.CONSUMER.MSG.NEXT.{stream}.{durable}",
            f"$JS.ACK.{stream}.{durable}.>",
            names.dlq(base),
        ]
        sub += [
            f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{durable}",
            f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream}.{durable}",
        ]
    objects = [*grant.object_writes, *([names.bucket(OBJECTS_EVIDENCE)] if dead_letters else [])]
    for bucket in grant.kv_writes:
        pub += [f"$KV.{bucket}.>", f"{_JS}.STREAM.PURGE.KV_{bucket}"]
    pub += [f"$KV.{bucket}.{key}" for bucket, key in grant.kv_keys]
    for bucket in objects:
        # Chunks and metadata; replacing an object purges the old chunks.
        pub += [f"$O.{bucket}.>", f"{_JS}.STREAM.PURGE.OBJ_{bucket}"]
    pub += [f"{_JS}.STREAM.PURGE.{stream}" for stream in grant.purges]
    pub += [*grant.publishes, *grant.requests]
    pub += [f"{inbox_prefix(user)}.>" for user in answers]
    sub += [*grant.serves, names.status(grant.user)]
    return Permissions(
        publish_allow=_unique(pub), publish_deny=_ADMIN_ONLY, subscribe_allow=_unique(sub)
    )


def runner_access(names: Names, env: str) -> Access:
    """A runner of ``env`` (any environment, built-in or registered later): pulls its jobs, asks
    the sampler, publishes completed episodes; reads tasks, writes nothing else."""
    browser = env == "browser"  # it also opens and judges sessions, keeps screenshots
    return Access(
        user=runner_name(env),
        consumes=(runner_name(env),),
        # Episodes driven from outside (agents through the agent gateway).
        serves=(names.env_open(env), names.env_step(env, "*"), names.env_close(env, "*")),
        requests=(
            names.policy_act(),
            names.agent_attach(),
            *((names.sites("*"),) if browser else ()),
        ),
        publishes=(names.episode("completed", env),),
        object_writes=(names.bucket(OBJECTS_EVIDENCE),) if browser else (),
    )


def teacher_access(names: Names, backend: str) -> Access:
    """A teacher backend: answers ``teacher.request.<backend>``, keeps its raw output as evidence."""
    return Access(
        user=f"teacher-{backend}",
        serves=(names.teacher_request(backend),),
        object_writes=(names.bucket(OBJECTS_EVIDENCE),),
    )


def access(names: Names, environments: tuple[str, ...] = ENVIRONMENTS) -> dict[str, Access]:
    """Every built-in service's declaration, by user name."""
    checkpoints = names.bucket(BUCKET_CHECKPOINTS)
    events = (names.checkpoint_event("*"),)
    grants = [
        Access(
            user="campaign",
            consumes=("campaign",),
            serves=(names.campaign_cmd("*"),),
            publishes=(
                names.rollout_job("*"),
                names.campaign_event("*"),
                names.rail_trace(),
                *events,
            ),
            requests=(names.comparison_verdict(), names.trainer_update(), names.rail_decide()),
            kv_writes=(
                checkpoints,
                names.bucket(BUCKET_CONTROL),
                names.bucket(BUCKET_LEDGER),
            ),
        ),
        Access(
            user="trainer",
            serves=(names.trainer_update(),),
            publishes=events,
            requests=(names.replay_sample(),),
            kv_writes=(checkpoints,),
            object_writes=(names.bucket(OBJECTS_WEIGHTS),),
        ),
        Access(
            user="sampler",
            serves=(names.policy_act(), names.policy_complete()),
            publishes=(names.agent_stream("*"),),
        ),
        Access(
            user="agent-gateway",
            # agent.stream.*: the text of the completions it asked for, as they are written.
            serves=(names.agent_attach(), names.agent_stream("*")),
            requests=(
                names.policy_complete(),
                names.env_open("*"),
                names.env_step("*", "*"),
                names.env_close("*", "*"),
            ),
            publishes=(names.agent_call("*"),),
            kv_keys=((names.bucket(BUCKET_AGENT_EPISODES), "episode.*"),),
        ),
        *(runner_access(names, env) for env in environments),
        Access(
            user="teacher-gateway",
            consumes=("teacher-gateway",),
            publishes=(names.episode("taught", "*"),),
            requests=(names.teacher_request("*"),),
            # Its own control snapshot, written with the defaults when there is none.
            kv_keys=(
                (names.bucket(BUCKET_CONTROL), "gateway.*"),
            ),  # Names.key_control("gateway", id)
        ),
        *(teacher_access(names, backend) for backend in TEACHER_BACKENDS),
        Access(user="reward", consumes=("reward",), publishes=(names.episode("rewarded", "*"),)),
        Access(
            user="comparison",
            consumes=("comparison",),
            serves=(names.comparison_verdict(),),
            publishes=(names.episode("compared", "*"),),
            kv_writes=(names.bucket(BUCKET_COMPARISON),),
        ),
        Access(
            user="rail",
            consumes=("rail",),
            serves=(names.rail_decide(),),
            # Its own controllers' snapshots (Names.key_control("rail", campaign_id)).
            kv_keys=((names.bucket(BUCKET_CONTROL), "rail.*"),),
            object_writes=(names.bucket(OBJECTS_RAIL),),
        ),
        # Answers the browser runners; its pages are served over HTTP, not the bus.
        Access(user="sites", serves=(names.sites("*"),)),
        # Reads only (what every service may read, ephemeral ordered consumers) and asks
        # nats.micro discovery who is running; serves its page over HTTP.
        Access(user="dashboard", requests=("$SRV.INFO", "$SRV.STATS")),
        Access(
            user="replay",
            consumes=("replay",),
            serves=(names.replay_sample(),),
            publishes=(names.replay("*", "*"),),
            purges=(names.stream(STREAM_REPLAY),),
        ),
    ]
    return {g.user: g for g in grants}
