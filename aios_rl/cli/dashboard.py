"""``aios-rl dashboard`` (the live view on a local port) and ``aios-rl report`` (a campaign's
PNG plots and Markdown summary).

``dashboard`` prints the URL of the dashboard the running stack serves (``aios-rl up`` runs one:
port 8400, or the next free one if taken; its URL is in its ``$SRV.INFO`` metadata). When no
stack serves one (the store alone, or a server without it), it starts the read-only
``dashboard`` service on the state the other commands see, prints its URL and serves until
Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from ..bus import discover
from ..proc import die_with_parent
from ..state.ledger import Ledger
from ._common import CliError, bus_args, json_arg, read_state, run_until_interrupt, store_arg
from .campaign import latest_campaign

__all__ = ["add"]

START_TIMEOUT_S = 60.0
"""How long ``dashboard`` waits for the service to listen."""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is not between 0 and 65535")
    return value


def add(subparsers: argparse._SubParsersAction) -> None:
    dash = subparsers.add_parser(
        "dashboard", help="the live dashboard (read-only) on a local port, until Ctrl-C"
    )
    bus_args(dash)
    store_arg(dash)
    dash.add_argument(
        "--port", type=_port, default=8400, help="port (default 8400; the next free one if taken)"
    )
    dash.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    dash.set_defaults(run=lambda args: run_until_interrupt(_dashboard(args)))

    rep = subparsers.add_parser(
        "report", help="a campaign's plots (PNG) and summary (Markdown) from its ledger"
    )
    bus_args(rep)
    store_arg(rep)
    rep.add_argument(
        "campaign_id", nargs="?", metavar="CAMPAIGN", help="which campaign (default the newest)"
    )
    rep.add_argument(
        "--out", type=Path, default=None, help="directory (default reports/<CAMPAIGN>)"
    )
    json_arg(rep)
    rep.set_defaults(run=lambda args: asyncio.run(_report(args)))


async def _report(args: argparse.Namespace) -> int:
    from .plots import write_report  # matplotlib loads only for this command

    async with read_state(args, "aios-rl-report") as state:
        campaign_id = args.campaign_id or await latest_campaign(state.bus)
        if campaign_id is None:
            raise CliError("no campaign yet: run `aios-rl demo` or `aios-rl train` first")
        ledger = Ledger(state.bus)
        records = await ledger.records(campaign_id)
        heldout = await ledger.heldout(campaign_id)
    if not records:
        raise CliError(f"campaign {campaign_id} has no epoch in the ledger")
    out = args.out or Path("reports") / campaign_id
    written = await asyncio.to_thread(write_report, out, campaign_id, records, heldout)
    if args.json:
        print(json.dumps({"campaign_id": campaign_id, "files": [str(p) for p in written]}))
    else:
        print(f"campaign {campaign_id}: {len(records)} epoch(s), report in {out}")
        for p in written:
            print(f"  {p}")
    return 0


async def _dashboard(args: argparse.Namespace) -> int:
    async with read_state(args, "aios-rl-dashboard") as state:
        if state.source != "store":
            running = await discover(state.bus.nc, namespace=args.namespace or "", window=0.3)
            urls = sorted(
                v.metadata["url"] for v in running if v.name == "dashboard" and "url" in v.metadata
            )
            if urls:
                print(f"dashboard at {urls[0]} (served by the stack at {state.url})", flush=True)
                return 0
        env = {
            **os.environ,
            "NATS_URL": state.url,
            "NATS_USER": state.user or "",
            "NATS_PASSWORD": state.password or "",
            "AIOS_NAMESPACE": args.namespace or "",
            "AIOS_HOST": args.host,
            "AIOS_PORT": str(args.port),
            "AIOS_LOG_FORMAT": "json",
            "AIOS_LOG_LEVEL": "info",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.dashboard",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # A SIGTERM (or SIGKILL) of this command skips the ``finally`` below: the service
            # then goes with it instead of serving on, orphaned.
            preexec_fn=die_with_parent(),
        )
        assert proc.stdout is not None
        try:
            url = await asyncio.wait_for(_listening(proc.stdout), START_TIMEOUT_S)
            if url is None:
                code = await proc.wait()
                raise CliError(f"the dashboard stopped before it listened (exit {code})")
            where = {"server": state.url, "running": state.url, "store": str(args.store)}
            print(f"dashboard at {url} (state: {where[state.source]}; Ctrl-C to stop)", flush=True)
            async for _ in proc.stdout:  # keep the pipe drained while it serves
                pass
            return await proc.wait()
        except TimeoutError:
            raise CliError(f"the dashboard did not listen within {START_TIMEOUT_S:.0f} s") from None
        finally:
            if proc.returncode is None:
                proc.terminate()
                with contextlib.suppress(ProcessLookupError):
                    await proc.wait()


async def _listening(stream: asyncio.StreamReader) -> str | None:
    """The URL of the service's ``http.listening`` log line; ``None`` when it exits first."""
    async for raw in stream:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("event") == "http.listening":
            return str(line.get("url", ""))
    return None
