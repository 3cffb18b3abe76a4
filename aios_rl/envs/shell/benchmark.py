"""``aios-rl shell benchmark-generate``: generate, verify and store a split of shell tasks.

:func:`benchmark_generate` is the whole command as a function (the CLI wires its arguments):
generation verifies every task as it goes (see :mod:`.generate` and :mod:`.realcode`), then the
tasks go to a directory (``out_dir``) and/or the Object Store ``tasks`` of a running stack
(``nats_url``), and a summary of families, operators and timings is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aios_rl.bus import connect, provision
from contracts import Names, ShellTask

from ...state.tasks import PutResult
from .generate import generate
from .store import ShellTaskStore, write_dir
from .verify import RunCache, default_cache_dir

__all__ = ["BenchmarkSummary", "benchmark_generate", "store_tasks"]


@dataclass
class BenchmarkSummary:
    """What a ``benchmark-generate`` run produced."""

    split: str
    seed: int
    count: int
    seconds: float
    """Wall-clock time of generation and verification."""
    families: dict[str, int] = field(default_factory=dict)
    operators: dict[str, int] = field(default_factory=dict)
    task_ids: list[str] = field(default_factory=list)
    out_dir: str | None = None
    stored: PutResult | None = None

    def render(self) -> str:
        lines = [
            f"{self.count} verified {self.split} tasks (seed {self.seed}) in {self.seconds:.1f}s "
            f"({self.seconds / max(self.count, 1):.2f}s per task)",
            "families:  " + ", ".join(f"{k} {v}" for k, v in sorted(self.families.items())),
            "operators: " + ", ".join(f"{k} {v}" for k, v in sorted(self.operators.items())),
        ]
        if self.out_dir is not None:
            lines.append(f"written to {self.out_dir}")
        if self.stored is not None:
            lines.append(
                f"object store: {self.stored.stored} stored, {self.stored.existing} already "
                f"there, index +{sum(self.stored.indexed.values())}"
            )
        return "\n".join(lines)


async def store_tasks(
    tasks: Sequence[ShellTask], nats_url: str, *, namespace: str = ""
) -> PutResult:
    """Put ``tasks`` into the ``tasks`` Object Store of the stack at ``nats_url`` (provisioning
    the topology first, which is idempotent) and index them by split.

    Raises ``ConnectError`` when no server answers, ``TaskStoreError`` when storing fails."""
    async with connect(nats_url, name="shell-benchmark-generate", names=Names(namespace)) as bus:
        await provision(bus)
        return await ShellTaskStore(bus).put_all(tasks)


def benchmark_generate(
    count: int,
    seed: int = 0,
    split: Literal["train", "heldout", "real"] = "train",
    out_dir: str | Path | None = None,
    nats_url: str | None = None,
    *,
    namespace: str = "",
    workers: int = 2,
    cache_dir: str | Path | None = None,
    use_cache: bool = True,
    echo: Callable[[str], None] = print,
) -> BenchmarkSummary:
    """Generate ``count`` verified tasks of ``split`` for ``seed``, store them (directory and/or
    Object Store), print progress and a summary through ``echo``, and return the summary.

    Test runs are cached on disk (``cache_dir``, by default :func:`.verify.default_cache_dir`)
    unless ``use_cache`` is false: a second run with the same seed makes almost no test run.
    Raises ``GenerationError`` when not enough tasks verify, and what :func:`store_tasks`
    raises."""
    cache = RunCache(Path(cache_dir) if cache_dir else default_cache_dir()) if use_cache else None
    started = time.monotonic()
    tasks = generate(count, seed, split, workers=workers, progress=echo, cache=cache)
    summary = BenchmarkSummary(
        split=split,
        seed=seed,
        count=len(tasks),
        seconds=time.monotonic() - started,
        families=dict(Counter(t.family for t in tasks)),
        operators=dict(Counter(t.ground_truth.operator for t in tasks)),
        task_ids=[t.task_id for t in tasks],
    )
    if out_dir is not None:
        write_dir(Path(out_dir), tasks)
        summary.out_dir = str(out_dir)
    if nats_url is not None:
        summary.stored = asyncio.run(store_tasks(tasks, nats_url, namespace=namespace))
    echo(summary.render())
    return summary
