"""Shell environment benchmark: what the sandbox costs per command and how many episodes per
second one runner process gets, against running the very same commands without the sandbox.

Measured in one run, on verified generated tasks (``aios_rl.envs.shell.generate``, train split,
seed 0; generated once and cached on disk):

1. Per command, sandboxed (``Sandbox``: bubblewrap, namespaces, seccomp, limits, a uid of its own)
   against unsandboxed (``LocalExecutor``: the same argv, environment and rlimits, no isolation):
   ``true`` (the bare cost of starting one command), ``python -c pass`` (an interpreter start) and
   a task's own test command (``python -B -S -m unittest -q`` on the buggy module). Median
   wall time of the repeats, the two executors taking turns.
2. Whole episodes in this process (``run_episode``, no NATS, no student): the scripted oracle
   (apply the fix, submit: one test run, at the evaluation) and a seeded uniform-random policy
   (up to 12 steps: test runs, shows, greps, edits). Episodes per second, sandboxed against
   unsandboxed, one episode at a time.

Run from the repo root:

    .venv/bin/python bench/shell.py            # ~1-2 min; results in bench/results/shell.md
    .venv/bin/python bench/shell.py --quick    # ~20 s smoke run
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

from rich.console import Console

from aios_rl.envs.shell.episode import run_episode
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.policies import oracle_policy, random_policy
from aios_rl.envs.shell.sandbox import Executor, LocalExecutor, Sandbox
from aios_rl.envs.shell.verify import RunCache, command_argv, default_cache_dir, materialize
from bench import _common


@dataclass(frozen=True)
class Settings:
    command_repeats: int
    tasks: int
    episode_rounds: int


FULL = Settings(command_repeats=40, tasks=20, episode_rounds=2)
QUICK = Settings(command_repeats=8, tasks=5, episode_rounds=1)


def _time(executor: Executor, argv: list[str], workdir: Path) -> float:
    started = time.perf_counter()
    result = executor.run(argv, workdir)
    elapsed = time.perf_counter() - started
    if result.blocked_reason:
        raise RuntimeError(f"{argv[0]} was stopped: {result.blocked_reason}")
    return elapsed


async def measure(s: Settings, log: Callable[[str], None]) -> dict:
    sandbox, local = Sandbox(), LocalExecutor()
    sandbox.check()
    log(f"generating {s.tasks} tasks (cached on disk after the first run)")
    tasks = generate(s.tasks, 0, "train", cache=RunCache(default_cache_dir()))
    out: dict = {"commands": {}, "episodes": {}}
    with tempfile.TemporaryDirectory(prefix="aios-bench-shell-") as tmp:
        workdir = Path(tmp)
        materialize(tasks[0].files, workdir)
        commands = {
            "true": ["true"],
            "python -c pass": [sys.executable, "-c", "pass"],
            "a task's tests (unittest)": command_argv(tasks[0].test_command),
        }
        for name, argv in commands.items():
            log(f"command: {name}")
            ours: list[float] = []
            base: list[float] = []
            for i in range(s.command_repeats):
                pair = [(sandbox, ours), (local, base)]
                for executor, sink in pair if i % 2 == 0 else reversed(pair):
                    sink.append(_time(executor, argv, workdir))
            out["commands"][name] = {"ours": ours, "baseline": base}
    for policy_name in ("oracle", "random"):
        log(f"episodes: {policy_name} policy on {s.tasks} tasks x {s.episode_rounds}")
        rates: dict[str, list[float]] = {"ours": [], "baseline": []}
        steps = 0
        outcomes: dict[str, int] = {}
        for r in range(s.episode_rounds):
            for key, executor in (("ours", sandbox), ("baseline", local)):
                started = time.perf_counter()
                for i, task in enumerate(tasks):
                    policy = (
                        oracle_policy(task)
                        if policy_name == "oracle"
                        else random_policy(1000 * r + i)
                    )
                    result, trajectory = run_episode(task, executor, policy)
                    if key == "ours":
                        steps += len(trajectory)
                        outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
                rates[key].append(len(tasks) / (time.perf_counter() - started))
        out["episodes"][policy_name] = {
            **rates,
            "steps_per_episode": steps / (s.tasks * s.episode_rounds),
            "outcomes": outcomes,
        }
    return out


def build_rows(res: dict) -> list[_common.Row]:
    rows = [
        _common.Row(
            f"one command: {name}",
            "ms",
            1000 * _common.median(v["ours"]),
            1000 * _common.median(v["baseline"]),
            higher_is_better=False,
            samples=v,
        )
        for name, v in res["commands"].items()
    ]
    for name, v in res["episodes"].items():
        rows.append(
            _common.Row(
                f"episodes, {name} policy ({v['steps_per_episode']:.1f} steps each)",
                "episodes/s",
                _common.median(v["ours"]),
                _common.median(v["baseline"]),
                samples={"ours": v["ours"], "baseline": v["baseline"]},
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    _, s, out = _common.bench_args("shell", __doc__, "~20 s", full=FULL, quick=QUICK, argv=argv)
    console = Console()
    res, machine, elapsed = _common.run(lambda log: measure(s, log), ["msgspec"], console)
    rows = build_rows(res)
    _common.print_rows("shell: sandboxed vs unsandboxed", rows, "sandbox", "no sandbox", console)
    overhead = {
        name: 1000 * (_common.median(v["ours"]) - _common.median(v["baseline"]))
        for name, v in res["commands"].items()
    }
    notes = [
        "Ratios: no-sandbox time / sandbox time for commands (below 1 by the sandbox's cost), "
        "sandbox / no-sandbox episodes per second.",
        "Sandbox overhead per command (median difference): "
        + ", ".join(f"{k} {v:+.1f} ms" for k, v in overhead.items())
        + ".",
        "Oracle outcomes (sandboxed): "
        + ", ".join(f"{k} {v}" for k, v in res["episodes"]["oracle"]["outcomes"].items())
        + "; random: "
        + ", ".join(f"{k} {v}" for k, v in res["episodes"]["random"]["outcomes"].items())
        + ".",
        "Episodes run one at a time in this process, without a student or NATS: what the "
        "environment and the sandbox cost, the floor under a runner's episode time. An episode "
        "ends with its evaluation: one test run on a clean copy of the task.",
        "Both executors apply the same rlimits and environment; the sandbox adds bubblewrap's "
        "namespaces and mounts, the seccomp filter, the uid slot and chown of the task dir "
        "(as root), and the process-tree sampling.",
    ]
    for line in notes[1:3]:
        console.print(line)
    _common.report(
        console,
        out,
        title="Shell benchmark: the sandbox's cost per command and per episode",
        rows=rows,
        ours="sandbox",
        baseline="no sandbox",
        machine=machine,
        settings=asdict(s),
        notes=notes,
        elapsed_s=elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
