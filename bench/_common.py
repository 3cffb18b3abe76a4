"""Helpers every bench shares: the command line, machine facts, summary statistics (medians;
quantiles and intervals come from :mod:`aios_rl.stats`), an embedded nats-server with the stack
provisioned, services started as subprocesses, and writing a results table as markdown (for
people) and JSON (for scripts).

A bench's ``main`` reads, top to bottom::

    args, s, out = bench_args("bus", __doc__, "~10 s", full=FULL, quick=QUICK)
    console = Console()
    res, machine, elapsed = run(lambda log: measure(s, log), ["msgspec", ...], console)
    rows = build_rows(res, s)
    print_rows("bus: ...", rows, ours_name, baseline_name, console)
    report(console, out, title=..., rows=rows, ..., machine=machine, elapsed_s=elapsed)

:func:`report` hands the rows to :func:`write_results`; the markdown file records the date, the
command, the machine and the table, the JSON file the same plus the raw samples the bench chose
to keep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import importlib.metadata
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from aios_rl.bus import Bus, Service, configure_logging, connect, provision
from aios_rl.stack.natsd import NatsServer
from contracts import Names

__all__ = [
    "BENCH_DIR",
    "REPO",
    "Row",
    "bench_args",
    "command_line",
    "fmt_number",
    "load_average",
    "machine_info",
    "markdown_table",
    "median",
    "nats_server",
    "print_rows",
    "report",
    "report_checks",
    "run",
    "stack_with_checkpoint",
    "start_service",
    "write_results",
]

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

T = TypeVar("T")
S = TypeVar("S")


@dataclass
class Row:
    """One measurement of the results table, for the contender and the baseline."""

    name: str
    """What was measured, in words (``JetStream consume (fetch 128, decode, ack)``)."""
    unit: str
    """``msgs/s``, ``us``, ``bytes`` ..."""
    ours: float
    """The value for the thing under test."""
    baseline: float
    """The value for the baseline."""
    higher_is_better: bool = True
    """Throughputs: True. Latencies and sizes: False (the ratio is then baseline / ours)."""
    samples: dict[str, list[float]] = field(default_factory=dict)
    """Per-repeat values (``{"ours": [...], "baseline": [...]}``), kept in the JSON only."""

    @property
    def ratio(self) -> float:
        """How many times better ours is than the baseline (> 1: ours is better); NaN when
        both are 0 (nothing to compare: shown as n/a)."""
        if self.ours == 0 and self.baseline == 0:
            return float("nan")
        if self.higher_is_better:
            return self.ours / self.baseline if self.baseline else float("inf")
        return self.baseline / self.ours if self.ours else float("inf")


def agentbench_dir() -> Path:
    """AgentBench's data folder (``dbbench/<split>.jsonl``, ``os_interaction/data/...``):
    ``$AGENTBENCH_DIR``, else a copy kept beside the checkout (``../shared/agentbench-dev``
    from the repository's parent). The data is not shipped in the repository."""
    return Path(
        os.environ.get("AGENTBENCH_DIR") or BENCH_DIR.parent.parent / "shared" / "agentbench-dev"
    )


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the summary we report across repeats)."""
    return statistics.median(list(values))


def ratio_text(ratio: float) -> str:
    """A ratio as the tables show it: ``1.23x``, ``n/a`` when there was nothing to compare."""
    return "n/a" if math.isnan(ratio) else f"{ratio:.2f}x"


def fmt_number(value: float) -> str:
    """A number for a table: thousands separators, no decimals above 100, two below."""
    if value == float("inf"):
        return "inf"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _nats_server_version() -> str:
    from aios_rl.stack.natsd import NatsServerError, find_nats_server

    try:
        out = subprocess.run(
            [find_nats_server(), "--version"], capture_output=True, text=True, timeout=10
        )
    except (NatsServerError, OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return out.stdout.strip().removeprefix("nats-server:").strip() or out.stderr.strip()


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (other work on the machine skews every number)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def machine_info(packages: Sequence[str] = ()) -> dict[str, Any]:
    """What the numbers were measured on: CPU model, cores (and how many this process may use),
    RAM, OS, Python, the nats-server binary's version, the code's commit, the versions of ``packages``
    (distribution names, e.g. ``msgspec``, ``nats-py``, ``torch``) and the load average now
    (call it before measuring; add ``load_avg_end`` after)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "ram_gib": _ram_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "nats_server": _nats_server_version(),
        "packages": {name: _package_version(name) for name in packages},
        "load_avg": load_average(),
        "code": code_version(),
    }


def code_version() -> str:
    """The commit the run's code is (``git describe``-like: short hash, ``-dirty`` with
    uncommitted changes), or ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=BENCH_DIR,
        ).stdout.strip()
        dirty = subprocess.run(
            # results files a run writes do not make the code dirty
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            capture_output=True,
            text=True,
            check=True,
            cwd=BENCH_DIR,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


def command_line() -> str:
    """The command that started this process, as one would type it from the repo root."""
    exe = sys.executable
    try:
        exe = os.path.relpath(exe)
    except ValueError:
        pass
    return shlex.join([exe, *sys.argv])


def markdown_table(rows: Sequence[Row], ours: str, baseline: str) -> str:
    """The rows as a GitHub markdown table: measurement, unit, ours, baseline, ratio."""
    lines = [
        f"| measurement | unit | {ours} | {baseline} | ratio ({ours} / {baseline}) |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = ratio_text(r.ratio)
        lines.append(
            f"| {r.name} | {r.unit} | {fmt_number(r.ours)} | {fmt_number(r.baseline)} | {ratio} |"
        )
    return "\n".join(lines)


def write_results(
    md_path: Path,
    *,
    title: str,
    rows: Sequence[Row],
    ours: str,
    baseline: str,
    machine: dict[str, Any],
    settings: dict[str, Any],
    notes: Sequence[str] = (),
    elapsed_s: float | None = None,
) -> Path:
    """Write ``md_path`` (markdown) and the same path with ``.json`` (everything, raw samples
    included); create the folder if needed. Returns the JSON path."""
    md_path.parent.mkdir(parents=True, exist_ok=True)
    json_path = md_path.with_suffix(".json")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    cmd = command_line()
    pkgs = ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
    md = [
        f"# {title}",
        "",
        f"- date: {now.isoformat()}",
        f"- command: `{cmd}`",
        f"- code: {machine.get('code', code_version())}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['cores_usable']} usable), "
        f"{machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- software: Python {machine['python']}, nats-server {machine['nats_server']}, {pkgs}",
        f"- settings: {', '.join(f'{k}={v}' for k, v in settings.items())}",
    ]
    if machine.get("load_avg"):
        end = f", at the end {machine['load_avg_end']}" if machine.get("load_avg_end") else ""
        md.append(f"- load average (1/5/15 min): at the start {machine['load_avg']}{end}")
    if elapsed_s is not None:
        md.append(f"- whole run: {elapsed_s:.1f} s")
    md += ["", markdown_table(rows, ours, baseline), ""]
    if notes:
        md += ["Notes:", "", *[f"- {n}" for n in notes], ""]
    md_path.write_text("\n".join(md).rstrip("\n") + "\n")
    payload = {
        "title": title,
        "date": now.isoformat(),
        "command": cmd,
        "machine": machine,
        "settings": settings,
        "elapsed_s": elapsed_s,
        "ours": ours,
        "baseline": baseline,
        "rows": [{**asdict(r), "ratio": None if math.isnan(r.ratio) else r.ratio} for r in rows],
        "notes": list(notes),
    }
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return json_path


def report(console: Console, md_path: Path, **results: Any) -> None:
    """:func:`write_results` (same keyword arguments), then say on ``console`` what was written."""
    json_path = write_results(md_path, **results)
    console.print(f"wrote {md_path} and {json_path} ({results['elapsed_s']:.1f} s)")


def report_checks(
    console: Console,
    md_path: Path,
    *,
    title: str,
    rows: Sequence[tuple[str, object, str]],
    ok: bool,
    verdict: str,
    settings: dict[str, Any],
    machine: dict[str, Any],
    elapsed_s: float,
    results: dict[str, Any],
    notes: Sequence[str] = (),
) -> None:
    """For harnesses that check targets rather than race a baseline (``fuzz``, ``chaos``): the
    (measurement, result, target) rows as a rich table, then ``md_path`` (markdown, with
    ``verdict`` or TARGETS MISSED) and the same path with ``.json`` (settings, machine and every
    result)."""
    table = Table(title=title)
    for col in ("measurement", "result", "target"):
        table.add_column(col)
    for name, value, target in rows:
        table.add_row(name, str(value), target)
    console.print(table)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    md = [
        f"# {title}",
        "",
        f"- date: {now.isoformat()}",
        f"- command: `{command_line()}`",
        f"- code: {machine.get('code', code_version())}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['cores_usable']} usable), "
        f"{machine['ram_gib']} GiB RAM, {machine['os']}",
        f"- software: Python {machine['python']}, nats-server {machine['nats_server']}, "
        + ", ".join(f"{k} {v}" for k, v in machine["packages"].items()),
        f"- settings: {', '.join(f'{k}={v}' for k, v in settings.items())}",
        *(
            [
                f"- load average (1/5/15 min): at the start {machine['load_avg']}, at the end "
                f"{machine.get('load_avg_end')}"
            ]
            if machine.get("load_avg")
            else []
        ),
        f"- whole run: {elapsed_s:.1f} s",
        f"- verdict: {verdict if ok else 'TARGETS MISSED'}",
        "",
        "| measurement | result | target |",
        "|---|---|---|",
        *(f"| {n.strip()} | {v} | {t} |" for n, v, t in rows),
        *(["", *notes] if notes else []),
    ]
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text("\n".join(md) + "\n")
    payload = {"settings": settings, "machine": machine, "elapsed_s": elapsed_s, **results}
    md_path.with_suffix(".json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    console.print(f"wrote {md_path} ({elapsed_s:.1f} s)")


# -- the command line and the run ---------------------------------------------------------------


def bench_args(
    name: str,
    doc: str,
    quick_hint: str,
    *,
    full: S,
    quick: S,
    argv: list[str] | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> tuple[argparse.Namespace, S, Path]:
    """Parse a bench's command line (``--quick``, ``--out``): the arguments, the settings
    (``quick`` with ``--quick``, else ``full``) and the markdown results path (default
    ``bench/results/<name>.md``, or ``<name>-quick.md`` with ``--quick``). ``doc`` is the bench's
    module docstring (its first paragraph is the description); ``quick_hint`` how long a quick
    run takes (``~20 s``). ``parents``: parsers (``add_help=False``) of the bench's own options,
    parsed before, shown in ``--help`` with these."""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=list(parents),
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"short run ({quick_hint}) for a smoke check"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="markdown results path; the JSON goes beside it with a .json suffix "
        f"(default bench/results/{name}.md, or {name}-quick.md with --quick)",
    )
    if dataclasses.is_dataclass(full) and any(f.name == "seeds" for f in dataclasses.fields(full)):
        parser.add_argument(
            "--seeds",
            type=_seed_list,
            default=None,
            help="comma-separated seeds instead of the settings' (e.g. 0 or 0,1: one seed of a "
            "long run to set beside the committed one); the default results path gains a "
            "-seeds-<list> suffix",
        )
    args = parser.parse_args(argv)
    settings = quick if args.quick else full
    stem = f"{name}-quick" if args.quick else name
    if getattr(args, "seeds", None) is not None:
        settings = dataclasses.replace(settings, seeds=args.seeds)  # type: ignore[type-var]
        stem += "-seeds-" + "-".join(str(x) for x in args.seeds)
    return args, settings, args.out or BENCH_DIR / "results" / f"{stem}.md"


def variant_path(args: argparse.Namespace, out: Path, suffix: str) -> Path:
    """The results path of a variant of a run (``--scale``, ``--reward-only``): ``out`` with
    ``-<suffix>`` at the end of its stem, or ``out`` itself when ``--out`` named it."""
    return out if args.out is not None else out.with_name(f"{out.stem}-{suffix}{out.suffix}")


def _seed_list(text: str) -> tuple[int, ...]:
    """``0,1,2`` -> ``(0, 1, 2)``; argparse reports the ValueError as a one-line usage error."""
    try:
        seeds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if len(set(seeds)) != len(seeds) or any(x < 0 for x in seeds):
        raise argparse.ArgumentTypeError(f"seeds must be distinct and not negative: {text!r}")
    return seeds


def run(
    measure: Callable[[Callable[[str], None]], Coroutine[Any, Any, T]],
    packages: Sequence[str],
    console: Console,
) -> tuple[T, dict[str, Any], float]:
    """Quiet the stack's logging, note the machine (with the versions of ``packages``), run
    ``measure(log)`` (``log`` prints a dim progress line) and note the load average after.
    Returns what ``measure`` returned, the machine facts and the seconds it took."""
    configure_logging("bench", level="warning")
    machine = machine_info(packages)
    started = time.perf_counter()
    res = asyncio.run(measure(lambda line: console.print(f"[dim]{line}[/dim]")))
    elapsed = time.perf_counter() - started
    machine["load_avg_end"] = load_average()
    return res, machine, elapsed


def print_rows(
    title: str, rows: Sequence[Row], ours_name: str, baseline_name: str, console: Console
) -> None:
    """The rows as a rich table: measurement, unit, ours, baseline, ratio."""
    table = Table(title=title)
    for col, justify in (
        ("measurement", "left"),
        ("unit", "left"),
        (ours_name, "right"),
        (baseline_name, "right"),
        ("ratio", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(
            r.name, r.unit, fmt_number(r.ours), fmt_number(r.baseline), ratio_text(r.ratio)
        )
    console.print(table)


# -- NATS and services --------------------------------------------------------------------------


@contextlib.contextmanager
def nats_server(prefix: str) -> Iterator[NatsServer]:
    """An embedded ``nats-server -js`` in a fresh temporary folder (``server.data_dir``), stopped
    and removed at exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = NatsServer(tmp).start()
        try:
            yield server
        finally:
            server.stop()


@contextlib.asynccontextmanager
async def stack_with_checkpoint(
    server: NatsServer, client_name: str, reason: str, backend: str = "tiny"
) -> AsyncIterator[tuple[Bus, bytes, str]]:
    """A connection to ``server`` under a fresh namespace with the stack's topology provisioned,
    and one student checkpoint of ``backend`` (seed 0) stored through the registry and made
    ``active``. Yields the bus, the checkpoint's weights and its id."""
    from aios_rl.state.checkpoints import CheckpointRegistry
    from aios_rl.student import new_student

    names = Names(f"bench{uuid.uuid4().hex[:10]}")
    async with connect(server.url, name=client_name, names=names) as bus:
        await provision(bus)
        registry = CheckpointRegistry(bus)
        weights = new_student(backend, seed=0).to_bytes()
        meta = await registry.store(
            weights, parent_id=None, created_by="bench", algorithm="init", backend=backend
        )
        await registry.init(meta.checkpoint_id, reason=reason)
        yield bus, weights, meta.checkpoint_id


@contextlib.asynccontextmanager
async def start_service(
    module: str,
    env: dict[str, str],
    ready_events: set[str],
    log_path: Path,
    timeout: float = 60.0,
    on_line: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m <module>`` with ``env``, yielded once it has logged every event of
    ``ready_events`` (its JSON log lines go to ``log_path``, and each decoded line to
    ``on_line`` as it arrives, if given); SIGTERM and wait at exit.

    Raises ``RuntimeError`` when it exits or stays silent before it is ready, or exits non-zero."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        cwd=REPO,
        env={**os.environ, "AIOS_LOG_FORMAT": "json", "AIOS_LOG_LEVEL": "info", **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    pending = set(ready_events)
    ready = asyncio.Event()

    async def pump() -> None:
        assert proc.stderr is not None
        with log_path.open("ab") as log:
            async for line in proc.stderr:
                log.write(line)
                with contextlib.suppress(ValueError, AttributeError):
                    record = json.loads(line)
                    pending.discard(record.get("event"))
                    if on_line is not None:
                        on_line(record)
                if not pending:
                    ready.set()

    pumping = asyncio.create_task(pump())
    waiting = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait({pumping, waiting}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            tail = (await asyncio.to_thread(log_path.read_text, errors="replace"))[-2000:]
            raise RuntimeError(
                f"{module} was not ready within {timeout}s (waiting for {pending}):\n{tail}"
            )
        yield proc
    finally:
        waiting.cancel()
        if proc.returncode is None:
            proc.terminate()
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            code = await proc.wait()
        await pumping
    if code != 0:
        raise RuntimeError(f"{module} exited with {code}; its log is {log_path}")


@contextlib.asynccontextmanager
async def running(svc: Service) -> AsyncIterator[None]:
    """Run ``svc`` in a task until the block ends, entered once it is ready (a start-up error is
    raised here); stopped and joined at exit."""
    task = asyncio.create_task(svc.run(install_signal_handlers=False), name=f"svc-{svc.name}")
    ready = asyncio.create_task(svc.ready.wait())
    try:
        await asyncio.wait({task, ready}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        if not svc.ready.is_set():
            if task.done():
                task.result()  # raises the start-up error
            raise RuntimeError(f"{svc.name} was not ready within 10 s")
        yield
    finally:
        ready.cancel()
        svc.stop()
        await asyncio.wait_for(task, 15)
