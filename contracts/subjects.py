"""Every subject, stream, consumer, KV bucket, key and object name of aios-rl, in one place.

No other module spells a subject: services ask a :class:`Names` for it. A ``Names`` carries an
optional namespace so that several stacks (or several tests) can share one NATS server without
seeing each other: subjects get ``<ns>.`` in front, streams and buckets ``<ns>_``.

:func:`topology` declares what JetStream must hold (streams, durable consumers, KV buckets,
object stores) as plain data; the bus kit applies it idempotently at start-up.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

from .vocab import ENVIRONMENTS, Environment, Lane, Stage

__all__ = [
    "SCHEMA_HEADER",
    "BucketSpec",
    "ConsumerSpec",
    "Names",
    "ObjectStoreSpec",
    "StreamSpec",
    "Topology",
    "runner_consumer",
    "runner_name",
    "topology",
]

SCHEMA_HEADER = "Aios-Schema"
"""The header that names a message's contract (``episode.v1``, ...)."""

MSG_ID_HEADER = "Nats-Msg-Id"
"""JetStream's de-duplication header; we set it to ``<episode_id>:<stage>`` and the like."""

_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_-]{0,32}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+$")

Wild = Literal["*", ">"]

# Stream, bucket and consumer base names (before namespacing).
STREAM_ROLLOUTS = "ROLLOUTS"
STREAM_EPISODES = "EPISODES"
STREAM_REPLAY = "REPLAY"
STREAM_EVENTS = "EVENTS"
STREAM_RAIL = "RAIL"
STREAM_DLQ = "DLQ"
STREAM_AGENTS = "AGENTS"
DLQ_REQUESTS = "REQUESTS"
"""Where dead letters of requests go (``dlq.REQUESTS``, in the stream ``DLQ``): a request sent
to an endpoint without a reply subject, which no stream holds."""

BUCKET_CHECKPOINTS = "checkpoints"
BUCKET_CONTROL = "control"
BUCKET_LEDGER = "ledger"
BUCKET_COMPARISON = "comparison"
BUCKET_AGENT_EPISODES = "agent_episodes"
OBJECTS_WEIGHTS = "weights"
OBJECTS_EVIDENCE = "evidence"
OBJECTS_RAIL = "rail"
OBJECTS_TASKS = "tasks"


def _token(value: str, what: str) -> str:
    if not _TOKEN_RE.match(value):
        raise ValueError(
            f"{what} {value!r} is not a valid subject token: use letters, digits, '-' or '_'."
        )
    return value


class Names:
    """Builds every name for one namespace (``""``: none).

    Raises ``ValueError`` when the namespace or a token would make an invalid subject."""

    def __init__(self, namespace: str = "") -> None:
        if not _NAMESPACE_RE.match(namespace):
            raise ValueError(
                f"namespace {namespace!r} is invalid: use up to 32 letters, digits, '-' or '_'."
            )
        self.namespace = namespace
        self._subj = f"{namespace}." if namespace else ""
        self._res = f"{namespace}_" if namespace else ""

    def __repr__(self) -> str:
        return f"Names({self.namespace!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Names) and other.namespace == self.namespace

    def __hash__(self) -> int:
        return hash(self.namespace)

    def subject(self, *tokens: str) -> str:
        """Join tokens under this namespace (the one place a subject string is built)."""
        return self._subj + ".".join(tokens)

    def strip(self, subject: str) -> str:
        """The subject without this namespace's prefix (for display)."""
        return (
            subject[len(self._subj) :] if self._subj and subject.startswith(self._subj) else subject
        )

    # -- subjects ---------------------------------------------------------------------------
    def rollout_job(self, env: Environment | Wild = "*") -> str:
        return self.subject("rollout", "job", env)

    def episode(self, stage: Stage | Wild = "*", env: Environment | Wild = "*") -> str:
        if stage == ">":
            return self.subject("episode", ">")
        return self.subject("episode", stage, env)

    def policy_act(self) -> str:
        return self.subject("policy", "act")

    def policy_complete(self) -> str:
        return self.subject("policy", "complete")

    def env_open(self, env: str) -> str:
        """Open an episode of ``env`` driven from outside (its runners share it)."""
        return self.subject("env", "open", env)

    def env_step(self, env: str, instance: str) -> str:
        """A step of an episode held by runner ``instance`` of ``env``."""
        return self.subject("env", "step", env, instance)

    def env_close(self, env: str, instance: str) -> str:
        return self.subject("env", "close", env, instance)

    def agent_attach(self) -> str:
        """A runner hands an episode to the agent it starts (the agent gateway answers)."""
        return self.subject("agent", "attach")

    def agent_stream(self, request_id: str) -> str:
        """The text of one chat completion as it is written (``CompletionDelta``, core NATS, no
        stream: the sampler publishes, the agent gateway that asked listens; ``*``: any)."""
        token = request_id if request_id == "*" else _token(request_id, "request id")
        return self.subject("agent", "stream", token)

    def agent_call(self, episode_id: str) -> str:
        """An agent's recorded chat completions in one episode (``*``: every episode's)."""
        token = episode_id if episode_id == "*" else _token(episode_id, "episode id")
        return self.subject("agent", "call", token)

    def rail_decide(self) -> str:
        return self.subject("rail", "decide")

    def rail_trace(self) -> str:
        return self.subject("rail", "trace")

    def sites(self, verb: Literal["open", "result", "close"] | Wild) -> str:
        """The sites service's endpoints (browser runners open, judge and close sessions)."""
        return self.subject("sites", verb)

    def teacher_request(self, backend: str | Wild = "*") -> str:
        return self.subject(
            "teacher", "request", backend if backend in ("*", ">") else _token(backend, "backend")
        )

    def campaign_cmd(self, verb: Literal["start", "stop", "status", "resume"] | Wild = "*") -> str:
        return self.subject("campaign", "cmd", verb)

    def campaign_event(self, kind: str = "*") -> str:
        return self.subject(
            "campaign", "event", kind if kind in ("*", ">") else _token(kind, "event kind")
        )

    def checkpoint_event(self, kind: str = "*") -> str:
        return self.subject(
            "checkpoint", "event", kind if kind in ("*", ">") else _token(kind, "event kind")
        )

    def trainer_update(self) -> str:
        return self.subject("trainer", "cmd", "update")

    def replay(self, lane: Lane | Wild = "*", env: Environment | Wild = "*") -> str:
        return self.subject("replay", lane, env)

    def comparison_verdict(self) -> str:
        """Request/reply: an ``EpochVerdictRequest`` answered by an ``EpochVerdict``."""
        return self.subject("comparison", "verdict")

    def replay_sample(self) -> str:
        return self.subject("replay", "sample")

    def dlq(self, stream_base: str | Wild = ">") -> str:
        """Dead-letter subject of a stream (given by its base name, e.g. ``EPISODES``)."""
        return self.subject(
            "dlq", stream_base if stream_base in ("*", ">") else _token(stream_base, "stream")
        )

    def status(self, service: str) -> str:
        """The ``status`` endpoint of a service (answers a ``ServiceStatus``)."""
        return self.subject("aios", "status", _token(service, "service"))

    # -- JetStream resources ------------------------------------------------------------------
    def stream(self, base: str) -> str:
        return self._res + base

    def bucket(self, base: str) -> str:
        return self._res + base

    # -- keys and object names ------------------------------------------------------------------
    @staticmethod
    def key_pointers() -> str:
        return "pointers"

    @staticmethod
    def key_checkpoint_meta(checkpoint_id: str) -> str:
        return f"meta.{_token(checkpoint_id, 'checkpoint id')}"

    @staticmethod
    def key_control(owner: Literal["campaign", "rail", "gateway"], ident: str = "default") -> str:
        return f"{owner}.{_token(ident, 'control id')}"

    @staticmethod
    def key_epoch(campaign_id: str, epoch: int) -> str:
        return f"{_token(campaign_id, 'campaign id')}.{epoch:06d}"

    @staticmethod
    def key_heldout(campaign_id: str, epoch: int) -> str:
        """The held-out score of the policy active when ``epoch`` of a campaign began."""
        return f"heldout.{_token(campaign_id, 'campaign id')}.{epoch:06d}"

    @staticmethod
    def key_heldouts() -> str:
        """KV filter over every campaign's held-out scores."""
        return "heldout.*.*"

    @staticmethod
    def key_arrivals(campaign_id: str, epoch: int) -> str:
        """The campaign's record of which scheduled episodes of an epoch have come back."""
        return f"arrivals.{_token(campaign_id, 'campaign id')}.{epoch:06d}"

    @staticmethod
    def key_rollout(campaign_id: str, epoch: int, episode_id: str) -> str:
        """What planning reads of one arrived rollout (a ``RolloutSummary``)."""
        return (
            f"rollout.{_token(campaign_id, 'campaign id')}.{epoch:06d}."
            f"{_token(episode_id, 'episode id')}"
        )

    @staticmethod
    def key_agent_episode(episode_id: str) -> str:
        """What the agent gateway keeps of one agent episode (an ``AgentEpisodeState``)."""
        return f"episode.{_token(episode_id, 'episode id')}"

    @staticmethod
    def key_rollouts(campaign_id: str, epoch: int) -> str:
        """KV filter over every rollout summary of one epoch."""
        return f"rollout.{_token(campaign_id, 'campaign id')}.{epoch:06d}.*"

    @staticmethod
    def key_task_stats(task_id: str, checkpoint_id: str) -> str:
        """Comparison's running statistics of one checkpoint on one task."""
        return f"stats.{_token(task_id, 'task id')}.{_token(checkpoint_id, 'checkpoint id')}"

    @staticmethod
    def key_pending(episode_id: str) -> str:
        """An episode waiting for its reference results."""
        return f"pending.{_token(episode_id, 'episode id')}"

    @staticmethod
    def key_task_stats_of(checkpoint_id: str) -> str:
        """KV filter over every task's statistics of one checkpoint (``stats.*.<checkpoint>``)."""
        return f"stats.*.{_token(checkpoint_id, 'checkpoint id')}"

    @staticmethod
    def key_compared(episode_id: str) -> str:
        """Comparison's marker that an episode went out on ``episode.compared``: a duplicate that
        arrives after the stream's de-duplication window is still dropped."""
        return f"compared.{_token(episode_id, 'episode id')}"

    @staticmethod
    def object_task(environment: str, task_id: str) -> str:
        return f"{_token(environment, 'environment')}/{_token(task_id, 'task id')}.json"

    @staticmethod
    def object_task_index(environment: str, split: str) -> str:
        return f"{_token(environment, 'environment')}/index-{_token(split, 'split')}.json"

    @staticmethod
    def object_weights(checkpoint_id: str) -> str:
        return f"{_token(checkpoint_id, 'checkpoint id')}.weights"

    @staticmethod
    def object_teacher_raw(backend: str, digest: str) -> str:
        """A teacher backend's raw output (in Object Store ``evidence``), by content digest."""
        return f"teacher-raw/{_token(backend, 'backend')}/{_token(digest, 'digest')}.txt"


# -- topology ---------------------------------------------------------------------------------


class StreamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A JetStream stream to hold."""

    name: str
    subjects: list[str]
    retention: Literal["limits", "workqueue", "interest"] = "limits"
    max_age_s: float = 0.0
    max_msgs_per_subject: int = -1
    max_bytes: int = -1
    duplicate_window_s: float = 120.0
    description: str = ""


class ConsumerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A durable pull consumer: replicas of its service share it and split the work."""

    stream: str
    durable: str
    filter_subject: str
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    backoff_s: list[float] = msgspec.field(default_factory=lambda: [1.0, 5.0, 15.0, 30.0])
    """Redelivery delays after a failure (the n-th failure waits the n-th value)."""
    max_ack_pending: int = 256


class BucketSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A KV bucket."""

    name: str
    history: int = 16
    description: str = ""
    ttl_s: float = 0.0
    """Seconds a key lives after its last write (0: forever)."""


class ObjectStoreSpec(msgspec.Struct, frozen=True, kw_only=True):
    """An Object Store bucket."""

    name: str
    description: str = ""


class Topology(msgspec.Struct, frozen=True, kw_only=True):
    """Everything JetStream must hold for the stack."""

    streams: list[StreamSpec]
    consumers: list[ConsumerSpec]
    buckets: list[BucketSpec]
    object_stores: list[ObjectStoreSpec]

    def consumer(self, durable: str) -> ConsumerSpec:
        """The consumer named ``durable``; raises ``KeyError`` when none is declared."""
        for spec in self.consumers:
            if spec.durable == durable:
                return spec
        raise KeyError(
            f"no durable consumer named {durable!r} is declared in contracts.subjects.topology"
        )


DAY = 86400.0


RUNNER_ACK_WAIT_S: dict[str, float] = {"shell": 60.0, "orchestrator": 30.0, "browser": 60.0}
"""Ack wait of each built-in environment's runner consumer; others get the default below. A
running episode's job is kept alive by heartbeats, so this only says how soon the jobs a killed
runner held go to another replica: short, and well inside a campaign's episode deadline (the
campaign stretches a deadline shorter than three ack waits)."""

DEFAULT_RUNNER_ACK_WAIT_S = 60.0


def runner_name(env: str) -> str:
    """The deployment and durable consumer of ``env``'s runners: ``<env>-runner``."""
    return f"{_token(env, 'environment')}-runner"


def runner_consumer(names: Names, env: str, ack_wait_s: float | None = None) -> ConsumerSpec:
    """The durable consumer every replica of ``env``'s runner shares (one per environment)."""
    return ConsumerSpec(
        stream=names.stream(STREAM_ROLLOUTS),
        durable=runner_name(env),
        filter_subject=names.rollout_job(env),
        ack_wait_s=ack_wait_s or RUNNER_ACK_WAIT_S.get(env, DEFAULT_RUNNER_ACK_WAIT_S),
        max_ack_pending=64,
    )


def topology(names: Names, environments: tuple[str, ...] = ENVIRONMENTS) -> Topology:
    """The JetStream resources of the stack under ``names``, with a runner consumer for each of
    ``environments`` (the built-in ones, plus any of the user's own the stack runs)."""
    episodes = names.stream(STREAM_EPISODES)
    rollouts = names.stream(STREAM_ROLLOUTS)

    def consumer(durable: str, stream: str, filter_subject: str, **kw: object) -> ConsumerSpec:
        return ConsumerSpec(stream=stream, durable=durable, filter_subject=filter_subject, **kw)  # type: ignore[arg-type]

    return Topology(
        streams=[
            StreamSpec(
                name=rollouts,
                subjects=[names.rollout_job("*")],
                max_age_s=7 * DAY,
                duplicate_window_s=3600.0,
                description="Rollout jobs, one subject per environment.",
            ),
            StreamSpec(
                name=episodes,
                subjects=[names.episode(">")],
                max_age_s=14 * DAY,
                duplicate_window_s=3600.0,
                description="Every episode at every pipeline stage.",
            ),
            StreamSpec(
                name=names.stream(STREAM_REPLAY),
                subjects=[names.replay("*", "*")],
                max_msgs_per_subject=50_000,
                description="Replay lanes per environment.",
            ),
            StreamSpec(
                name=names.stream(STREAM_EVENTS),
                subjects=[names.campaign_event(">"), names.checkpoint_event(">")],
                max_age_s=30 * DAY,
                description="Campaign and checkpoint events.",
            ),
            StreamSpec(
                name=names.stream(STREAM_RAIL),
                subjects=[names.rail_trace()],
                max_age_s=30 * DAY,
                duplicate_window_s=3600.0,
                description="RAIL (z, b, y) traces.",
            ),
            StreamSpec(
                name=names.stream(STREAM_AGENTS),
                subjects=[names.agent_call("*")],
                max_age_s=14 * DAY,
                duplicate_window_s=3600.0,
                description="Agents' chat completions, per episode, as served.",
            ),
            StreamSpec(
                name=names.stream(STREAM_DLQ),
                subjects=[names.dlq(">")],
                max_age_s=30 * DAY,
                description="Dead letters of every stream.",
            ),
        ],
        consumers=[
            consumer(
                "teacher-gateway", episodes, names.episode("completed", "*"), ack_wait_s=120.0
            ),
            consumer("reward", episodes, names.episode("taught", "*")),
            consumer("comparison", episodes, names.episode("rewarded", "*")),
            consumer("replay", episodes, names.episode("compared", "*")),
            consumer("campaign", episodes, names.episode("compared", "*")),
            consumer("rail", names.stream(STREAM_RAIL), names.rail_trace()),
            *(runner_consumer(names, env) for env in dict.fromkeys(environments)),
        ],
        buckets=[
            BucketSpec(
                name=names.bucket(BUCKET_CHECKPOINTS),
                history=64,
                description="Checkpoint pointers and metadata.",
            ),
            BucketSpec(
                name=names.bucket(BUCKET_CONTROL),
                history=32,
                description="Restart-safe control snapshots.",
            ),
            BucketSpec(
                name=names.bucket(BUCKET_COMPARISON),
                history=1,
                description="Comparison statistics per (task, checkpoint) and pending comparisons.",
                # Marks, statistics and pending comparisons matter for minutes to hours (an epoch,
                # a late duplicate); a week after their last write they go.
                ttl_s=7 * 24 * 3600.0,
            ),
            BucketSpec(
                name=names.bucket(BUCKET_LEDGER),
                history=16,
                description="Epoch ledger: one record per campaign epoch.",
            ),
            BucketSpec(
                name=names.bucket(BUCKET_AGENT_EPISODES),
                history=1,
                description="Agent episodes the agent gateway serves: owner, pinned checkpoint, "
                "calls, environment, what a continuation replays.",
                # An episode lasts minutes; a day after its last request it goes.
                ttl_s=24 * 3600.0,
            ),
        ],
        object_stores=[
            ObjectStoreSpec(name=names.bucket(OBJECTS_WEIGHTS), description="Checkpoint weights."),
            ObjectStoreSpec(
                name=names.bucket(OBJECTS_TASKS),
                description="Environment tasks, content-addressed, with one index per split.",
            ),
            ObjectStoreSpec(
                name=names.bucket(OBJECTS_EVIDENCE),
                description="Screenshots, long logs, raw teacher output.",
            ),
            ObjectStoreSpec(
                name=names.bucket(OBJECTS_RAIL),
                description="RAIL scorer weights, per campaign and version.",
            ),
        ],
    )
