"""AgentBench's reference solutions through our environments: the check to run before trusting
any number on them (``aios-rl agentbench verify`` as a bench, with the results kept).

DB bench: every task of ``dbbench/<split>.jsonl`` through the ``agentbench_db`` environment on a
real MariaDB (a modification task's reference SQL as one operation, then the table hash against
AgentBench's ``answer_md5``; an answer task's label as the answer). The OS bench's environment is
not built yet (issue 24): this bench says so rather than report nothing.

Run from the repo root:

    .venv/bin/python bench/agentbench.py --dir ../shared/agentbench-dev   # ~15 s
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aios_rl.envs.agentbench.db import load_db_tasks
from aios_rl.envs.agentbench.verify import verify_db
from bench._common import BENCH_DIR, command_line, machine_info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=os.environ.get("AGENTBENCH_DIR")
        or BENCH_DIR.parent.parent / "shared" / "agentbench-dev",
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
        f"- machine: {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, "
        f"{machine['os']}; Python {machine['python']}",
        f"- data: AgentBench `dbbench/{args.split}.jsonl` ({len(tasks)} tasks), as in "
        "`../shared/agentbench-dev` (AgentBench at 578c5e9, unchanged)",
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
    md += [
        "",
        "## OS bench (`agentbench_os`)",
        "",
        "Not built yet (issue 24): its sandbox mode (an overlay root filesystem built offline, a "
        "full uid map, a persistent shell on a pty) is the remaining work. No number is reported.",
    ]
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
            },
            indent=2,
        )
        + "\n"
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
