"""Helpers every bench shares: machine facts, percentiles, summary statistics, and writing a
results table as markdown (for people) and JSON (for scripts).

A bench builds a list of :class:`Row` and hands it to :func:`write_results`; the markdown file
records the date, the command, the machine and the table, the JSON file the same plus the raw
samples the bench chose to keep.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Row",
    "command_line",
    "fmt_number",
    "load_average",
    "machine_info",
    "markdown_table",
    "median",
    "percentile",
    "write_results",
]


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
        """How many times better ours is than the baseline (> 1: ours is better)."""
        if self.higher_is_better:
            return self.ours / self.baseline if self.baseline else float("inf")
        return self.baseline / self.ours if self.ours else float("inf")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, interpolating linearly between the two
    nearest ranks (numpy's default). Raises ``ValueError`` on an empty sequence or a ``q``
    outside 0..100."""
    if not values:
        raise ValueError("percentile of an empty sequence is undefined.")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100.")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (the summary we report across repeats)."""
    return statistics.median(list(values))


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
    from aios_rl.natsd import NatsServerError, find_nats_server

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
    RAM, OS, Python, the nats-server binary's version, the versions of ``packages``
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
    }


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
        ratio = f"{r.ratio:.2f}x"
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
        "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
        "notes": list(notes),
    }
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return json_path
