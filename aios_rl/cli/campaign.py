"""``aios-rl campaign status | stop | resume``: asked of the campaign service."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec
from rich.console import Console

from contracts import CampaignStatus, Message, Names, ResumeCampaign, StatusCampaign, StopCampaign

from ..bus import connect
from ._common import CliError, bus_args, url
from .report import epoch_table, rollout_table

__all__ = ["add"]


def add(subparsers: argparse._SubParsersAction) -> None:
    camp = subparsers.add_parser("campaign", help="campaign status, stop and resume")
    camp_sub = camp.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    status = camp_sub.add_parser(
        "status", help="a campaign's state and its ledger, one row per epoch"
    )
    bus_args(status)
    status.add_argument("campaign_id", metavar="CAMPAIGN")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(run=_status)
    stop = camp_sub.add_parser(
        "stop", help="stop a campaign at the next phase boundary (start resumes it)"
    )
    bus_args(stop)
    stop.add_argument("campaign_id", metavar="CAMPAIGN")
    stop.set_defaults(run=_stop)
    resume = camp_sub.add_parser(
        "resume", help="resume a stopped or failed campaign where it stood"
    )
    bus_args(resume)
    resume.add_argument("campaign_id", metavar="CAMPAIGN")
    resume.set_defaults(run=_resume)


def _status(args: argparse.Namespace) -> int:
    return asyncio.run(_ask(args, "status", StatusCampaign(campaign_id=args.campaign_id)))


def _stop(args: argparse.Namespace) -> int:
    return asyncio.run(_ask(args, "stop", StopCampaign(campaign_id=args.campaign_id)))


def _resume(args: argparse.Namespace) -> int:
    return asyncio.run(_ask(args, "resume", ResumeCampaign(campaign_id=args.campaign_id)))


async def _ask(args: argparse.Namespace, command: str, request: Message) -> int:
    """Send ``command`` for the campaign and show the status it answers with."""
    async with connect(
        url(args), name="aios-rl-campaign", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        status = await bus.request(
            bus.names.campaign_cmd(command),
            request,
            CampaignStatus,
            timeout=10,
        )
    if getattr(args, "json", False):
        sys.stdout.write(msgspec.json.encode(status).decode() + "\n")
        return 0
    if status.state == "unknown":
        raise CliError(f"no campaign {args.campaign_id!r}")
    console = Console()
    console.print(
        f"campaign {status.campaign_id}: {status.state}, epoch {status.epoch}, phase {status.phase}"
    )
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
