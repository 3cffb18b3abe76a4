"""``aios-rl campaign status | stop | resume``.

``status`` asks the campaign service when one runs, else reads the campaign's state and ledger
from the store (``--store``) with no server running; without a campaign id it shows the newest
campaign. ``stop`` and ``resume`` need the campaign service: a server at ``--nats-url``, or
another command's stack running on the store.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec

from contracts import (
    CampaignState,
    CampaignStatus,
    Message,
    Names,
    ResumeCampaign,
    StatusCampaign,
    StopCampaign,
)

from ..bus import Bus, NoResponders
from ..stack.embedded import NoStoreError
from ..state.control import ControlStore
from ..state.ledger import Ledger
from ._common import CliError, bus_args, json_arg, make_console, read_state, store_arg
from ._training import current_teacher
from .report import epoch_table, learning_signals, rollout_table, signals_line

__all__ = ["add", "latest_campaign", "stored_status"]


def add(subparsers: argparse._SubParsersAction) -> None:
    camp = subparsers.add_parser("campaign", help="campaign status, stop and resume")
    camp_sub = camp.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    status = camp_sub.add_parser(
        "status", help="a campaign's state and its ledger, one row per epoch"
    )
    bus_args(status)
    store_arg(status)
    status.add_argument(
        "campaign_id", nargs="?", metavar="CAMPAIGN", help="which campaign (default the newest)"
    )
    json_arg(status)
    status.set_defaults(run=lambda args: asyncio.run(_status(args)))
    stop = camp_sub.add_parser(
        "stop", help="stop a campaign at the next phase boundary (start resumes it)"
    )
    bus_args(stop)
    store_arg(stop)
    stop.add_argument("campaign_id", metavar="CAMPAIGN")
    stop.set_defaults(
        run=lambda args: asyncio.run(
            _command(args, "stop", StopCampaign(campaign_id=args.campaign_id))
        )
    )
    resume = camp_sub.add_parser(
        "resume", help="resume a stopped or failed campaign where it stood"
    )
    bus_args(resume)
    store_arg(resume)
    resume.add_argument("campaign_id", metavar="CAMPAIGN")
    resume.set_defaults(
        run=lambda args: asyncio.run(
            _command(args, "resume", ResumeCampaign(campaign_id=args.campaign_id))
        )
    )


async def latest_campaign(bus: Bus) -> str | None:
    """The id of the campaign whose state changed last, ``None`` when there is none."""
    snaps = [
        s for s in await ControlStore(bus).all("campaign") if isinstance(s.state, CampaignState)
    ]
    if not snaps:
        return None
    newest = max(snaps, key=lambda s: s.updated_at)
    assert isinstance(newest.state, CampaignState)
    return newest.state.spec.campaign_id


async def stored_status(bus: Bus, campaign_id: str) -> CampaignStatus:
    """What the campaign service would answer, read from its state and the ledger."""
    snap, _ = await ControlStore(bus).load(Names.key_control("campaign", campaign_id))
    if snap is None or not isinstance(snap.state, CampaignState):
        return CampaignStatus(campaign_id=campaign_id)
    state = snap.state
    return CampaignStatus(
        campaign_id=campaign_id,
        state=state.state,
        epoch=state.epoch,
        phase=state.phase,
        records=await Ledger(bus).records(campaign_id),
        failure=state.failure,
        retries=state.retries,
        last_error=state.last_error,
        trainer=state.spec.trainer,
    )


async def _status(args: argparse.Namespace) -> int:
    async with read_state(args, "aios-rl-campaign") as reading:
        bus = reading.bus
        campaign_id = args.campaign_id or await latest_campaign(bus)
        if campaign_id is None:
            raise CliError("no campaign yet: run `aios-rl demo` or `aios-rl train` first")
        status = None
        if reading.source != "store":
            try:
                status = await bus.request(
                    bus.names.campaign_cmd("status"),
                    StatusCampaign(campaign_id=campaign_id),
                    CampaignStatus,
                    timeout=10,
                )
            except NoResponders:
                pass  # a server without the campaign service: read the state
        if status is None:
            status = await stored_status(bus, campaign_id)
        teacher = await current_teacher(bus)
    return _show(args, status, teacher)


async def _command(args: argparse.Namespace, command: str, request: Message) -> int:
    """Send ``command`` for the campaign to the campaign service; show the status it answers."""
    try:
        async with read_state(args, "aios-rl-campaign", serve=False) as reading:
            bus = reading.bus
            try:
                status = await bus.request(
                    bus.names.campaign_cmd(command), request, CampaignStatus, timeout=10
                )
            except NoResponders:
                raise CliError(
                    f"no campaign service answers at {reading.url}: start the stack "
                    f"(aios-rl up --store {args.store})"
                ) from None
            teacher = await current_teacher(bus)
    except NoStoreError as exc:
        raise CliError(f"{exc}: start the stack (aios-rl up --store {args.store})") from exc
    return _show(args, status, teacher)


def _show(args: argparse.Namespace, status: CampaignStatus, teacher: str) -> int:
    if getattr(args, "json", False):
        doc = msgspec.to_builtins(status)
        if status.trainer is not None:
            doc["learned_from"] = learning_signals(status.trainer, teacher)
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
        return 0
    if status.state == "unknown":
        raise CliError(f"no campaign {status.campaign_id!r}")
    console = make_console()
    console.print(
        f"campaign {status.campaign_id}: {status.state}, epoch {status.epoch}, phase {status.phase}"
    )
    if status.trainer is not None:
        console.print(signals_line(status.trainer, teacher), markup=False)
    if status.failure:
        console.print(f"failed: {status.failure}", markup=False)
        console.print(f"fix the cause, then: aios-rl campaign resume {status.campaign_id}")
    if status.retries:
        console.print(
            f"retried through {status.retries} transient errors; the last: {status.last_error}",
            markup=False,
        )
    if status.records:
        acc = status.records[-1].rollouts
        console.print(
            f"strategy {acc.strategy}: {sum(r.rollouts.base for r in status.records)} base "
            f"rollouts, {sum(r.rollouts.continuations for r in status.records)} continuations, "
            f"{sum(r.rollouts.policy_calls for r in status.records)} policy calls so far"
        )
        console.print(epoch_table(status.records))
        console.print(rollout_table(status.records))
    return 0
