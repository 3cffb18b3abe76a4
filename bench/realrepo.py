"""Real repositories as tasks: how much of a mined history the candidate edits can solve, how
well fault localisation finds the fixed line, and whether training the tiny student on the mined
tasks helps.

The corpus. No network: the repositories are built here from code we did not write, the
pure-Python standard library modules of this interpreter with their upstream tests (the same
modules and runner as phase 2, ``aios_rl.envs.shell.realcode``). Each module becomes a git
repository whose history is "import", then, per bug, a commit that breaks the module and a
commit that fixes it again (the fix restores the original code). The bugs are of two kinds:

- *operator* bugs: a mutation operator's change at a line the tests run (the repair operators
  may or may not express the way back: ``missing_return`` cannot be undone by any operator);
- *deleted line* bugs: one simple statement of a function body removed (a fix that adds code,
  as real fixes often do; no operator adds a statement).

Mining is ``aios_rl.envs.shell.importing.mine`` exactly as ``aios-rl shell mine`` runs it, in the
real sandbox: every commit is a candidate, the "break" commits are rejected (their tests pass
before them), a "fix" commit becomes a task when its tests fail before it (twice, two hash seeds)
and pass after it (twice). Reported:

- **solvable share**: tasks where a generated candidate edit makes every test pass (Wilson 95 %),
  overall and per bug kind; this is the ceiling of a policy that picks among candidates;
- **localisation**: the rank of the best ranked line the known fix touches in the Ochiai ranking
  (top-1 / top-5 / top-10 shares, median; "not ranked" when no failing test ran it);
- **the student**: a fresh tiny student trained on the mined ``real`` tasks in process (the loop
  of ``bench/learning.py``: GRPO groups in the sandbox, oracle hints, the trainer's update) and
  scored near-greedy before and after, on the tasks it trained on and on the ``real-heldout``
  tasks (commits held out by hash), paired per (seed, task) with a bootstrap 95 % interval.
  The untrained student is the baseline, measured in the same run.

Run from the repo root:

    .venv/bin/python bench/realrepo.py           # ~25 min; results in bench/results/realrepo.md
    .venv/bin/python bench/realrepo.py --quick   # ~5 min smoke run (2 modules, one seed)
"""

from __future__ import annotations

import ast
import asyncio
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from aios_rl.envs.shell import mutations
from aios_rl.envs.shell.importing import Imported, ImportOptions, mine
from aios_rl.envs.shell.realcode import TEST_COMMAND, prepare
from aios_rl.envs.shell.sandbox import SandboxConfig, policy_executor
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.stats import paired_difference, wilson
from bench._common import bench_args, command_line, load_average, machine_info
from bench._kernel import Settings, shell_rollouts, train_one


@dataclass(frozen=True)
class Config:
    modules: tuple[str, ...]
    bugs: int
    """Bugs per module (one in four a deleted line)."""
    learn: Settings


FULL = Config(
    modules=("textwrap", "fnmatch", "colorsys", "shlex", "string", "graphlib", "bisect", "heapq"),
    bugs=6,
    learn=Settings(
        seeds=(0, 1, 2),
        epochs=12,
        tasks_per_epoch=8,
        group_size=4,
        train_tasks=0,
        heldout_tasks=0,
        learning_rate=3e-3,
    ),
)
QUICK = Config(
    modules=("colorsys", "fnmatch"),
    bugs=3,
    learn=Settings(
        seeds=(0,),
        epochs=3,
        tasks_per_epoch=4,
        group_size=4,
        train_tasks=0,
        heldout_tasks=0,
        learning_rate=3e-3,
    ),
)


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.org",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.org",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",  # the same shas, so the same splits
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, text=True
    ).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (repo / rel).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def deletable_lines(source: str, covered: frozenset[int]) -> list[int]:
    """Lines of simple statements (assignments, augmented assignments, calls) that are not the
    only statement of their block and that the tests run."""
    out = []
    for node in ast.walk(ast.parse(source)):
        for body in ("body", "orelse"):
            block = getattr(node, body, None)
            if not isinstance(block, list) or len(block) < 2:
                continue
            for stmt in block:
                simple = isinstance(stmt, ast.Assign | ast.AugAssign | ast.Expr)
                docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                if (
                    simple
                    and not docstring
                    and stmt.lineno == stmt.end_lineno
                    and stmt.lineno in covered
                ):
                    out.append(stmt.lineno)
    return sorted(set(out))


def build_repo(root: Path, name: str, bugs: int, seed: int) -> dict[str, tuple[str, str]]:
    """The module's repository (see the module docstring): fix commit sha -> (bug kind, what)."""
    module = prepare(name, cache=RunCache(default_cache_dir()))
    repo = root / name
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    original = module.files[module.module_path]
    commit(repo, f"import {name} and its upstream tests", dict(module.files))
    rng = random.Random(f"{seed}/{name}")
    sites = [s for s in mutations.sites(original) if s.line in module.covered]
    rng.shuffle(sites)
    lines = deletable_lines(original, module.covered)
    rng.shuffle(lines)
    fixes: dict[str, tuple[str, str]] = {}
    for i in range(bugs):
        if i % 4 == 3 and lines:
            line = lines.pop()
            text = original.splitlines(keepends=True)
            broken = "".join(text[: line - 1] + text[line:])
            kind, what = "deleted_line", f"line {line}: {text[line - 1].strip()[:60]}"
        else:
            while sites:
                site = sites.pop()
                try:
                    broken = mutations.apply(original, site, module.module_path).source
                    break
                except mutations.MutationError:
                    continue
            else:
                continue
            kind, what = site.operator, f"line {site.line}: {site.describe()[:80]}"
        commit(repo, f"{name}: change ({what})", {module.module_path: broken})
        sha = commit(repo, f"{name}: fix ({what})", {module.module_path: original})
        fixes[sha] = (kind, what)
    return fixes


def share(hits: int, n: int) -> str:
    if not n:
        return "-"
    ci = wilson(hits, n)
    return f"{hits}/{n} ({ci.value:.0%}, {ci.low:.0%}-{ci.high:.0%})"


async def learn(cfg: Config, tasks: list[Imported], log: Callable[[str], None]) -> dict:
    train = [g.task for g in tasks if g.task.split == "real"]
    held = [g.task for g in tasks if g.task.split == "real-heldout"]
    scored = train + held
    out = {}
    for seed in cfg.learn.seeds:
        res = await train_one(
            seed,
            cfg.learn,
            train,
            scored,
            shell_rollouts(scored, cfg.learn.workers),
            log,
        )
        out[str(seed)] = res
    return {
        "train_ids": [t.task_id for t in train],
        "heldout_ids": [t.task_id for t in held],
        "seeds": out,
    }


def main(argv: list[str] | None = None) -> int:
    _args, cfg, out = bench_args("realrepo", __doc__, "~25 min", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    log = console.log
    started = time.monotonic()
    machine = machine_info(["torch"])
    executor = policy_executor(SandboxConfig(wall_timeout_s=60))
    records = []
    rejected: Counter[str] = Counter()
    mined: list[Imported] = []
    with tempfile.TemporaryDirectory(prefix="aios-realrepo-") as tmp:
        for name in cfg.modules:
            fixes = build_repo(Path(tmp), name, cfg.bugs, seed=0)
            log(f"{name}: {len(fixes)} bug fixes in a history of {2 * len(fixes) + 1} commits")
            report = mine(
                Path(tmp) / name,
                TEST_COMMAND,
                executor,
                options=ImportOptions(heldout_share=0.25),
                progress=log,
            )
            for sha, _subject, why in report.rejected:
                if sha in fixes:
                    rejected[f"fix commit: {why.split(':', 1)[0]}"] += 1
                else:
                    rejected[f"other commit: {why.split(':', 1)[0]}"] += 1
            for got in report.tasks:
                sha = got.task.known_fix.commit if got.task.known_fix else ""
                kind, what = fixes.get(sha, ("not a planted fix", ""))
                records.append(
                    {
                        "module": name,
                        "task_id": got.task.task_id,
                        "split": got.task.split,
                        "kind": kind,
                        "bug": what,
                        "solvable": got.solvable,
                        "fix_rank": got.fix_rank,
                        "candidates": len(got.task.candidate_edits),
                        "tried": got.tried,
                        "seconds": round(got.seconds, 1),
                    }
                )
                mined.append(got)
            log(f"{name}: {len(report.tasks)} tasks mined, {len(report.rejected)} commits rejected")
    n = len(records)
    solvable = sum(r["solvable"] for r in records)
    ranks = [r["fix_rank"] for r in records]
    ranked = [r for r in ranks if r is not None]
    kinds = sorted({r["kind"] for r in records})
    table = Table(title=f"mined tasks: {n} from {len(cfg.modules)} repositories")
    for col in ("bug kind", "tasks", "solvable by candidates", "fix line top-1", "top-5"):
        table.add_column(col, justify="right" if col != "bug kind" else "left")
    rows_md = []
    for kind in [*kinds, "all"]:
        sel = [r for r in records if kind in ("all", r["kind"])]
        k = len(sel)
        top1 = sum(1 for r in sel if r["fix_rank"] is not None and r["fix_rank"] <= 1)
        top5 = sum(1 for r in sel if r["fix_rank"] is not None and r["fix_rank"] <= 5)
        row = [
            kind,
            str(k),
            share(sum(r["solvable"] for r in sel), k),
            share(top1, k),
            share(top5, k),
        ]
        table.add_row(*row)
        rows_md.append(row)
    console.print(table)
    log(f"rejected commits: {dict(rejected)}")
    learning = asyncio.run(learn(cfg, mined, log)) if mined else {}
    student_rows = []
    if learning:
        train_n, held_n = len(learning["train_ids"]), len(learning["heldout_ids"])
        for label, lo, hi in (
            ("trained-on (real)", 0, train_n),
            ("held out by commit (real-heldout)", train_n, train_n + held_n),
        ):
            if hi == lo:
                continue
            pairs = [
                (b, a)
                for res in learning["seeds"].values()
                for b, a in zip(res["before"][lo:hi], res["after"][lo:hi], strict=True)
            ]
            before = statistics.fmean(b for b, _ in pairs)
            after = statistics.fmean(a for _, a in pairs)
            diff, low, high = paired_difference([b for b, _ in pairs], [a for _, a in pairs])
            student_rows.append(
                [
                    label,
                    str(hi - lo),
                    f"{before:.0%}",
                    f"{after:.0%}",
                    f"{diff:+.0%} ({low:+.0%} to {high:+.0%})",
                ]
            )
        st = Table(title="tiny student, near-greedy success: untrained vs trained on mined tasks")
        for col in ("tasks", "n", "untrained", "trained", "paired difference (95 %)"):
            st.add_column(col)
        for row in student_rows:
            st.add_row(*row)
        console.print(st)
    elapsed = time.monotonic() - started
    machine["load_avg_end"] = load_average()
    md = [
        "# Real repositories as tasks (bench/realrepo.py)",
        "",
        f"- date: {dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()}",
        f"- command: `{command_line()}`",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['cores_usable']} "
        f"usable), {machine['ram_gib']} GiB RAM, {machine['os']}; Python {machine['python']}, "
        f"torch {machine['packages'].get('torch')}",
        f"- code: {machine.get('code')}",
        f"- load average (1/5/15 min): at the start {machine['load_avg']}, at the end "
        f"{machine['load_avg_end']}",
        f"- whole run: {elapsed / 60:.1f} min",
        "",
        f"Corpus: {len(cfg.modules)} standard-library modules ({', '.join(cfg.modules)}) with "
        f"their upstream tests, each a git history with {cfg.bugs} break/fix commit pairs "
        "(see the bench's docstring); mined with `aios_rl.envs.shell.importing.mine` in the "
        "sandbox, 25 % of commits held out by hash.",
        "",
        "| bug kind | tasks | solvable by candidates (95 %) | fix line ranked 1st | in top 5 |",
        "|---|---:|---:|---:|---:|",
        *[f"| {' | '.join(r)} |" for r in rows_md],
        "",
        f"Fix line rank (1-based, Ochiai): median {statistics.median(ranked) if ranked else '-'}"
        f"; not ranked at all in {ranks.count(None)} of {n} tasks. Solvable overall: "
        f"{share(solvable, n)}.",
        "",
        "Rejected commits: "
        + (", ".join(f"{k} {v}" for k, v in sorted(rejected.items())) or "none")
        + ".",
        "",
    ]
    if student_rows:
        md += [
            "## The tiny student on the mined tasks",
            "",
            f"Seeds {list(cfg.learn.seeds)}, {cfg.learn.epochs} epochs of "
            f"{cfg.learn.tasks_per_epoch} tasks x {cfg.learn.group_size} episodes; near-greedy "
            "success per task before and after, paired per (seed, task).",
            "",
            "| tasks | n | untrained | trained | paired difference (95 %) |",
            "|---|---:|---:|---:|---:|",
            *[f"| {' | '.join(r)} |" for r in student_rows],
            "",
        ]
    md += [
        "## Tasks",
        "",
        "| module | task | split | kind | solvable | fix rank | tried |",
        "|---|---|---|---|---|---:|---:|",
    ]
    md += [
        f"| {r['module']} | {r['task_id']} | {r['split']} | {r['kind']} | "
        f"{'yes' if r['solvable'] else 'no'} | {r['fix_rank'] or '-'} | {r['tried']} |"
        for r in records
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md) + "\n")
    data = {
        "records": records,
        "rejected": dict(rejected),
        "learning": learning,
        "machine": machine,
        "seconds": round(elapsed, 1),
        "modules": list(cfg.modules),
        "bugs_per_module": cfg.bugs,
    }
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    console.print(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
