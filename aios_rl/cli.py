"""The ``aios-rl`` command line: ``up``, ``services``, ``tap``, ``demo``.

Every command that needs a bus takes ``--nats-url`` (default ``$NATS_URL``, else
``nats://127.0.0.1:4222``) and ``--namespace`` (default ``$AIOS_NAMESPACE``). A bad argument or an
unreachable server gives a one-line message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from . import __version__
from .bus import BusError, configure_logging, connect
from .natsd import NatsServer, NatsServerError
from .stack import SERVICES
from .supervisor import PlanError, Supervisor, parse_scale, plan

DEFAULT_URL = "nats://127.0.0.1:4222"


class CliError(Exception):
    """An error to show the user as one line."""


def _bus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nats-url",
        default=os.environ.get("NATS_URL"),
        help=f"NATS server (env NATS_URL; default {DEFAULT_URL})",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("AIOS_NAMESPACE", ""),
        help="namespace of the stack (env AIOS_NAMESPACE)",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {value}")
    return value


def _training_args(
    p: argparse.ArgumentParser,
    *,
    epochs: int,
    data_dir: str,
    train_tasks: int = 100,
    heldout: int = 50,
    tasks_per_epoch: int = 16,
) -> None:
    p.add_argument("--epochs", type=_positive, default=epochs, help=f"epochs (default {epochs})")
    p.add_argument(
        "--tasks-per-epoch",
        type=_positive,
        default=tasks_per_epoch,
        help=f"tasks per epoch (default {tasks_per_epoch})",
    )
    p.add_argument("--group-size", type=_positive, default=4, help="rollouts per task (default 4)")
    p.add_argument(
        "--train-tasks",
        type=_positive,
        default=train_tasks,
        help=f"train-split tasks to draw from (default {train_tasks})",
    )
    p.add_argument(
        "--heldout",
        type=_positive,
        default=heldout,
        help=f"held-out tasks scored before and after (default {heldout})",
    )
    p.add_argument(
        "--learning-rate", type=_fraction, default=5e-3, help="trainer step size (default 0.005)"
    )
    p.add_argument("--seed", type=int, default=0, help="task and campaign seed (default 0)")
    p.add_argument(
        "--data-dir",
        default=data_dir,
        help=f"embedded stack's JetStream data and logs (default {data_dir})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aios-rl",
        description="aios-rl: one student policy, trained by RL across environments on NATS.",
    )
    parser.add_argument("--version", action="version", version=f"aios-rl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser(
        "up", help="run the whole stack: embedded NATS (unless --nats-url) and every service"
    )
    _bus_args(up)
    up.add_argument(
        "--data-dir",
        default=".aios",
        help="where the embedded NATS keeps JetStream data (default .aios)",
    )
    up.add_argument(
        "--nats-port",
        type=int,
        default=4222,
        help="client port of the embedded NATS (default 4222)",
    )
    up.add_argument(
        "--scale",
        action="append",
        default=[],
        metavar="NAME=N",
        help="run N replicas of a service (repeatable)",
    )
    up.add_argument("--only", default="", metavar="NAME,...", help="run only these services")

    services = sub.add_parser(
        "services", help="list running services through NATS service discovery"
    )
    _bus_args(services)
    services.add_argument("--json", action="store_true", help="print JSON for machines")
    services.add_argument(
        "--all-namespaces", action="store_true", help="list services of every namespace"
    )

    tap = sub.add_parser(
        "tap", help="print typed messages on subjects live, e.g. aios-rl tap 'episode.>'"
    )
    _bus_args(tap)
    tap.add_argument("subjects", nargs="+", metavar="SUBJECT")
    tap.add_argument(
        "--since",
        metavar="DURATION",
        help="first replay stored messages from this long ago (90s, 5m, 2h)",
    )
    tap.add_argument("--json", action="store_true", help="print each message as a full JSON line")
    tap.add_argument("--limit", type=int, metavar="N", help="stop after N messages")

    pub = sub.add_parser(
        "publish", help="validate a JSON message against its contract and publish it"
    )
    _bus_args(pub)
    pub.add_argument(
        "subject", metavar="SUBJECT", help="e.g. episode.taught.shell (namespace added)"
    )
    pub.add_argument("schema", metavar="SCHEMA", help="contract name, e.g. episode.v1")
    pub.add_argument(
        "json",
        nargs="?",
        default="-",
        metavar="JSON",
        help="the message as JSON, or - for stdin (default)",
    )
    pub.add_argument("--msg-id", help="Nats-Msg-Id for JetStream de-duplication")

    ckpt = sub.add_parser(
        "checkpoints", help="the three checkpoint pointers and the lineage as a tree"
    )
    _bus_args(ckpt)
    ckpt.add_argument("--json", action="store_true", help="print pointers and metadata as JSON")

    shell = sub.add_parser("shell", help="the shell bug-fixing environment")
    shell_sub = shell.add_subparsers(dest="shell_command", metavar="ACTION", required=True)
    gen = shell_sub.add_parser(
        "benchmark-generate", help="generate verified bug-fix tasks and store them for every runner"
    )
    gen.add_argument("--count", type=_positive, required=True, help="tasks to generate")
    gen.add_argument("--seed", type=int, default=0, help="generation seed (default 0)")
    gen.add_argument(
        "--split",
        choices=("train", "heldout", "real"),
        default="train",
        help="which split (default train)",
    )
    gen.add_argument("--out", metavar="DIR", help="also write the tasks to this directory")
    gen.add_argument(
        "--no-store", action="store_true", help="do not store them in NATS (needs --out)"
    )
    _bus_args(gen)

    train = shell_sub.add_parser(
        "train",
        help="train the student on shell tasks: a campaign with held-out scores before and after",
    )
    _training_args(train, epochs=5, data_dir=".aios/stack")
    train.add_argument("--campaign-id", help="campaign id (default shell-<date>-<time>)")
    _bus_args(train)

    ev = shell_sub.add_parser(
        "eval", help="success rate, partial rate and mean reward of a checkpoint, with intervals"
    )
    ev.add_argument(
        "--checkpoint",
        default="active",
        metavar="ID|POINTER",
        help="checkpoint id, or active / last_stable / pre_update_ref (default active)",
    )
    ev.add_argument(
        "--split",
        choices=("heldout", "train", "real"),
        default="heldout",
        help="which tasks (default heldout)",
    )
    ev.add_argument("--limit", type=_positive, default=50, help="tasks to run (default 50)")
    ev.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ev.add_argument("--json", action="store_true", help="print the summary as JSON")
    ev.add_argument(
        "--data-dir",
        default=".aios/stack",
        help="embedded stack's JetStream data and logs, when none is reachable (default .aios/stack)",
    )
    _bus_args(ev)

    camp = sub.add_parser("campaign", help="campaign status and stop")
    camp_sub = camp.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    c_status = camp_sub.add_parser(
        "status", help="a campaign's state and its ledger, one row per epoch"
    )
    _bus_args(c_status)
    c_status.add_argument("campaign_id", metavar="CAMPAIGN")
    c_status.add_argument("--json", action="store_true", help="print the status as JSON")
    c_stop = camp_sub.add_parser(
        "stop", help="stop a campaign at the next phase boundary (start resumes it)"
    )
    _bus_args(c_stop)
    c_stop.add_argument("campaign_id", metavar="CAMPAIGN")

    demo = sub.add_parser(
        "demo", help="the main job: full stack on an embedded NATS, a short run, a summary"
    )
    _training_args(demo, epochs=4, data_dir=".aios/demo", train_tasks=60, heldout=30)
    demo.add_argument("--verbose", action="store_true", help="stream service logs to the terminal")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(
        "aios-rl",
        fmt=os.environ.get("AIOS_LOG_FORMAT", "console"),
        level=os.environ.get("AIOS_LOG_LEVEL", "warning"),
    )
    try:
        if args.command == "up":
            code = _up(args)
        elif args.command == "services":
            code = asyncio.run(_services(args))
        elif args.command == "tap":
            code = _run_until_interrupt(_tap(args))
        elif args.command == "publish":
            code = asyncio.run(_publish(args))
        elif args.command == "shell":
            code = _shell(args)
        elif args.command == "campaign":
            code = asyncio.run(_campaign(args))
        elif args.command == "checkpoints":
            code = asyncio.run(_checkpoints(args))
        elif args.command == "demo":
            from .demo import run_demo
            from .embedded import StackError

            try:
                code = run_demo(args)
            except (StackError, TimeoutError) as exc:
                raise CliError(f"{exc} (service logs: {args.data_dir}/services.log)") from exc
        else:  # pragma: no cover - argparse rejects unknown commands
            parser.error(f"unknown command {args.command}")
    except (PlanError, ValueError) as exc:
        parser.exit(2, f"aios-rl {args.command}: error: {exc}\n")
    except (CliError, BusError, NatsServerError) as exc:
        parser.exit(1, f"aios-rl {args.command}: error: {exc}\n")
    except KeyboardInterrupt:  # the embedded stack, if any, was stopped on the way out
        parser.exit(130, f"aios-rl {args.command}: interrupted\n")
    sys.exit(code)


def _run_until_interrupt(coro) -> int:
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130


def _url(args: argparse.Namespace) -> str:
    return args.nats_url or DEFAULT_URL


# -- up -------------------------------------------------------------------------------------------


def _up(args: argparse.Namespace) -> int:
    only = [n.strip() for n in args.only.split(",") if n.strip()] or None
    replicas = plan(SERVICES, scale=parse_scale(args.scale, [s.name for s in SERVICES]), only=only)
    server: NatsServer | None = None
    url = args.nats_url
    if not url:
        data = Path(args.data_dir) / "nats"
        server = NatsServer(data, port=args.nats_port, log_file=data / "nats-server.log")
        try:
            server.start()
        except NatsServerError as exc:
            raise CliError(
                f"{exc} (is another stack using port {args.nats_port}? try --nats-port or --nats-url)"
            ) from exc
        url = server.url
    env = {
        "NATS_URL": url,
        "AIOS_NAMESPACE": args.namespace,
        "AIOS_LOG_FORMAT": os.environ.get(
            "AIOS_LOG_FORMAT", "console" if sys.stdout.isatty() else "json"
        ),
    }
    sup = Supervisor(replicas, env=env)
    where = (
        f"embedded NATS at {url} (data {Path(args.data_dir) / 'nats'})"
        if server
        else f"NATS at {url}"
    )
    sup.say(f"{where}; starting {', '.join(r.label for r in replicas)}")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, sup.stop)
        await sup.run()

    try:
        asyncio.run(run())
    finally:
        if server is not None:
            server.stop()
            sup.say("embedded NATS stopped")
    return 0


# -- services -------------------------------------------------------------------------------------


async def _services(args: argparse.Namespace) -> int:
    from .discovery import discover

    async with connect(_url(args), name="aios-rl-services", connect_deadline=3.0) as bus:
        views = await discover(bus.nc, namespace=None if args.all_namespaces else args.namespace)
    if args.json:
        sys.stdout.write(msgspec.json.encode(views).decode() + "\n")
        return 0
    if not views:
        print("no services answered")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "service",
        "instance",
        "version",
        "pid",
        "endpoints (requests/errors)",
        "consumers (processed/retried/dlq)",
        "stats",
    )
    for v in views:
        eps = "\n".join(f"{e.name} {e.requests}/{e.errors}" for e in v.endpoints) or "-"
        cons = (
            "\n".join(
                f"{c.consumer} {c.processed}/{c.retried}/{c.dead_lettered}" for c in v.consumers
            )
            or "-"
        )
        extra = "\n".join(f"{k}={val:g}" for k, val in sorted(v.extra.items())) or "-"
        table.add_row(v.name, v.id, v.version, str(v.pid or "-"), eps, cons, extra)
    Console().print(table)
    return 0


# -- publish ----------------------------------------------------------------------------------------


async def _publish(args: argparse.Namespace) -> int:
    from contracts import Names, registered

    types = registered()
    if args.schema not in types:
        raise ValueError(f"unknown schema {args.schema!r}; known: {', '.join(sorted(types))}")
    raw = sys.stdin.read() if args.json == "-" else args.json
    try:
        msg = msgspec.json.decode(raw.encode(), type=types[args.schema])
    except msgspec.DecodeError as exc:
        raise ValueError(f"the JSON is not a valid {args.schema}: {exc}") from exc
    async with connect(
        _url(args), name="aios-rl-publish", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        subject = bus.names.subject(args.subject)
        try:
            seq = await bus.publish_durable(subject, msg, msg_id=args.msg_id)
            print(f"published {args.schema} on {args.subject} (stream sequence {seq})")
        except BusError:
            await bus.publish(subject, msg)
            await bus.nc.flush()
            print(
                f"published {args.schema} on {args.subject} (core NATS: no stream holds this subject)"
            )
    return 0


# -- shell ------------------------------------------------------------------------------------------


def _shell(args: argparse.Namespace) -> int:
    if args.shell_command in ("train", "eval"):
        from .embedded import StackError
        from .shell_cli import run_shell_eval, run_shell_train

        args.nats_url = _url(args)
        try:
            return (run_shell_train if args.shell_command == "train" else run_shell_eval)(args)
        except (StackError, TimeoutError) as exc:
            raise CliError(str(exc)) from exc
    from .envs.shell.benchmark import benchmark_generate

    if args.no_store and not args.out:
        raise ValueError("--no-store needs --out, or the tasks would go nowhere")
    from .envs.shell.generate import GenerationError

    try:
        summary = benchmark_generate(
            args.count,
            args.seed,
            args.split,
            out_dir=args.out,
            nats_url=None if args.no_store else _url(args),
            namespace=args.namespace,
        )
    except GenerationError as exc:
        raise CliError(str(exc)) from exc
    print(f"{summary.count} verified {args.split} tasks in {summary.seconds:.0f}s")
    return 0


# -- campaign ---------------------------------------------------------------------------------------


async def _campaign(args: argparse.Namespace) -> int:
    from rich.console import Console

    from contracts import CampaignStatus, Names, StatusCampaign, StopCampaign

    from .report import epoch_table

    async with connect(
        _url(args), name="aios-rl-campaign", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        if args.campaign_command == "stop":
            status = await bus.request(
                bus.names.campaign_cmd("stop"),
                StopCampaign(campaign_id=args.campaign_id),
                CampaignStatus,
                timeout=10,
            )
        else:
            status = await bus.request(
                bus.names.campaign_cmd("status"),
                StatusCampaign(campaign_id=args.campaign_id),
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
    if status.records:
        console.print(epoch_table(status.records))
    return 0


# -- checkpoints ----------------------------------------------------------------------------------


async def _checkpoints(args: argparse.Namespace) -> int:
    from contracts import Names

    from .state.checkpoints import CheckpointRegistry, render_tree

    async with connect(
        _url(args), name="aios-rl-checkpoints", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        snap = await CheckpointRegistry(bus).snapshot()
    if args.json:
        doc = {
            "pointers": msgspec.to_builtins(snap.pointers),
            "revision": snap.revision,
            "checkpoints": {k: msgspec.to_builtins(v) for k, v in sorted(snap.metas.items())},
        }
        sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
        return 0
    p = snap.pointers
    print(f"active          {p.active or '-'}")
    print(f"pre_update_ref  {p.pre_update_ref or '-'}")
    print(f"last_stable     {p.last_stable or '-'}")
    if p.reason:
        print(f"last move       {p.reason}")
    print()
    print(render_tree(snap.pointers, snap.metas) if snap.metas else "no checkpoints stored yet")
    return 0


# -- tap ------------------------------------------------------------------------------------------


async def _tap(args: argparse.Namespace) -> int:
    from contracts import Names

    from .tap import parse_duration, tap

    since = parse_duration(args.since) if args.since else None
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    async with connect(
        _url(args), name="aios-rl-tap", names=Names(args.namespace), connect_deadline=3.0
    ) as bus:
        ready = asyncio.Event()
        task = asyncio.create_task(
            tap(bus, args.subjects, since_s=since, as_json=args.json, limit=args.limit, ready=ready)
        )
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if ready.is_set():
            print(
                f"# tapping {' '.join(args.subjects)} on {_url(args)} (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return 0


if __name__ == "__main__":
    main()
