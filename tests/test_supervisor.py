"""Pure planning of the supervisor, discovery merging and tap formatting."""

from __future__ import annotations

import itertools

import pytest

from aios_rl.bus import merge
from aios_rl.cli.tap import format_line, parse_duration, subject_subset
from aios_rl.stack import SERVICES, ServiceEntry
from aios_rl.stack.supervisor import (
    PlanError,
    Replica,
    child_env,
    parse_scale,
    plan,
    restart_delay,
)
from contracts import DecodeError, Episode

ENTRIES = (
    ServiceEntry("a", "services.a", "first"),
    ServiceEntry("b", "services.b", "second", replicas=2),
    ServiceEntry("solo", "services.solo", "stateful", scalable=False),
)


def test_plan_defaults_scale_and_only() -> None:
    assert [r.label for r in plan(ENTRIES)] == ["a.1", "b.1", "b.2", "solo.1"]
    assert [r.label for r in plan(ENTRIES, scale={"a": 3})] == [
        "a.1",
        "a.2",
        "a.3",
        "b.1",
        "b.2",
        "solo.1",
    ]
    assert [r.label for r in plan(ENTRIES, only=["b"], scale={"b": 1})] == ["b.1"]
    assert plan(ENTRIES, scale={"a": 0}, only=["a"]) == []


def test_plan_rejects_unknown_and_unscalable() -> None:
    with pytest.raises(PlanError, match="unknown service"):
        plan(ENTRIES, only=["nope"])
    with pytest.raises(PlanError, match="cannot be scaled"):
        plan(ENTRIES, scale={"solo": 2})


def test_parse_scale() -> None:
    assert parse_scale(["a=2", "b=0"], ["a", "b"]) == {"a": 2, "b": 0}
    for bad in ("a", "a=x", "a=-1", "=2"):
        with pytest.raises(PlanError):
            parse_scale([bad], ["a"])
    with pytest.raises(PlanError, match="unknown service 'c'"):
        parse_scale(["c=1"], ["a"])


def test_restart_delay_backs_off_and_caps() -> None:
    delays = [restart_delay(n) for n in range(0, 10)]
    assert delays[0] == 0.0
    assert delays[1] == 0.5 and delays[2] == 1.0 and delays[3] == 2.0
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert max(delays) == 30.0


def test_services_start_with_passive_openmp_workers_unless_told_otherwise() -> None:
    sampler = Replica(ServiceEntry("sampler", "services.sampler", "s"), 2)
    env = child_env({"PATH": "/bin"}, {"NATS_URL": "nats://x:1"}, {"NATS_USER": "sampler"}, sampler)
    assert env["OMP_WAIT_POLICY"] == "passive" and env["AIOS_REPLICA"] == "2"
    assert (env["PATH"], env["NATS_URL"], env["NATS_USER"]) == ("/bin", "nats://x:1", "sampler")
    told = child_env({"OMP_WAIT_POLICY": "active"}, {}, {}, sampler)
    assert told["OMP_WAIT_POLICY"] == "active"


def test_every_registered_service_module_exists() -> None:
    import importlib.util

    for s in SERVICES:
        assert importlib.util.find_spec(s.module) is not None, f"{s.name}: no module {s.module}"


@pytest.mark.parametrize(
    ("inner", "outer", "expected"),
    [
        ("episode.>", "episode.>", True),
        ("episode.taught.shell", "episode.>", True),
        ("episode.taught.*", "episode.*.*", True),
        ("episode.>", "episode.*.*", False),
        ("episode.*.*", "episode.>", True),
        ("episode", "episode.>", False),
        ("rollout.job.shell", "episode.>", False),
        ("a.b", "a.b.c", False),
        ("ns.episode.rewarded.*", "ns.episode.>", True),
        (">", "episode.>", False),
    ],
)
def test_subject_subset(inner: str, outer: str, expected: bool) -> None:
    assert subject_subset(inner, outer) is expected


def test_parse_duration() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("5m") == 300
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1d") == 86400
    for bad in ("", "5", "5x", "m5", "1h 5m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_format_line_shows_key_fields_and_undecodable() -> None:
    ep = Episode(
        episode_id="ep-1",
        environment="shell",
        task_id="t1",
        outcome="success",
        env_reward=1.0,
        reward=0.9,
    )
    line = format_line("episode.rewarded.shell", ep, b"")
    assert (
        "episode.v1" in line
        and "episode_id=ep-1" in line
        and "outcome=success" in line
        and "reward=0.900" in line
    )
    bad = format_line("episode.taught.shell", DecodeError("invalid_payload", "boom"), b"garbage")
    assert "undecodable" in bad and "invalid_payload" in bad and "garbage" in bad


def test_merge_joins_info_and_stats_and_filters_namespace() -> None:
    infos = [
        {
            "name": "reward",
            "id": "A",
            "version": "1",
            "metadata": {"namespace": "x", "pid": "42"},
            "endpoints": [{"name": "status", "subject": "x.aios.status.reward"}],
        },
        {
            "name": "reward",
            "id": "B",
            "version": "1",
            "metadata": {"namespace": "y"},
            "endpoints": [],
        },
    ]
    stats = [
        {
            "id": "A",
            "endpoints": [
                {
                    "name": "status",
                    "subject": "x.aios.status.reward",
                    "num_requests": 1,
                    "num_errors": 0,
                    "data": {
                        "consumers": [
                            {
                                "consumer": "reward",
                                "subject": "episode.taught.*",
                                "processed": 7,
                                "retried": 1,
                                "dead_lettered": 2,
                            }
                        ],
                        "extra": {"lane.positive": 3},
                    },
                },
                {
                    "name": "sample",
                    "subject": "x.replay.sample",
                    "num_requests": 5,
                    "num_errors": 1,
                    "data": None,
                },
            ],
        },
    ]
    views = merge(infos, stats, namespace="x")
    assert len(views) == 1
    v = views[0]
    assert v.pid == 42 and v.namespace == "x"
    assert [(c.consumer, c.processed, c.retried, c.dead_lettered) for c in v.consumers] == [
        ("reward", 7, 1, 2)
    ]
    assert [(e.name, e.requests, e.errors) for e in v.endpoints] == [("sample", 5, 1)]
    assert v.extra == {"lane.positive": 3.0}
    assert {x.id for x in merge(infos, stats)} == {"A", "B"}
