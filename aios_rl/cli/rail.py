"""``aios-rl rail status [CAMPAIGN]``: each campaign's RAIL controller, read from KV ``control``
(of the server at ``--nats-url``, else of the store)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import msgspec
from rich.table import Table

from contracts import RailState

from ..state.control import ControlStore
from ._common import CliError, bus_args, json_arg, make_console, read_state, store_arg

__all__ = ["add", "rail_tables"]


def add(subparsers: argparse._SubParsersAction) -> None:
    rail = subparsers.add_parser("rail", help="the RAIL controllers: mode, agreement, errors")
    sub = rail.add_subparsers(dest="rail_command", metavar="ACTION", required=True)
    status = sub.add_parser(
        "status",
        help="per campaign: mode, traces, scorer version, sign agreement, online vs frozen "
        "error, eta, and the action histogram per environment",
    )
    bus_args(status)
    store_arg(status)
    status.add_argument("campaign_id", nargs="?", metavar="CAMPAIGN", help="one campaign only")
    json_arg(status)
    status.set_defaults(run=lambda args: asyncio.run(_status(args)))


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def rail_tables(states: list[RailState]) -> list[Table]:
    """One summary table of the controllers and one action histogram per environment."""
    summary = Table(title="RAIL controllers")
    for col in ("campaign", "mode", "traces", "scorer", "agreement", "live traces",
                "MAE online", "MAE frozen", "eta", "promoted", "demoted"):  # fmt: skip
        summary.add_column(col, justify="left" if col in ("campaign", "mode") else "right")
    envs: dict[str, dict[str, dict[str, int]]] = {}
    for s in states:
        summary.add_row(
            s.campaign_id,
            s.mode,
            str(s.traces_seen),
            f"v{s.scorer_version}",
            _num(s.sign_agreement),
            str(s.live_traces),
            _num(s.mae_online, 4),
            _num(s.mae_frozen, 4),
            _num(s.eta),
            str(s.promotions),
            str(s.demotions),
        )
        for env, row in s.actions.items():
            envs.setdefault(env, {})[s.campaign_id] = row
    tables = [summary]
    for env, rows in sorted(envs.items()):
        labels = sorted({a for r in rows.values() for a in r}, key=_action_order)
        hist = Table(title=f"actions taken in {env} (budget@temperature; 0: no branch)")
        hist.add_column("campaign")
        for a in labels:
            hist.add_column(a, justify="right")
        for cid, r in sorted(rows.items()):
            hist.add_row(cid, *(str(r.get(a, 0)) for a in labels))
        tables.append(hist)
    return tables


def _action_order(label: str) -> tuple[float, str]:
    head = label.split("@", 1)[0]
    return (float(head) if head.isdigit() else 0.0, label)


async def _status(args: argparse.Namespace) -> int:
    async with read_state(args, "aios-rl-rail") as state:
        snaps = await ControlStore(state.bus).all("rail")
    states = [s.state for s in snaps if isinstance(s.state, RailState)]
    if args.campaign_id:
        states = [s for s in states if s.campaign_id == args.campaign_id]
        if not states:
            raise CliError(f"no RAIL controller for campaign {args.campaign_id!r}")
    if args.json:
        sys.stdout.write(msgspec.json.encode(states).decode() + "\n")
        return 0
    if not states:
        make_console().print("no RAIL controller yet: run a campaign with --strategy rail")
        return 0
    console = make_console()
    for table in rail_tables(states):
        console.print(table)
    return 0
