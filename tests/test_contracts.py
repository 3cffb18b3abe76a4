"""Contracts, pure: the codec, the tagged command union, ``Names`` and the declared topology."""

from __future__ import annotations

import itertools
import re
from typing import Any

import msgspec
import pytest

import contracts
from contracts import (
    MESSAGES,
    SCHEMA_HEADER,
    CampaignCommand,
    CampaignSpec,
    ContractError,
    ControlSnapshot,
    DecodeError,
    Episode,
    GatewaySettings,
    Names,
    RailState,
    StartCampaign,
    StatusCampaign,
    StopCampaign,
    TeacherSignal,
    decode,
    decode_any,
    encode,
    register,
    registered,
    topology,
)
from contracts.codec import MAX_DEPTH, MAX_PAYLOAD_BYTES, EncodeError
from contracts.examples import example as instance
from contracts.subjects import STREAM_DLQ, STREAM_EPISODES

# -- codec ------------------------------------------------------------------------------------------


def test_messages_have_unique_well_formed_schema_names() -> None:
    schemas = [t.SCHEMA for t in MESSAGES]
    assert len(set(schemas)) == len(schemas), "two messages share a SCHEMA name"
    for name in schemas:
        assert re.fullmatch(r"[a-z][a-z_]*\.v[0-9]+", name), (
            f"schema name {name!r} is not <name>.v<major>"
        )
    known = registered()
    for t in MESSAGES:
        assert known[t.SCHEMA] is t


@pytest.mark.parametrize("full", [False, True], ids=["minimal", "full"])
@pytest.mark.parametrize("t", MESSAGES, ids=lambda t: t.SCHEMA)
def test_codec_round_trip(t: type[contracts.Message], full: bool) -> None:
    msg = instance(t, full=full)
    data, headers = encode(msg)
    assert headers == {SCHEMA_HEADER: t.SCHEMA}
    assert isinstance(data, bytes)
    back = decode(data, headers, t)
    assert type(back) is t
    assert back == msg
    assert decode_any(data, headers) == msg


def test_full_instance_really_sets_optional_fields() -> None:
    """Guard for the round trip above: ``full`` instances are not just defaults."""
    ep = instance(Episode, full=True)
    assert isinstance(ep, Episode)
    assert ep.teacher_signal is not None and ep.teacher_signal.hints
    assert ep.branch is not None and ep.trajectory and ep.reward_breakdown is not None
    assert ep != instance(Episode)


def test_encode_keeps_given_headers_and_sets_the_schema() -> None:
    msg = TeacherSignal(backend="oracle", score=0.5)
    data, headers = encode(msg, {"Nats-Msg-Id": "e1:taught", SCHEMA_HEADER: "forged.v9"})
    assert headers == {"Nats-Msg-Id": "e1:taught", SCHEMA_HEADER: "teacher_signal.v1"}
    assert msgspec.json.decode(data)["score"] == 0.5


def _episode_bytes() -> tuple[bytes, dict[str, str]]:
    return encode(Episode(episode_id="e1", environment="shell", task_id="t1"))


@pytest.mark.parametrize("headers", [None, {}, {"Other": "x"}, {SCHEMA_HEADER: ""}])
def test_decode_without_schema_header(headers: dict[str, str] | None) -> None:
    data, _ = _episode_bytes()
    with pytest.raises(DecodeError) as err:
        decode(data, headers, Episode)
    assert err.value.reason == "missing_schema"
    with pytest.raises(DecodeError) as err_any:
        decode_any(data, headers)
    assert err_any.value.reason == "missing_schema"


def test_decode_wrong_schema_keeps_what_it_saw() -> None:
    data, headers = _episode_bytes()
    with pytest.raises(DecodeError) as err:
        decode(data, headers, TeacherSignal)
    assert err.value.reason == "wrong_schema"
    assert err.value.schema == "episode.v1"
    assert isinstance(err.value, ContractError)


def test_decode_any_unknown_schema() -> None:
    data, _ = _episode_bytes()
    with pytest.raises(DecodeError) as err:
        decode_any(data, {SCHEMA_HEADER: "episode.v99"})
    assert err.value.reason == "unknown_schema"
    assert err.value.schema == "episode.v99"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\x00garbage", id="not-json"),
        pytest.param(b'{"episode_id": "e1", "environment": "shell"', id="truncated"),
        pytest.param(b'{"episode_id": "e1", "environment": "shell"}', id="missing-field"),
        pytest.param(
            b'{"episode_id": 7, "environment": "shell", "task_id": "t"}', id="wrong-field-type"
        ),
        pytest.param(
            b'{"episode_id": "e", "environment": "shell", "task_id": "t", "outcome": "mars"}',
            id="not-in-vocabulary",
        ),
        pytest.param(
            b'{"episode_id": "e", "environment": "Mars Rover!", "task_id": "t"}',
            id="not-an-environment-name",
        ),
        pytest.param(
            b'{"episode_id": "e", "environment": "shell", "task_id": "t", "env_reward": null}',
            id="null-float",
        ),
        pytest.param(b"[]", id="array"),
    ],
)
def test_decode_invalid_payload(payload: bytes) -> None:
    with pytest.raises(DecodeError) as err:
        decode(payload, {SCHEMA_HEADER: "episode.v1"}, Episode)
    assert err.value.reason == "invalid_payload"
    assert err.value.schema == "episode.v1"
    with pytest.raises(DecodeError) as err_any:
        decode_any(payload, {SCHEMA_HEADER: "episode.v1"})
    assert err_any.value.reason == "invalid_payload"


def test_decode_tolerates_unknown_fields() -> None:
    """Newer writers may add fields: older readers must not reject them."""
    payload = b'{"episode_id": "e", "environment": "shell", "task_id": "t", "added_in_v1_1": [1]}'
    ep = decode(payload, {SCHEMA_HEADER: "episode.v1"}, Episode)
    assert ep.episode_id == "e"


def test_register_rejects_conflicts_and_unnamed_types() -> None:
    class Impostor(contracts.Message, frozen=True, kw_only=True):
        SCHEMA = "episode.v1"

    class Unnamed(contracts.Message, frozen=True, kw_only=True):
        pass

    with pytest.raises(ContractError, match="claimed"):
        register(Impostor)
    with pytest.raises(ContractError, match="no SCHEMA"):
        register(Unnamed)
    assert registered()["episode.v1"] is Episode
    register(Episode)  # registering the same type again is harmless


# -- tagged unions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        StartCampaign(spec=CampaignSpec(campaign_id="c1", epochs=2)),
        StopCampaign(campaign_id="c1", reason="enough"),
        StatusCampaign(campaign_id="c1"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_campaign_command_union_decodes_by_tag(command: Any) -> None:
    data, headers = encode(command)
    assert (
        msgspec.json.decode(data)["command"]
        == {StartCampaign: "start", StopCampaign: "stop", StatusCampaign: "status"}[type(command)]
    )
    decoded = msgspec.json.Decoder(CampaignCommand).decode(data)
    assert type(decoded) is type(command)
    assert decoded == command
    assert decode_any(data, headers) == command


def test_campaign_command_union_rejects_unknown_tag_and_missing_tag() -> None:
    dec = msgspec.json.Decoder(CampaignCommand)
    with pytest.raises(msgspec.ValidationError):
        dec.decode(b'{"command": "pause", "campaign_id": "c1"}')
    with pytest.raises(msgspec.ValidationError):
        dec.decode(b'{"campaign_id": "c1"}')


@pytest.mark.parametrize(
    "state",
    [RailState(mode="live", eta=0.2), GatewaySettings(backend="claude")],
    ids=["rail", "gateway"],
)
def test_control_snapshot_state_union_round_trips(state: Any) -> None:
    snap = ControlSnapshot(key="k", version=3, state=state)
    data, headers = encode(snap)
    back = decode(data, headers, ControlSnapshot)
    assert type(back.state) is type(state)
    assert back == snap


# -- Names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a.b", "a b", "a*", "a>", "x" * 33, "ns/1", "é"])
def test_names_rejects_invalid_namespace(bad: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        Names(bad)


@pytest.mark.parametrize(
    "build",
    [
        lambda n: n.teacher_request("claude.v2"),
        lambda n: n.campaign_event("a b"),
        lambda n: n.checkpoint_event("x.y"),
        lambda n: n.dlq("EPI.SODES"),
        lambda n: n.status("re*ward"),
        lambda n: n.key_checkpoint_meta("ck 1"),
        lambda n: n.key_control("campaign", "a.b"),
        lambda n: n.key_epoch("c>1", 1),
        lambda n: n.object_weights(""),
    ],
    ids=[
        "backend",
        "campaign-event",
        "checkpoint-event",
        "dlq",
        "status",
        "meta-key",
        "control-key",
        "epoch-key",
        "weights",
    ],
)
def test_names_rejects_invalid_tokens(build: Any) -> None:
    with pytest.raises(ValueError, match="not a valid subject token"):
        build(Names("ns"))


def test_names_without_namespace() -> None:
    n = Names()
    assert n.episode("taught", "shell") == "episode.taught.shell"
    assert n.dlq(STREAM_EPISODES) == "dlq.EPISODES"
    assert n.stream(STREAM_EPISODES) == "EPISODES"
    assert n.strip("episode.taught.shell") == "episode.taught.shell"  # noqa: B005 - Names.strip


def test_names_namespacing() -> None:
    n = Names("ns1")
    subjects = [
        n.rollout_job("shell"),
        n.episode("taught", "browser"),
        n.episode(">"),
        n.policy_act(),
        n.rail_decide(),
        n.rail_trace(),
        n.teacher_request("oracle"),
        n.campaign_cmd("start"),
        n.campaign_event("started"),
        n.checkpoint_event("stored"),
        n.trainer_update(),
        n.replay("positive", "shell"),
        n.replay_sample(),
        n.dlq(STREAM_EPISODES),
        n.status("reward"),
    ]
    for s in subjects:
        assert s.startswith("ns1."), s
        assert Names().subject(n.strip(s)) == n.strip(s)
        assert "ns1" not in n.strip(s)
    assert n.episode("taught", "browser") == "ns1.episode.taught.browser"
    assert n.episode(">") == "ns1.episode.>"
    assert n.dlq(STREAM_EPISODES) == "ns1.dlq.EPISODES"
    assert n.status("reward") == "ns1.aios.status.reward"
    assert n.stream(STREAM_EPISODES) == "ns1_EPISODES"
    assert n.bucket("checkpoints") == "ns1_checkpoints"
    assert n.strip("other.episode.taught.shell") == "other.episode.taught.shell"  # noqa: B005
    assert Names("ns1") == n and hash(Names("ns1")) == hash(n) and Names("ns2") != n


def test_topology_is_namespaced() -> None:
    n = Names("ns1")
    topo = topology(n)
    for s in topo.streams:
        assert s.name.startswith("ns1_")
        assert all(subj.startswith("ns1.") for subj in s.subjects)
    for c in topo.consumers:
        assert c.stream.startswith("ns1_") and c.filter_subject.startswith("ns1.")
    for b in [*topo.buckets, *topo.object_stores]:
        assert b.name.startswith("ns1_")


# -- topology ------------------------------------------------------------------------------------------


def overlap(a: str, b: str) -> bool:
    """Whether some subject matches both NATS subject patterns ``a`` and ``b``."""

    def go(x: list[str], y: list[str]) -> bool:
        if not x or not y:
            return not x and not y
        if x[0] == ">" or y[0] == ">":  # ">" takes one or more tokens: the other side has one
            return True
        if x[0] == "*" or y[0] == "*" or x[0] == y[0]:
            return go(x[1:], y[1:])
        return False

    return go(a.split("."), b.split("."))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("a.*.c", "a.b.*", True),
        ("*.>", "x.y", True),
        ("a.b.>", "a.*", False),
        ("replay.*.*", "replay.sample", False),
    ],
)
def test_overlap_helper(a: str, b: str, expected: bool) -> None:
    assert overlap(a, b) is expected
    assert overlap(b, a) is expected


# Durable consumers the architecture declares: a stage's service for each pipeline subject it
# listens to, and one runner per environment.
DECLARED_DURABLES = {
    "teacher-gateway": ("EPISODES", "episode.completed.*"),
    "reward": ("EPISODES", "episode.taught.*"),
    "comparison": ("EPISODES", "episode.rewarded.*"),
    "replay": ("EPISODES", "episode.compared.*"),
    "campaign": ("EPISODES", "episode.compared.*"),
    "rail": ("RAIL", "rail.trace"),
    **{f"{env}-runner": ("ROLLOUTS", f"rollout.job.{env}") for env in contracts.ENVIRONMENTS},
}


def test_topology_has_a_consumer_for_each_declared_durable() -> None:
    n = Names("ns1")
    topo = topology(n)
    durables = [c.durable for c in topo.consumers]
    assert len(durables) == len(set(durables)), "a durable is declared twice"
    assert set(durables) == set(DECLARED_DURABLES)
    for durable, (stream, filter_subject) in DECLARED_DURABLES.items():
        spec = topo.consumer(durable)
        assert spec.stream == n.stream(stream)
        assert spec.filter_subject == n.subject(filter_subject)
        assert spec.max_deliver >= 1 and spec.ack_wait_s > 0
    with pytest.raises(KeyError, match="no-such"):
        topo.consumer("no-such")


def test_every_consumer_reads_a_declared_stream_that_holds_its_subjects() -> None:
    topo = topology(Names("ns1"))
    streams = {s.name: s for s in topo.streams}
    for c in topo.consumers:
        assert c.stream in streams, f"{c.durable} reads undeclared stream {c.stream}"
        assert any(overlap(c.filter_subject, s) for s in streams[c.stream].subjects), c.durable


def test_no_two_streams_overlap_in_subjects() -> None:
    topo = topology(Names("ns1"))
    names = [s.name for s in topo.streams]
    assert len(names) == len(set(names))
    for s1, s2 in itertools.combinations(topo.streams, 2):
        for a, b in itertools.product(s1.subjects, s2.subjects):
            assert not overlap(a, b), f"streams {s1.name} and {s2.name} both take {a!r} / {b!r}"


def test_no_stream_captures_a_request_reply_subject() -> None:
    """A stream on a request subject would answer every request with a publish ack."""
    n = Names("ns1")
    requests = [
        n.policy_act(),
        n.rail_decide(),
        n.teacher_request("*"),
        n.campaign_cmd("*"),
        n.trainer_update(),
        n.replay_sample(),
        n.status("reward"),
    ]
    for s in topology(n).streams:
        for subj, req in itertools.product(s.subjects, requests):
            assert not overlap(subj, req), f"stream {s.name} captures request subject {req}"


def test_every_published_stage_and_dead_letter_has_a_stream() -> None:
    n = Names("ns1")
    topo = topology(n)
    subjects = [subj for s in topo.streams for subj in s.subjects]
    published = [
        n.episode(stage, env) for stage in contracts.STAGES for env in contracts.ENVIRONMENTS
    ]
    published += [n.rollout_job(env) for env in contracts.ENVIRONMENTS]
    published += [n.replay(lane, env) for lane in contracts.LANES for env in contracts.ENVIRONMENTS]
    published += [
        n.dlq(STREAM_EPISODES),
        n.dlq(STREAM_DLQ),
        n.rail_trace(),
        n.campaign_event("started"),
        n.checkpoint_event("stored"),
    ]
    for p in published:
        assert sum(overlap(p, s) for s in subjects) == 1, f"{p} is held by no stream or by several"


# -- hostile input: every failure to decode is a DecodeError -------------------------------------

EPISODE_HEAD = b'{"episode_id": "e", "environment": "shell", "task_id": "t", "zz": '


def nested(depth: int, *, head: bytes = EPISODE_HEAD) -> bytes:
    """An episode whose unknown field ``zz`` nests ``depth`` objects (its own object adds one)."""
    return head + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


def _decode_error(payload: bytes, **kw: Any) -> DecodeError:
    with pytest.raises(DecodeError) as err:
        decode(payload, {SCHEMA_HEADER: "episode.v1"}, Episode, **kw)
    with pytest.raises(DecodeError) as err_any:
        decode_any(payload, {SCHEMA_HEADER: "episode.v1"}, **kw)
    assert err_any.value.reason == err.value.reason
    assert err.value.schema == "episode.v1"
    return err.value


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_decode_of_deep_nesting_is_too_deep_not_a_recursion_error(depth: int) -> None:
    err = _decode_error(nested(depth))
    assert err.reason == "too_deep"
    assert str(MAX_DEPTH) in err.detail


def test_nesting_up_to_the_limit_decodes_and_brackets_in_strings_do_not_count() -> None:
    assert decode(nested(MAX_DEPTH - 1), {SCHEMA_HEADER: "episode.v1"}, Episode).task_id == "t"
    assert _decode_error(nested(MAX_DEPTH)).reason == "too_deep"
    brackets = "[{" * 5_000 + '\\"' + "}]" * 3  # an escaped quote does not end the string
    payload = msgspec.json.encode(
        {"episode_id": brackets, "environment": "shell", "task_id": "t", "zz": [[["x]"]]]}
    )
    assert decode(payload, {SCHEMA_HEADER: "episode.v1"}, Episode).episode_id == brackets


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"[" * 100_000, id="unclosed-arrays"),
        pytest.param(EPISODE_HEAD + b"[" * 5_000, id="unclosed-in-a-field"),
        pytest.param(EPISODE_HEAD + b'"\\"' + b"{" * 5_000, id="unterminated-string"),
    ],
)
def test_unclosed_deep_nesting_is_too_deep(payload: bytes) -> None:
    assert _decode_error(payload).reason == "too_deep"


def test_decode_of_a_payload_over_the_size_limit_is_too_large() -> None:
    big = msgspec.json.encode(
        {"episode_id": "e", "environment": "shell", "task_id": "t", "junk": "x" * MAX_PAYLOAD_BYTES}
    )
    err = _decode_error(big)
    assert err.reason == "too_large"
    assert str(MAX_PAYLOAD_BYTES) in err.detail
    # A reader of something larger than a bus message (an Object Store document) may allow more.
    assert decode(big, {SCHEMA_HEADER: "episode.v1"}, Episode, max_bytes=2 * len(big)).task_id
    assert _decode_error(b"{}", max_bytes=1).reason == "too_large"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xff\xfe{}", id="bom-like-bytes"),
        pytest.param(
            b'{"episode_id": "\xed\xa0\x80", "environment": "shell"}', id="utf8-surrogate"
        ),
        pytest.param(b'{"episode_id": "\xc3\x28", "environment": "shell"}', id="invalid-utf8"),
        pytest.param(EPISODE_HEAD.replace(b'"e"', b'"\\ud800"') + b"1}", id="lone-surrogate"),
        pytest.param(EPISODE_HEAD.replace(b'"e"', b'"\\udc00"') + b"1}", id="lone-low-surrogate"),
        pytest.param(EPISODE_HEAD.replace(b'"e"', b'"\\u12"') + b"1}", id="short-escape"),
        pytest.param(EPISODE_HEAD[:-7] + b'"env_reward": 1e999999}', id="float-overflow"),
        pytest.param(EPISODE_HEAD[:-7] + b'"epoch": 1' + b"0" * 5_000 + b"}", id="huge-int"),
        pytest.param(EPISODE_HEAD[:-7] + b'"env_reward": NaN}', id="nan-literal"),
        pytest.param(EPISODE_HEAD[:-7] + b'"env_reward": -Infinity}', id="infinity-literal"),
        pytest.param(EPISODE_HEAD + b"1} trailing", id="trailing-garbage"),
        pytest.param(b'"' + b"\\" * 10_001 + b'"', id="backslashes"),
        pytest.param(b"\x00" * 1_000, id="nul-bytes"),
    ],
)
def test_hostile_payloads_are_decode_errors(payload: bytes) -> None:
    assert _decode_error(payload).reason in ("invalid_payload", "too_deep")


def test_duplicate_keys_take_the_last_value() -> None:
    payload = EPISODE_HEAD[:-7] + b'"task_id": "second"}'
    assert decode(payload, {SCHEMA_HEADER: "episode.v1"}, Episode).task_id == "second"


@pytest.mark.parametrize(
    "msg",
    [
        pytest.param(TeacherSignal(backend="oracle", rationale="\ud800"), id="lone-surrogate"),
        pytest.param(TeacherSignal(backend="oracle", rationale=object()), id="not-serialisable"),  # type: ignore[arg-type]
    ],
)
def test_an_unencodable_message_is_an_encode_error(msg: Any) -> None:
    with pytest.raises(EncodeError) as err:
        encode(msg)
    assert isinstance(err.value, ContractError)
    assert msg.SCHEMA in str(err.value)
