"""The AsyncAPI document (``contracts/asyncapi.json``) and its page (``docs/asyncapi.md``) are
what ``contracts.asyncapi`` generates now; every channel and KV key names contracts that exist,
and each channel's subject and key pattern is what ``contracts.Names`` builds."""

from __future__ import annotations

import json
import re

import pytest

import contracts.asyncapi as asyncapi
from contracts import MESSAGES, Names, topology
from contracts.subjects import SCHEMA_HEADER

FIX = "run `python -m contracts.asyncapi` and commit contracts/asyncapi.json and docs/asyncapi.md"


def test_the_document_and_the_page_match_the_contracts() -> None:
    stale = [
        str(path) for path, text in asyncapi.texts().items()
        if not path.is_file() or path.read_text() != text
    ]  # fmt: skip
    assert not stale, f"{', '.join(stale)} out of date. Fix: {FIX}."


def test_the_document_is_asyncapi_3_and_its_references_resolve() -> None:
    doc = asyncapi.render()
    assert doc["asyncapi"] == "3.0.0"
    known = {t.SCHEMA for t in MESSAGES}
    messages = doc["components"]["messages"]
    assert set(messages) <= known and {"episode.v1", "error.v1"} <= set(messages)
    for name, m in messages.items():
        assert m["payload"] == {"$ref": f"schema/{name}.json"}
        assert (asyncapi.ROOT / "schema" / f"{name}.json").is_file()
        assert SCHEMA_HEADER in m["headers"]["properties"]
    text = json.dumps(doc)
    for ref in re.findall(r'"\$ref": "#/([^"]+)"', text):  # every internal $ref points somewhere
        node = doc
        for part in ref.split("/"):
            node = node[part]


def _pattern(subject: str) -> re.Pattern[str]:
    """A channel address (``{param}`` tokens) as a regex over concrete subjects."""
    return re.compile("^" + re.sub(r"\\\{\w+\\\}", r"[^.]+", re.escape(subject)) + "$")


@pytest.mark.parametrize(
    "build",
    [
        lambda n: n.rollout_job("shell"),
        lambda n: n.episode("completed", "shell"),
        lambda n: n.episode("taught", "browser"),
        lambda n: n.episode("rewarded", "orchestrator"),
        lambda n: n.episode("compared", "shell"),
        lambda n: n.replay("positive", "shell"),
        lambda n: n.policy_act(),
        lambda n: n.policy_complete(),
        lambda n: n.agent_call("ep-1"),
        lambda n: n.agent_attach(),
        lambda n: n.env_open("shell"),
        lambda n: n.env_step("shell", "r1a2"),
        lambda n: n.env_close("browser", "r1a2"),
        lambda n: n.rail_decide(),
        lambda n: n.rail_trace(),
        lambda n: n.sites("open"),
        lambda n: n.teacher_request("oracle"),
        lambda n: n.campaign_cmd("start"),
        lambda n: n.campaign_event("phase"),
        lambda n: n.checkpoint_event("advanced"),
        lambda n: n.trainer_update(),
        lambda n: n.replay_sample(),
        lambda n: n.comparison_verdict(),
        lambda n: n.dlq("EPISODES"),
        lambda n: n.status("reward"),
    ],
)
def test_every_subject_the_stack_uses_has_a_channel(build) -> None:  # type: ignore[no-untyped-def]
    subject = build(Names())
    assert any(_pattern(ch.subject).match(subject) for ch in asyncapi.CHANNELS), subject


def test_every_channel_with_a_stream_is_kept_by_that_stream() -> None:
    streams = {s.name: s.subjects for s in topology(Names()).streams}
    for ch in asyncapi.CHANNELS:
        if ch.stream:
            concrete = re.sub(r"\{\w+\}", "x", ch.subject)
            wild = [re.compile("^" + re.escape(s).replace(r"\*", "[^.]+").replace(">", ".+") + "$")
                    for s in streams[ch.stream]]  # fmt: skip
            assert any(w.match(concrete) for w in wild), (ch.name, streams[ch.stream])


def test_every_kv_key_the_stack_writes_has_a_pattern() -> None:
    keys = {
        "checkpoints": [Names.key_pointers(), Names.key_checkpoint_meta("ab12")],
        "control": [Names.key_control("campaign", "c"), Names.key_control("rail", "c"),
                    Names.key_control("gateway")],
        "ledger": [Names.key_epoch("c", 3), Names.key_arrivals("c", 3),
                   Names.key_rollout("c", 3, "e"), Names.key_heldout("c", 3)],
        "comparison": [Names.key_task_stats("t", "k"), Names.key_pending("e"),
                       Names.key_compared("e")],
    }  # fmt: skip
    for bucket, written in keys.items():
        patterns = asyncapi.KV_SCHEMAS[bucket]
        for key in written:
            hits = [p for p in patterns if _kv_match(p, key)]
            assert len(hits) == 1, (bucket, key, hits)  # exactly one schema per key


def _kv_match(pattern: str, key: str) -> bool:
    p, k = pattern.split("."), key.split(".")
    return len(p) == len(k) and all(a in ("*", b) for a, b in zip(p, k, strict=True))
