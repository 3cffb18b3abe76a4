"""The stack's message-driven API as an AsyncAPI 3.0 document, generated from ``contracts``:
every subject (channel), who sends and who receives on it, request/reply pairs, the JetStream
stream that keeps it, the message schemas (the JSON Schemas of ``contracts/schema/``), the
headers (``Aios-Schema``, ``Nats-Msg-Id``), the error convention, the KV buckets and the schema of
the values under each key pattern.

``python -m contracts.asyncapi`` writes ``contracts/asyncapi.json`` and ``docs/asyncapi.md`` (the
same, as a page to read without any tool or network); a test fails while they and the code
disagree. Pure: the standard library only.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from . import MESSAGES
from .subjects import (
    BUCKET_CHECKPOINTS,
    BUCKET_COMPARISON,
    BUCKET_CONTROL,
    BUCKET_LEDGER,
    SCHEMA_HEADER,
    STREAM_AGENTS,
    STREAM_DLQ,
    STREAM_EPISODES,
    STREAM_EVENTS,
    STREAM_RAIL,
    STREAM_REPLAY,
    STREAM_ROLLOUTS,
)

__all__ = ["CHANNELS", "KV_SCHEMAS", "Channel", "render", "render_markdown", "write"]

ROOT = Path(__file__).resolve().parent
DOC_PATH = ROOT / "asyncapi.json"
PAGE_PATH = ROOT.parent / "docs" / "asyncapi.md"


@dataclass(frozen=True)
class Channel:
    """One subject (``{param}`` where a token varies) and what travels on it."""

    name: str
    subject: str
    message: str
    """Schema name of the message (the request, for a request/reply channel)."""
    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    description: str
    reply: str = ""
    """Schema name of the reply (request/reply channels)."""
    stream: str = ""
    """The JetStream stream that keeps it (empty: core NATS)."""
    msg_id: str = ""
    """What the ``Nats-Msg-Id`` header holds (JetStream publishes)."""


ENV = "{environment}"
CHANNELS: tuple[Channel, ...] = (
    Channel(
        "rolloutJob",
        f"rollout.job.{ENV}",
        "rollout_job.v1",
        ("campaign",),
        ("<environment>-runner",),
        "A rollout (or branch, or reference run) to execute.",
        stream=STREAM_ROLLOUTS,
        msg_id="<job_id>",
    ),
    Channel(
        "episodeCompleted",
        f"episode.completed.{ENV}",
        "episode.v1",
        ("<environment>-runner",),
        ("teacher-gateway",),
        "An episode as the runner finished it.",
        stream=STREAM_EPISODES,
        msg_id="<episode_id>:completed",
    ),
    Channel(
        "episodeTaught",
        f"episode.taught.{ENV}",
        "episode.v1",
        ("teacher-gateway",),
        ("reward",),
        "The episode with the teacher's signal (or why there is none).",
        stream=STREAM_EPISODES,
        msg_id="<episode_id>:taught",
    ),
    Channel(
        "episodeRewarded",
        f"episode.rewarded.{ENV}",
        "episode.v1",
        ("reward",),
        ("comparison",),
        "The episode with its fused reward and breakdown.",
        stream=STREAM_EPISODES,
        msg_id="<episode_id>:rewarded",
    ),
    Channel(
        "episodeCompared",
        f"episode.compared.{ENV}",
        "episode.v1",
        ("comparison",),
        ("replay", "campaign", "dashboard"),
        "The episode compared with the reference policy on the same task.",
        stream=STREAM_EPISODES,
        msg_id="<episode_id>:compared",
    ),
    Channel(
        "replayLane",
        "replay.{lane}.{environment}",
        "episode.v1",
        ("replay",),
        ("replay",),
        "An episode in its replay lane (positive, neutral, negative, diagnostic_only).",
        stream=STREAM_REPLAY,
        msg_id="<episode_id>:replay",
    ),
    Channel(
        "policyAct",
        "policy.act",
        "act_request.v1",
        ("<environment>-runner",),
        ("sampler",),
        "One decision of the student: the candidates scored, one drawn.",
        reply="act_response.v1",
    ),
    Channel(
        "policyComplete",
        "policy.complete",
        "completion_request.v1",
        ("agent-gateway",),
        ("sampler",),
        "One chat completion of an agent's conversation by a language-model student: the "
        "prompt rendered by its chat template, the completion's token ids and log-probs.",
        reply="completion_response.v1",
    ),
    Channel(
        "envOpen",
        "env.open.{environment}",
        "env_open.v1",
        ("agent-gateway",),
        ("<environment>-runner",),
        "Open an episode an agent drives from outside; one of the environment's runners holds it.",
        reply="env_state.v1",
    ),
    Channel(
        "envStep",
        "env.step.{environment}.{instance}",
        "env_step.v1",
        ("agent-gateway",),
        ("<environment>-runner",),
        "One action of an agent in the episode the runner instance holds.",
        reply="env_state.v1",
    ),
    Channel(
        "envClose",
        "env.close.{environment}.{instance}",
        "env_close.v1",
        ("agent-gateway",),
        ("<environment>-runner",),
        "End an agent's episode; the answer is its last state (the result, once done).",
        reply="env_state.v1",
    ),
    Channel(
        "agentAttach",
        "agent.attach",
        "agent_episode.v1",
        ("<environment>-runner",),
        ("agent-gateway",),
        "A runner hands an episode to the agent it starts: the agent's, pinned to the job's "
        "checkpoint, driving the runner's environment episode.",
        reply="agent_episode.v1",
    ),
    Channel(
        "agentCall",
        "agent.call.{episode_id}",
        "agent_call.v1",
        ("agent-gateway",),
        ("admin",),
        "One chat completion an agent asked for within an episode, as served (prompt and "
        "completion token ids, log-probs, the checkpoint that answered).",
        stream=STREAM_AGENTS,
        msg_id="<episode_id>:<index>",
    ),
    Channel(
        "railDecide",
        "rail.decide",
        "rail_decide_request.v1",
        ("campaign",),
        ("rail",),
        "Where and how to branch a group's rollouts.",
        reply="rail_decisions.v1",
    ),
    Channel(
        "railTrace",
        "rail.trace",
        "rail_trace.v1",
        ("campaign",),
        ("rail",),
        "What a RAIL decision brought (its realized gain).",
        stream=STREAM_RAIL,
    ),
    Channel(
        "sites",
        "sites.{verb}",
        "site_open.v1 | site_result_request.v1 | site_close.v1",
        ("browser-runner",),
        ("sites",),
        "Open, judge and close a browser episode's session (verbs open, result, close).",
        reply="site_session.v1 | site_result.v1",
    ),
    Channel(
        "teacherRequest",
        "teacher.request.{backend}",
        "teacher_request.v1",
        ("teacher-gateway",),
        ("teacher-<backend>",),
        "A compact account of an episode for one teacher backend to judge.",
        reply="teacher_signal.v1",
    ),
    Channel(
        "campaignCmd",
        "campaign.cmd.{verb}",
        "campaign_start.v1 | campaign_stop.v1 | campaign_status_request.v1 | campaign_resume.v1",
        ("aios-rl (command line)",),
        ("campaign",),
        "Start, stop, ask the status of, or resume a campaign (verbs start, stop, status, resume).",
        reply="campaign_status.v1",
    ),
    Channel(
        "campaignEvent",
        "campaign.event.{kind}",
        "campaign_event.v1",
        ("campaign",),
        ("anyone",),
        "A campaign's epoch record at each phase change.",
        stream=STREAM_EVENTS,
    ),
    Channel(
        "checkpointEvent",
        "checkpoint.event.{kind}",
        "checkpoint_event.v1",
        ("trainer", "campaign"),
        ("anyone",),
        "A checkpoint stored, or a pointer move (advanced, rolled_back, promoted).",
        stream=STREAM_EVENTS,
    ),
    Channel(
        "trainerUpdate",
        "trainer.cmd.update",
        "trainer_update.v1",
        ("campaign",),
        ("trainer",),
        "One update of the student from an epoch's groups and/or replay.",
        reply="trainer_update_result.v1",
    ),
    Channel(
        "replaySample",
        "replay.sample",
        "replay_sample_request.v1",
        ("trainer",),
        ("replay",),
        "A training batch by lane mix.",
        reply="replay_batch.v1",
    ),
    Channel(
        "comparisonVerdict",
        "comparison.verdict",
        "epoch_verdict_request.v1",
        ("campaign",),
        ("comparison",),
        "The epoch's verdict on the candidate checkpoint.",
        reply="epoch_verdict.v1",
    ),
    Channel(
        "deadLetter",
        "dlq.{stream}",
        "dead_letter.v1",
        ("every consuming service", "every serving service"),
        ("aios-rl tap", "dashboard"),
        "A message that failed for good, why, and its original bytes; on dlq.REQUESTS, a request "
        "an endpoint refused because it came without a reply subject.",
        stream=STREAM_DLQ,
    ),
    Channel(
        "serviceStatus",
        "aios.status.{service}",
        "",
        ("anyone",),
        ("<service>",),
        "A service's own counters (consumers processed, retried, dead-lettered).",
        reply="service_status.v1",
    ),
)
"""Every subject of the stack (under a namespace ``ns``, each gets ``ns.`` in front)."""

KV_SCHEMAS: dict[str, dict[str, str]] = {
    BUCKET_CHECKPOINTS: {"pointers": "checkpoint_pointers.v1", "meta.*": "checkpoint_meta.v1"},
    BUCKET_CONTROL: {
        "campaign.*": "control_snapshot.v1",
        "rail.*": "control_snapshot.v1",
        "gateway.*": "control_snapshot.v1",
    },
    BUCKET_LEDGER: {
        "*.*": "epoch_record.v1",
        "arrivals.*.*": "epoch_arrivals.v1",
        "rollout.*.*.*": "rollout_summary.v1",
        "heldout.*.*": "heldout_score.v1",
    },
    BUCKET_COMPARISON: {
        "stats.*.*": "(private to the comparison service)",
        "pending.*": "(private to the comparison service)",
        "compared.*": "(a marker: its value is empty)",
    },
}
"""KV bucket -> key pattern -> schema of the values (JSON, no header: the key says the type)."""

HEADERS = {
    "type": "object",
    "properties": {
        SCHEMA_HEADER: {
            "type": "string",
            "description": "The message's schema name (episode.v1, ...). Recommended on requests "
            "(an endpoint decodes a request without it as its declared request; a header naming "
            "another schema is refused); always set on what services send.",
        },
        "Nats-Msg-Id": {
            "type": "string",
            "description": "JetStream de-duplication id of a durable publish (see each channel).",
        },
    },
}

ERROR_CONVENTION = (
    "Every request/reply endpoint is a nats.micro endpoint (queue group q; $SRV.INFO lists it "
    "with request_schema and response_schema in its metadata). An error reply carries the "
    "service API's Nats-Service-Error-Code and Nats-Service-Error headers and an error.v1 body "
    "(code, message, expected_schema, service, endpoint). Codes: 400 the request did not "
    "decode, 422 it can never succeed, 500 the handler failed, 503 a dependency is unavailable."
)


def _schemas() -> set[str]:
    return {t.SCHEMA for t in MESSAGES}


def render() -> dict:
    """The AsyncAPI 3.0 document (JSON-ready). Raises ``ValueError`` for a channel or key naming
    a schema that does not exist."""
    known = _schemas()
    used: set[str] = {"error.v1", "service_status.v1"}
    channels: dict[str, dict] = {}
    operations: dict[str, dict] = {}
    for ch in CHANNELS:
        names = [n.strip() for n in f"{ch.message}|{ch.reply}".split("|") if n.strip()]
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"channel {ch.name} names unknown schemas {missing}")
        used.update(names)
        params = [p.strip("{}") for p in ch.subject.split(".") if p.startswith("{")]
        channel: dict = {
            "address": ch.subject,
            "description": ch.description,
            "messages": {
                n.replace(".", "_"): {"$ref": f"#/components/messages/{n}"} for n in names
            },
        }
        if params:
            channel["parameters"] = {p: {"description": f"a {p} token"} for p in params}
        if ch.stream:
            channel["x-jetstream"] = {"stream": ch.stream, "Nats-Msg-Id": ch.msg_id or None}
        channels[ch.name] = channel
        op: dict = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{ch.name}"},
            "summary": ch.description,
            "x-senders": list(ch.senders),
            "x-receivers": list(ch.receivers),
        }
        if ch.message:
            op["messages"] = [
                {"$ref": f"#/channels/{ch.name}/messages/{n.strip().replace('.', '_')}"}
                for n in ch.message.split("|")
            ]
        if ch.reply:
            op["reply"] = {
                "address": {"location": "$message.header#/reply_to"},
                "messages": [
                    {"$ref": f"#/channels/{ch.name}/messages/{n.strip().replace('.', '_')}"}
                    for n in ch.reply.split("|")
                ],
                "x-error": "error.v1 (see info.description)",
            }
        operations[f"send_{ch.name}"] = op
    for bucket, keys in KV_SCHEMAS.items():
        for schema in keys.values():
            if schema.endswith(".v1") and schema not in known:
                raise ValueError(f"KV {bucket} names unknown schema {schema}")
            if schema in known:
                used.add(schema)
    messages = {
        n: {
            "name": n,
            "contentType": "application/json",
            "headers": HEADERS,
            "payload": {"$ref": f"schema/{n}.json"},
        }
        for n in sorted(used)
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "aios-rl",
            "version": "1",
            "description": "Services of one RL training control plane, talking only through "
            "NATS. Every message is JSON with its schema name in the Aios-Schema header; "
            "payload schemas are contracts/schema/<name>.json (JSON Schema 2020-12). Under a "
            "namespace ns every subject is prefixed ns. and every stream and bucket ns_. "
            + ERROR_CONVENTION,
        },
        "servers": {
            "local": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "aios-rl up (users per service: docs/security.md)",
            },
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
        "x-kv": {bucket: {"keys": dict(keys)} for bucket, keys in sorted(KV_SCHEMAS.items())},
    }


def render_markdown(doc: dict) -> str:
    """``doc`` as a page: one table of channels, the KV key map, the conventions."""
    lines = [
        "# aios-rl on the wire (AsyncAPI 3.0)",
        "",
        "Generated by `python -m contracts.asyncapi` from `contracts/` (the machine-readable "
        "document is [`contracts/asyncapi.json`](../contracts/asyncapi.json); the payload "
        "schemas are in [`contracts/schema/`](../contracts/schema/)). Do not edit: a test "
        "fails while this page and the code disagree.",
        "",
        doc["info"]["description"],
        "",
        "## Channels",
        "",
        "| subject | message | reply | stream (Nats-Msg-Id) | sent by | received by | what |",
        "|---|---|---|---|---|---|---|",
    ]
    for ch in CHANNELS:
        stream = f"{ch.stream} (`{ch.msg_id}`)" if ch.stream and ch.msg_id else ch.stream or "core"

        def alt(text: str) -> str:
            return text.replace(" | ", " or ")

        lines.append(
            f"| `{ch.subject}` | {alt(ch.message) or '(empty)'} | {alt(ch.reply) or '-'} | "
            f"{alt(stream)} | "
            f"{', '.join(ch.senders)} | {', '.join(ch.receivers)} | {ch.description} |"
        )
    lines += [
        "",
        "## KV buckets: key patterns and value schemas",
        "",
        "| bucket | key | value |",
        "|---|---|---|",
    ]
    for bucket, keys in sorted(KV_SCHEMAS.items()):
        for key, schema in keys.items():
            lines.append(f"| {bucket} | `{key}` | {schema} |")
    lines += [
        "",
        "## Headers",
        "",
        *(f"- `{k}`: {v['description']}" for k, v in HEADERS["properties"].items()),
        "",
        "## Errors",
        "",
        ERROR_CONVENTION,
        "",
    ]
    return "\n".join(lines)


def texts() -> dict[Path, str]:
    doc = render()
    return {
        DOC_PATH: json.dumps(doc, indent=2, sort_keys=True) + "\n",
        PAGE_PATH: render_markdown(doc),
    }


def write() -> list[Path]:
    out = texts()
    for path, text in out.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return list(out)


if __name__ == "__main__":
    for p in write():
        print(f"wrote {p}")
    sys.exit(0)
