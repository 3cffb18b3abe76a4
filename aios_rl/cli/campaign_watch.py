"""Start a campaign and watch it to the end with live progress: episodes compared of scheduled,
the phase, verdicts and pointer moves as the campaign events report them."""

from __future__ import annotations

import asyncio
import contextlib

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contracts import (
    CampaignEvent,
    CampaignSpec,
    CampaignStatus,
    Episode,
    StartCampaign,
    StatusCampaign,
    StopCampaign,
)

from ..bus import Bus, BusError

__all__ = ["run_campaign"]

STATUS_POLL_S = 10.0
"""How often the watch also asks the campaign's status (events can be missed in an outage)."""


async def _ended(bus: Bus, campaign_id: str) -> str:
    """``finished``, ``failed`` or ``stopped`` if the campaign has ended, else ``""`` (also when
    the campaign service does not answer: the watch goes on)."""
    try:
        status = await bus.request(
            bus.names.campaign_cmd("status"),
            StatusCampaign(campaign_id=campaign_id),
            CampaignStatus,
            timeout=5,
        )
    except BusError:
        return ""
    return status.state if status.state in ("finished", "failed", "stopped") else ""


_SHORT = {"active": "active", "pre_update_ref": "pre", "last_stable": "stable"}


async def run_campaign(
    bus: Bus, spec: CampaignSpec, console: Console, *, timeout_s: float = 3600
) -> str:
    """Start ``spec`` (or resume it) and return how it ended (``finished``, ``failed`` or
    ``stopped``) once it has. Raises ``TimeoutError`` after ``timeout_s``."""
    per_epoch = spec.tasks_per_epoch * (spec.group_size + spec.reference_runs)
    finished = asyncio.Event()
    state = {"phase": "starting", "end": "", "verdicts": "", "moves": 0}
    compared: set[str] = set()

    async def on_event(msg: object, _raw: object) -> None:
        if not isinstance(msg, CampaignEvent) or msg.campaign_id != spec.campaign_id:
            return
        r = msg.record
        state["phase"] = f"epoch {msg.epoch}: {r.phase if r else msg.kind}"
        if r is not None and msg.kind == "decided" and r.verdict:
            state["verdicts"] = f"{state['verdicts']} {r.verdict[0].upper()}".strip()
            moved = ",".join(_SHORT[m.pointer] for m in r.pointer_moves)
            state["moves"] = int(state["moves"]) + len(r.pointer_moves)
            console.log(
                f"epoch {msg.epoch}: verdict [bold]{r.verdict}[/], {r.decision or 'no decision'}"
                + (f", moved {moved}" if moved else "")
            )
        if msg.kind == "retrying":
            console.log(f"epoch {msg.epoch}: retrying after a transient error: {msg.reason}")
        if msg.kind == "failed":
            console.print(
                f"campaign {spec.campaign_id} failed: {msg.reason}\n"
                f"fix the cause, then: aios-rl campaign resume {spec.campaign_id}",
                markup=False,
            )
        if msg.kind in ("finished", "failed", "stopped"):
            state["end"] = msg.kind
            finished.set()

    async def on_compared(msg: object, _raw: object) -> None:
        if isinstance(msg, Episode) and msg.campaign_id == spec.campaign_id:
            compared.add(msg.episode_id)  # a republished duplicate counts once

    subs = [
        await bus.subscribe(bus.names.campaign_event(">"), on_event),
        await bus.subscribe(bus.names.episode("compared", "*"), on_compared),
    ]
    try:
        await bus.request(
            bus.names.campaign_cmd("start"), StartCampaign(spec=spec), CampaignStatus, timeout=30
        )
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn(
                "{task.fields[phase]} | verdicts {task.fields[verdicts]}"
                " | pointer moves {task.fields[moves]}"
            ),
            console=console,
        ) as progress:
            bar = progress.add_task(
                "episodes compared", total=per_epoch * spec.epochs, phase="", verdicts="-", moves=0
            )

            def refresh() -> None:
                progress.update(
                    bar,
                    completed=len(compared),
                    phase=state["phase"],
                    verdicts=state["verdicts"] or "-",
                    moves=state["moves"],
                )

            async with asyncio.timeout(timeout_s):
                polled = asyncio.get_running_loop().time()
                while not finished.is_set():
                    refresh()
                    try:
                        async with asyncio.timeout(0.25):
                            await finished.wait()
                    except TimeoutError:
                        pass
                    now = asyncio.get_running_loop().time()
                    if not finished.is_set() and now - polled >= STATUS_POLL_S:
                        # An event missed during an outage must not leave us waiting for ever.
                        polled = now
                        end = await _ended(bus, spec.campaign_id)
                        if end:
                            state["end"] = end
                            finished.set()
            refresh()
    except asyncio.CancelledError:
        # Ctrl-C: leave no campaign running behind (a persistent stack would resume it at its
        # next start). The stop is recorded at once; the campaign halts at a phase boundary.
        with contextlib.suppress(Exception):
            await bus.request(
                bus.names.campaign_cmd("stop"),
                StopCampaign(campaign_id=spec.campaign_id, reason="interrupted"),
                CampaignStatus,
                timeout=5,
            )
            console.print(
                f"campaign {spec.campaign_id} stopped; resume it with "
                f"`aios-rl campaign resume {spec.campaign_id}` (or the same command with "
                f"--campaign-id {spec.campaign_id})"
            )
        raise
    finally:
        for sub in subs:
            await sub.unsubscribe()
    return str(state["end"])
