"""The engine behind every environment's ``train`` and ``eval`` (and ``mixed``, ``demo``,
``agentbench train``): the stack a command runs on, the tasks a split needs, evaluating a
checkpoint through the environment's runners, a campaign with held-out scores before and after.

``train`` and ``eval`` use the stack at ``--nats-url`` when it answers, else start an embedded one
on the store (``--store``, shared by every command, so ``shell eval`` after ``shell train`` or
``demo`` evaluates the trained student). Tasks a split lacks are generated first (shell tasks are
verified, their test runs cached on disk, so this is slow once). Evaluation runs ``eval``
episodes through the real runners, near-greedy and seeded. Which environment: the command's
``environment`` (``--env``, or the one its group is for).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from contracts import Episode, HeldoutScore, Names, RailState

from ..bus import Bus
from ..envs import registry
from ..envs.shell.store import ShellTaskStore
from ..envs.shell.verify import RunCache, default_cache_dir
from ..rollouts import RAIL
from ..stack.embedded import Stack, StackError, active_checkpoint, stack
from ..state.checkpoints import CheckpointRegistry, UnknownCheckpointError
from ..state.control import ControlStore
from ..state.ledger import Ledger
from . import evaluation
from ._common import (
    CliError,
    branching_spec,
    make_console,
    print_campaign_json,
    print_json,
    url,
)
from ._training import (
    IMPORTED,
    agent_runner,
    agent_service_env,
    apply_teacher,
    campaign_spec,
    check_agent,
    check_store_student,
    check_student,
    check_teacher,
    check_text_student,
    current_teacher,
    embedded_options,
    option_needs,
)
from .campaign_watch import run_campaign
from .evaluation import EvalSummary
from .rail import rail_tables
from .report import epoch_table, learning_signals, rollout_table, signals_line

__all__ = [
    "NEEDS",
    "POINTERS",
    "AfterEval",
    "check_training",
    "ensure_tasks",
    "evaluate",
    "needs_of",
    "on_a_stack",
    "open_stack",
    "resolve",
    "run_eval",
    "run_train",
    "summary_table",
    "train_and_report",
]

NEEDS = {"campaign", "trainer", "sampler", "teacher-gateway", "reward"}
"""The services every campaign needs, whatever its environments (their runners: :func:`needs_of`)."""
POINTERS = ("active", "pre_update_ref", "last_stable")


def on_a_stack(
    command: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """``command`` with the URL resolved, and a stack that is not usable as a one-line error."""

    def run(args: argparse.Namespace) -> int:
        args.nats_url = url(args)
        try:
            return command(args)
        except (StackError, TimeoutError) as exc:
            raise CliError(str(exc)) from exc

    return run


async def ensure_tasks(
    bus: Bus, split: str, count: int, console: Console, *, seed: int = 0, env: str = "shell"
) -> list[str]:
    """The first ``count`` task ids of ``split``, generating and storing what is missing."""
    if env in IMPORTED:  # AgentBench's tasks: what was imported, never generated
        ids = await registry.task_store(bus, env).list(split)
        if not ids:
            raise CliError(
                f"no {env} tasks in split {split}: store them first with `aios-rl agentbench "
                f"import --env {env.removeprefix('agentbench_')} --split {split} --dir ...`"
            )
        if len(ids) < count:
            console.print(
                f"{split}: using the {len(ids)} imported {env} tasks there ({count} asked)"
            )
        return ids[:count]
    if env != "shell":
        other = registry.task_store(bus, env)
        ids = await other.list(split)
        if len(ids) < count:
            tasks = registry.generator(env)(count, seed=seed, split=split)
            await other.put_all(tasks)
            console.print(f"{len(tasks)} {split} {env} tasks stored")
            ids = await other.list(split)
        return ids[:count]
    store = ShellTaskStore(bus)
    ids = await store.list(split)
    if split == "real-heldout" or (split == "real" and ids and await _has_imported(store, ids)):
        # Users' tasks (shell import / shell mine): never topped up with generated ones.
        if not ids:
            raise CliError(
                "no real-heldout tasks in the store: `aios-rl shell mine REPO` assigns some "
                "commits to it (--heldout-share)"
            )
        if len(ids) < count:
            console.print(f"{split}: using the {len(ids)} imported tasks there ({count} asked)")
        return ids[:count]
    if len(ids) < count:
        console.print(
            f"generating {count} verified {split} shell tasks (cached after the first run)"
        )
        started = time.monotonic()
        tasks = await asyncio.to_thread(
            registry.generator("shell"),
            count,
            seed,
            split,  # type: ignore[arg-type]
            cache=RunCache(default_cache_dir()),
            progress=lambda line: console.log(line),
        )
        await store.put_all(tasks)
        console.print(f"{len(tasks)} {split} tasks stored in {time.monotonic() - started:.0f}s")
        ids = await store.list(split)
    return ids[:count]


async def _has_imported(store: ShellTaskStore, ids: list[str]) -> bool:
    """Whether the split holds tasks imported or mined from users' code (their ``source``)."""
    for task_id in ids[:20]:
        if (await store.get(task_id)).source.startswith(("import:", "mined:")):
            return True
    return False


async def resolve(bus: Bus, checkpoint: str) -> str:
    """A pointer name (``active``...) or a checkpoint id, as the id. Raises ``StackError``."""
    registry = CheckpointRegistry(bus)
    if checkpoint == "active":
        return await active_checkpoint(bus, 120)
    if checkpoint in POINTERS:
        pointers, _ = await registry.pointers()
        value = getattr(pointers, checkpoint)
        if not value:
            raise StackError(f"the pointer {checkpoint} is not set yet")
        return value
    try:
        await registry.meta(checkpoint)
    except (UnknownCheckpointError, ValueError):
        # The tables print ids shortened: a unique prefix (at least 6 characters) names one too.
        matches = (
            sorted(i for i in (await registry.snapshot()).metas if i.startswith(checkpoint))
            if len(checkpoint) >= 6
            else []
        )
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise StackError(
                f"{checkpoint!r} is the start of {len(matches)} checkpoints: give more of it"
            ) from None
        raise StackError(f"no checkpoint {checkpoint!r} in the registry") from None
    return checkpoint


async def evaluate(
    bus: Bus,
    checkpoint: str,
    task_ids: list[str],
    console: Console,
    *,
    split: str,
    label: str,
    seed: int = 0,
    env: str = "shell",
) -> tuple[EvalSummary, list[Episode]]:
    """Evaluate ``checkpoint`` on ``task_ids`` with a progress bar."""
    run_id = f"eval-{checkpoint[:12]}-{int(time.time() * 1000)}"
    with Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[tally]}"),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task(label, total=len(task_ids), tally="")
        tally: dict[str, int] = {}

        def seen(ep: Episode) -> None:
            tally[ep.outcome] = tally.get(ep.outcome, 0) + 1
            progress.update(
                bar,
                advance=1,
                tally=" ".join(f"{k} {v}" for k, v in sorted(tally.items())),
            )

        episodes = await evaluation.run_eval(
            bus,
            env,
            checkpoint,
            task_ids,
            run_id=run_id,
            split=split,
            seed=seed,
            timeout_s=max(300.0, 10.0 * len(task_ids)),
            on_episode=seen,
        )
    return evaluation.summarize(episodes), episodes


def summary_table(title: str, summaries: dict[str, EvalSummary]) -> Table:
    table = Table(title=title)
    table.add_column("checkpoint")
    for col in ("episodes", "success", "partial", "mean reward", "blocked"):
        table.add_column(col, justify="right")
    for name, s in summaries.items():
        table.add_row(
            name,
            str(s.episodes),
            s.success.pct(),
            s.partial.pct(),
            s.reward.num(),
            str(s.blocked),
        )
    return table


@asynccontextmanager
async def open_stack(
    args: argparse.Namespace, console: Console, needs: set[str]
) -> AsyncIterator[Stack]:
    """The stack a command runs against (``--nats-url``'s, else the store's): with the
    services the training options ask for (``--student``, ``--teacher``, ``--agent-cmd``: the
    agent gateway, and the runner given the agent's command and a new token for it)."""
    env = getattr(args, "environment", "shell")
    runner = agent_runner(args)
    service_env = agent_service_env(args)
    async with stack(
        args.nats_url,
        namespace=args.namespace,
        data_dir=Path(args.store),
        insecure=args.insecure,
        needs=needs | option_needs(args),
        echo=console.print,
        environments=(env,) if env in IMPORTED else (),
        service_env=service_env,
        embedded_only="--agent-cmd" if runner else "",
        **embedded_options(args),  # type: ignore[arg-type]
    ) as st:
        yield st


def needs_of(env: str) -> set[str]:
    """The services an episode of ``env`` needs besides the sampler and trainer."""
    return {f"{env}-runner", *({"sites"} if env == "browser" else set())}


AfterEval = Callable[[Bus, list[str]], Awaitable[dict[str, float]]]
"""Reference policies' mean reward on the eval's tasks, on the same stack (the environment's
baselines): printed as a table after the summary, or under ``baselines`` with ``--json``."""


def run_eval(args: argparse.Namespace, after: AfterEval | None = None) -> int:
    """``ENV eval``: the checkpoint ``--checkpoint`` names on ``--limit`` tasks of ``--split``,
    through the environment's runners, near-greedy and seeded; the summary with 95 % intervals
    (``after``: and the environment's baselines on the same tasks)."""
    console = make_console(args)
    env = getattr(args, "environment", "shell")

    async def main() -> int:
        async with open_stack(args, console, {"sampler", "trainer", *needs_of(env)}) as st:
            ids = await ensure_tasks(st.bus, args.split, args.limit, console, env=env)
            checkpoint = await resolve(st.bus, args.checkpoint)
            summary, _ = await evaluate(
                st.bus,
                checkpoint,
                ids,
                console,
                split=args.split,
                label=f"{args.split} eval",
                seed=args.seed,
                env=env,
            )
            baselines = await after(st.bus, ids) if after is not None else {}
            if args.json:
                print_json(
                    {
                        "checkpoint": checkpoint,
                        "split": args.split,
                        **summary.__dict__,
                        **({"baselines": baselines} if after is not None else {}),
                    }
                )
                return 0
            console.print(
                summary_table(
                    f"{env} eval: {args.split}, {len(ids)} tasks, near-greedy, 95% intervals",
                    {
                        checkpoint[:12]
                        + (f" ({args.checkpoint})" if args.checkpoint in POINTERS else ""): summary
                    },
                )
            )
            if baselines:
                table = Table(
                    title=f"baselines on the same {len(ids)} tasks (mean reward, in process)"
                )
                table.add_column("policy")
                table.add_column("mean reward", justify="right")
                for name, reward in baselines.items():
                    table.add_row(name, f"{reward:.3f}")
                console.print(table)
        return 0

    return asyncio.run(main())


async def train_and_report(
    bus: Bus, console: Console, args: argparse.Namespace, *, campaign_id: str
) -> int:
    """Tasks, the held-out score before, the campaign, the held-out score of each epoch's
    policy, the summary table (or, with ``--json``, one JSON document). Shared by every
    environment's ``train`` and ``demo``."""
    started = time.monotonic()
    env = getattr(args, "environment", "shell")
    spec = campaign_spec(args, campaign_id, {env: 1.0})
    await ensure_tasks(bus, spec.split, args.train_tasks, console, seed=args.seed, env=env)
    heldout_split = getattr(args, "heldout_split", None) or "heldout"
    if heldout_split == spec.split:
        console.print(f"held-out scores on {spec.split}, the training split: they are not held out")
    if env == "shell" and spec.split == "real" and await ShellTaskStore(bus).list("real-heldout"):
        heldout_split = "real-heldout"  # mined tasks held out by commit: the score that matters
        console.print("held-out scores on real-heldout (tasks mined from the same history)")
    heldout = await ensure_tasks(bus, heldout_split, args.heldout, console, seed=args.seed, env=env)
    initial = await active_checkpoint(bus, 120)
    await check_store_student(bus, initial, args.student)
    if env in IMPORTED or getattr(args, "agent_cmd", None):
        await check_text_student(bus, initial, why="--agent-cmd" if env not in IMPORTED else "")
    await apply_teacher(bus, args.teacher)
    teacher = await current_teacher(bus)
    console.print(signals_line(spec.trainer, teacher))
    before, _ = await evaluate(
        bus, initial, heldout, console, split=heldout_split, label="held-out, before", env=env
    )
    console.print(
        f"student {initial[:12]} before training: held-out success {before.success.pct()}, "
        f"mean reward {before.reward.num()}"
    )
    end = await run_campaign(bus, spec, console)
    records = await Ledger(bus).records(campaign_id)
    scores: dict[str, EvalSummary] = {initial: before}
    for r in records:
        if r.active_checkpoint and r.active_checkpoint not in scores:
            scores[r.active_checkpoint], _ = await evaluate(
                bus,
                r.active_checkpoint,
                heldout,
                console,
                split=heldout_split,
                label=f"held-out, epoch {r.epoch}",
                env=env,
            )
    final = (await CheckpointRegistry(bus).pointers())[0].active or initial
    if final not in scores:
        scores[final], _ = await evaluate(
            bus, final, heldout, console, split=heldout_split, label="held-out, final", env=env
        )
    heldout_by_epoch = {
        r.epoch: scores[r.active_checkpoint].success.value
        for r in records
        if r.active_checkpoint in scores
    }
    scored = [(r.epoch, r.active_checkpoint) for r in records if r.active_checkpoint in scores]
    scored.append((records[-1].epoch + 1 if records else 0, final))
    for epoch, checkpoint in scored:
        summary = scores[checkpoint]  # type: ignore[index]
        await Ledger(bus).put_heldout(
            HeldoutScore(
                campaign_id=campaign_id,
                epoch=epoch,
                checkpoint_id=checkpoint,  # type: ignore[arg-type]
                environment=env,
                tasks=summary.episodes,
                successes=round(summary.success.value * summary.episodes),
                mean_reward=summary.reward.value,
                at=time.time(),
            )
        )
    code = 0 if end == "finished" else 1
    if args.json:
        print_campaign_json(
            campaign_id,
            end,
            spec,
            {"checkpoint": initial, **before.__dict__},
            {"checkpoint": final, **scores[final].__dict__},
            records,
            time.monotonic() - started,
            heldout_success_by_epoch=heldout_by_epoch,
            learned_from=learning_signals(spec.trainer, teacher),
        )
        return code
    console.print(
        epoch_table(records, title=f"campaign {campaign_id} ({end})", heldout=heldout_by_epoch)
    )
    console.print(rollout_table(records, title="rollouts: what each epoch spent"))
    if spec.rollout_strategy in RAIL:
        snap, _ = await ControlStore(bus).load(Names.key_control("rail", campaign_id))
        if snap is not None and isinstance(snap.state, RailState):
            for table in rail_tables([snap.state]):
                console.print(table)
    console.print(
        summary_table(
            f"held-out ({len(heldout)} tasks): before and after",
            {f"{initial[:12]} (before)": before, f"{final[:12]} (active now)": scores[final]},
        )
    )
    console.print(signals_line(spec.trainer, teacher))
    console.print(f"{time.monotonic() - started:.0f}s; active is {final}")
    return code


def check_training(args: argparse.Namespace, environments: list[str]) -> None:
    """Raise ``CliError`` before any stack starts for training options that cannot run."""
    branching_spec(args)
    check_student(args)
    check_agent(args, environments)
    check_teacher(args)
    campaign_spec(args, "probe", dict.fromkeys(environments, 1.0))


def run_train(args: argparse.Namespace) -> int:
    """``ENV train`` (and ``agentbench train``): a campaign on the environment, with held-out
    scores before, after each epoch and at the end (:func:`train_and_report`)."""
    env = getattr(args, "environment", "shell")
    check_training(args, [env])
    console = make_console(args)

    async def main() -> int:
        needs = NEEDS | needs_of(env)
        needs |= {"rail"} if args.strategy in RAIL else set()
        async with open_stack(args, console, needs) as st:
            campaign_id = args.campaign_id or f"{env}-{time.strftime('%Y%m%d-%H%M%S')}"
            return await train_and_report(st.bus, console, args, campaign_id=campaign_id)

    return asyncio.run(main())
