"""AgentBench's reference solutions through our environments: the check to run before trusting
any number on them (``aios-rl agentbench verify`` as a bench, with the results kept).

DB bench: every task of ``dbbench/<split>.jsonl`` through the ``agentbench_db`` environment on a
real MariaDB (a modification task's reference SQL as one operation, then the table hash against
AgentBench's ``answer_md5``; an answer task's label as the answer).

OS bench: every task of ``os_interaction/data/<split>.json`` through the ``agentbench_os``
environment, each on a machine of its own (needs root and the ``default`` image: deploy/setup.sh
builds it): a task with an ``example`` runs it in the agent's shell and answers what it printed; a
``match`` task without one answers its expected text (which checks the plumbing, not a solution:
counted apart). Also the machine's start and close times over repeated starts.

Run from the repo root:

    .venv/bin/python bench/agentbench.py --dir "$AGENTBENCH_DIR"   # ~30 s (AgentBench's data folder)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aios_rl.envs.agentbench.db import load_db_tasks
from aios_rl.envs.agentbench.images import image_root
from aios_rl.envs.agentbench.machine import Machine
from aios_rl.envs.agentbench.os import load_os_tasks
from aios_rl.envs.agentbench.verify import Check, verify_db, verify_os
from bench._common import BENCH_DIR, agentbench_dir, command_line, machine_info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=agentbench_dir(),
        help="AgentBench's data folder (dbbench/<split>.jsonl)",
    )
    parser.add_argument("--split", default="dev")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "agentbench.md")
    args = parser.parse_args(argv)
    path = args.dir / "dbbench" / f"{args.split}.jsonl"
    if not path.is_file():
        print(f"bench/agentbench.py: no DB tasks at {path}", file=sys.stderr)
        return 2
    machine = machine_info(["pymysql"])
    tasks = load_db_tasks(path, args.split)
    started = time.monotonic()
    checks = verify_db(tasks)
    seconds = time.monotonic() - started
    passed = sum(c.passed for c in checks)
    kinds = Counter(c.kind for c in checks)
    ok = Counter(c.kind for c in checks if c.passed)
    classes = Counter(c.failure for c in checks if not c.passed)
    notes = [c for c in checks if c.passed and c.detail]
    md = [
        "# AgentBench reference solutions through our environments (bench/agentbench.py)",
        "",
        f"- date: {dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()}",
        f"- command: `{command_line()}`",
        f"- code: {machine['code']}",
        f"- machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, "
        f"{machine['os']}; Python {machine['python']}",
        f"- load average (1/5/15 min) at the start: {machine['load_avg']} (other work on the "
        "machine slows every time below)",
        f"- data: AgentBench `dbbench/{args.split}.jsonl` ({len(tasks)} tasks), as in "
        "AgentBench's data folder at commit 578c5e9, unchanged",
        f"- splits in the data folder: {splits_here(args.dir)}",
        f"- whole run: {seconds:.1f} s ({seconds / max(1, len(tasks)):.2f} s per task, MariaDB start "
        "included)",
        "",
        "## DB bench (`agentbench_db`, MariaDB)",
        "",
        f"**{passed}/{len(checks)} reference solutions pass.** Failure classes: "
        + (", ".join(f"{k} {v}" for k, v in classes.items()) or "none")
        + ".",
        "",
        "| kind | pass |",
        "|---|---:|",
        *[f"| {k} | {ok[k]}/{n} |" for k, n in sorted(kinds.items())],
        "",
        "Every `INSERT` / `UPDATE` task's table hash after its reference SQL equals AgentBench's "
        "`answer_md5` (computed by AgentBench on MySQL): the hash and the data load mean the same "
        "here.",
    ]
    if notes:
        md += ["", "Passed with a note:", ""]
        md += [f"- {c.source} ({c.kind}): {c.detail}" for c in notes]
    failed = [c for c in checks if not c.passed]
    if failed:
        md += ["", "Failed:", ""] + [
            f"- {c.source} ({c.kind}): {c.failure}: {c.detail}" for c in failed
        ]
    os_md, os_doc = os_section(args)
    md += os_md
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md) + "\n")
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {
                "split": args.split,
                "tasks": len(checks),
                "passed": passed,
                "seconds": round(seconds, 1),
                "machine": machine,
                "checks": [c.__dict__ for c in checks],
                "os": os_doc,
            },
            indent=2,
        )
        + "\n"
    )
    print("\n".join(md))
    return 0


def splits_here(data: Path) -> str:
    """Which splits the data folder holds, and whether AgentBench's held-out ones are among them
    (its test splits: ``dbbench/standard.jsonl``, ``os_interaction/data/<n>/``)."""
    db = sorted(p.stem for p in (data / "dbbench").glob("*.jsonl"))
    os_data = data / "os_interaction" / "data"
    os_splits = sorted(p.stem if p.is_file() else p.name for p in os_data.glob("*"))
    said = f"DB {', '.join(db) or 'none'}; OS {', '.join(os_splits) or 'none'}"
    if set(db) <= {"dev"} and set(os_splits) <= {"dev"}:
        said += (
            " (AgentBench's held-out test splits are not on this machine: they were not run here)"
        )
    return said


KNOWN = {
    "dev.json#8": "its example prints `4.0K` (`du -sh`), which the task's own check script "
    '(`size-match.py`) cannot parse: `int("4.0")` raises, the check exits 1. `du -sh` prints '
    "one decimal for sizes under 10 units on any filesystem, so this fails under Docker too.",
}
"""Failures explained: tasks whose reference fails for a reason outside this environment."""


def machine_times(image: Path, n: int = 20) -> tuple[float, float]:
    """Median seconds to start a machine (to its first exec answering) and to close it."""
    starts, closes = [], []
    for _ in range(n):
        t0 = time.monotonic()
        m = Machine(image).start()
        m.exec(["true"])
        t1 = time.monotonic()
        m.close()
        starts.append(t1 - t0)
        closes.append(time.monotonic() - t1)
    return statistics.median(starts), statistics.median(closes)


def os_section(args: argparse.Namespace) -> tuple[list[str], dict[str, object]]:
    base = args.dir / "os_interaction"
    path = base / "data" / f"{args.split}.json"
    md = ["", "## OS bench (`agentbench_os`, a machine per task)", ""]
    if not path.is_file():
        return [*md, f"No OS tasks at `{path}`: not run."], {}
    if os.geteuid() != 0:
        return [*md, "Not run: the machines need root (a full uid map)."], {}
    tasks = load_os_tasks(path, base / "scripts" / args.split, args.split)
    image = image_root("default")
    times: list[float] = []
    last = [time.monotonic()]

    def seen(_check: Check) -> None:
        now = time.monotonic()
        times.append(now - last[0])
        last[0] = now

    started = time.monotonic()
    checks = verify_os(tasks, progress=seen)
    seconds = time.monotonic() - started
    start_s, close_s = machine_times(image)
    with_example = [(c, t) for c, t in zip(checks, tasks, strict=True) if t.example is not None]
    matched = [(c, t) for c, t in zip(checks, tasks, strict=True) if t.example is None]
    ok = sum(c.passed for c, _ in with_example)
    share = ok / max(1, len(with_example))
    classes = Counter(c.failure for c in checks if not c.passed)
    md += [
        f"**{ok}/{len(with_example)} reference solutions pass ({share:.1%})** on the tasks "
        f"that have one (an `example`); the {len(matched)} `match` tasks without one, answered "
        f"with their expected text: {sum(c.passed for c, _ in matched)}/{len(matched)} (init, "
        "start and judge ran; not a solution). Failure classes: "
        + (", ".join(f"{k} {v}" for k, v in classes.items()) or "none")
        + ".",
        "",
        f"- whole run: {seconds:.1f} s for {len(tasks)} tasks; per task median "
        f"{statistics.median(times):.2f} s, max {max(times):.2f} s (machine, init scripts, "
        "shell, turns, checks, teardown)",
        f"- a machine alone (median of 20): start {start_s * 1000:.0f} ms (to its first exec "
        f"answering), close {close_s * 1000:.0f} ms",
        "",
        "| task | evaluation | labels | result | failure |",
        "|---|---|---|---|---|",
        *[
            f"| {c.source} | {c.kind}{' + example' if t.example else ''} | "
            f"{', '.join(t.labels)} | {'pass' if c.passed else 'FAIL'} | "
            f"{(c.failure + ': ' + c.detail) if c.failure else c.detail} |"
            for c, t in zip(checks, tasks, strict=True)
        ],
    ]
    failed = [c for c in checks if not c.passed]
    if failed:
        md += ["", "Failures explained:", ""]
        md += [f"- {c.source}: {KNOWN.get(c.source, 'not explained yet')}" for c in failed]
    md += [
        "",
        "Where the machine differs from AgentBench's Docker container (docs/agentbench.md):",
        "Debian bookworm instead of Ubuntu (same packages, other versions); root inside a user",
        "namespace (the kernel's settings and log are denied; `/proc/tty/driver` is shown empty);",
        "the open-files limit is the host's hard limit when lower than 1048576; the agent's",
        "output is shown without terminal escape sequences and without the trailing prompt, and",
        "a multi-line command is typed a line at a time, each once the shell prompts.",
    ]
    doc = {
        "tasks": len(tasks),
        "with_example": len(with_example),
        "example_passed": ok,
        "match_only": len(matched),
        "seconds": round(seconds, 1),
        "machine_start_ms": round(start_s * 1000, 1),
        "machine_close_ms": round(close_s * 1000, 1),
        "checks": [c.__dict__ for c in checks],
    }
    return md, doc


if __name__ == "__main__":
    raise SystemExit(main())
