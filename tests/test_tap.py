"""``tap`` against a real server: stream lookup for ``--since`` survives a paged stream list."""

from __future__ import annotations

from nats.js import api

from aios_rl.bus import Bus
from aios_rl.cli.tap import _streams_for
from contracts import Names


async def test_streams_for_pages_through_more_streams_than_one_api_page(
    bus: Bus, names: Names
) -> None:
    # The JetStream API lists 256 streams a page; put ours behind more than a page of others.
    for i in range(270):
        await bus.js.add_stream(
            api.StreamConfig(
                name=f"{names.namespace}_FILLER{i:03d}",
                subjects=[names.subject("filler", str(i))],
                storage=api.StorageType.MEMORY,
            )
        )
    pairs = await _streams_for(bus, names.episode("rewarded", "*"))
    assert pairs == [(names.stream("EPISODES"), names.episode("rewarded", "*"))]
    pairs = await _streams_for(bus, names.subject(">"))
    assert (names.stream("DLQ"), names.dlq(">")) in pairs
    assert len([p for p in pairs if p[0].startswith(f"{names.namespace}_FILLER")]) == 270
    for i in range(270):
        await bus.js.delete_stream(f"{names.namespace}_FILLER{i:03d}")
