"""``aios-rl agentbench``: AgentBench's DB and OS benches as environments (``agentbench_db``,
``agentbench_os``).

- ``verify``: every task's reference solution through the environment, pass / fail with the
  failure class (both benches by default, each whose data is there);
- ``import``: the tasks into the task store (for ``eval``, campaigns and runners);
- ``eval``: a checkpoint of a text student on the stored tasks, through the real runners (an
  embedded stack starts the environment's runner; ``--student hf --model-path DIR`` for a new
  store), with 95 % intervals and how the episodes ended;
- ``images build | list``: the OS bench's root filesystems (built once from the Debian mirror by
  mmdebstrap, cached by content; a task never downloads).

``--dir`` is an AgentBench data folder in AgentBench's layout (``dbbench/<split>.jsonl``,
``os_interaction/data/<split>.json`` or ``os_interaction/data/<split>/*.json`` with scripts in
``os_interaction/scripts/<split>/``; a checkout's ``data/`` folder, or the dev splits this
project's CI uses; a checkout of AgentBench stands for its ``data/``): default ``$AGENTBENCH_DIR``.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

from ..student import TEXT_BACKENDS
from ._common import (
    CliError,
    bus_args,
    insecure_arg,
    json_arg,
    make_console,
    positive,
    print_json,
    read_state,
    store_arg,
    training_args,
    url,
)

__all__ = ["add"]


def _data_args(p: argparse.ArgumentParser, env_default: str) -> None:
    p.add_argument("--split", default="dev", help="which split's files, and its name (dev)")
    p.add_argument(
        "--dir",
        "--agentbench-dir",
        dest="dir",
        type=Path,
        default=os.environ.get("AGENTBENCH_DIR"),
        help="AgentBench's data folder (dbbench/, os_interaction/), or a checkout of AgentBench "
        "(its data/ is used; env AGENTBENCH_DIR)",
    )
    choices = ("db", "os", "all") if env_default == "all" else ("db", "os")
    p.add_argument(
        "--env", choices=choices, default=env_default, help=f"which bench ({env_default})"
    )


def add(subparsers: argparse._SubParsersAction) -> None:
    ab = subparsers.add_parser("agentbench", help="AgentBench's benchmarks as environments")
    sub = ab.add_subparsers(dest="agentbench_command", metavar="ACTION", required=True)
    verify = sub.add_parser(
        "verify",
        help="run every task's reference solution through the environment: pass / fail",
    )
    _data_args(verify, "all")
    json_arg(verify)
    verify.set_defaults(run=_verify)

    imp = sub.add_parser(
        "import",
        help="store AgentBench's tasks in the task store (agentbench_db or agentbench_os)",
    )
    _data_args(imp, "db")
    store_arg(imp)
    bus_args(imp)
    imp.set_defaults(run=_import)

    ev = sub.add_parser(
        "eval",
        help="evaluate a checkpoint of a text student on stored AgentBench tasks (runners, "
        "95%% intervals)",
    )
    ev.add_argument("--env", choices=("db", "os"), default="os", help="which bench (os)")
    ev.add_argument(
        "--checkpoint",
        default="active",
        metavar="ID|POINTER",
        help="checkpoint id, or active / last_stable / pre_update_ref (default active)",
    )
    ev.add_argument("--split", default="dev", help="the imported split (default dev)")
    ev.add_argument("--limit", type=positive, default=100, help="tasks to run (default 100)")
    ev.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ev.add_argument(
        "--student",
        choices=TEXT_BACKENDS,
        default=None,
        help="the student a new store starts from (it must write text: hf, with --model-path)",
    )
    ev.add_argument(
        "--model-path", metavar="DIR", default=None, help="--student hf: the model directory"
    )
    json_arg(ev)
    store_arg(ev)
    insecure_arg(ev)
    bus_args(ev)
    ev.set_defaults(run=_eval)

    train = sub.add_parser(
        "train",
        help="train a text student on imported AgentBench tasks: a campaign with held-out "
        "scores before and after (--student hf --model-path DIR for a new store)",
    )
    train.add_argument("--env", choices=("db", "os"), default="os", help="which bench (os)")
    training_args(train, epochs=3, train_tasks=100, heldout=30, tasks_per_epoch=8, splits=("dev",))
    train.add_argument("--split", default="dev", help="the imported split to train on (dev)")
    train.add_argument(
        "--heldout-split",
        default=None,
        help="the imported split scored before and after (default: the training split, which "
        "is then not held out)",
    )
    train.add_argument("--campaign-id", help="campaign id (default agentbench_<env>-<time>)")
    bus_args(train)
    train.set_defaults(run=_train)

    images = sub.add_parser("images", help="the OS bench's root filesystems: build, list")
    isub = images.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = isub.add_parser("build", help="build images (needs root, mmdebstrap, Debian mirror)")
    build.add_argument("names", nargs="*", default=["default"], help="images (default)")
    build.add_argument("--mirror", default=None, help="Debian mirror URL (mmdebstrap's default)")
    build.set_defaults(run=_images_build)
    listing = isub.add_parser("list", help="the known images and whether each is built")
    json_arg(listing)
    listing.set_defaults(run=_images_list)


def _db_tasks(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    path = Path(args.dir) / "dbbench" / f"{args.split}.jsonl"
    if not path.is_file():
        raise CliError(f"no DB tasks at {path}")
    from ..envs.agentbench.db import load_db_tasks

    try:
        return load_db_tasks(path, args.split)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _os_files(args: argparse.Namespace) -> tuple[list[Path], Path]:
    base = Path(args.dir) / "os_interaction"
    one = base / "data" / f"{args.split}.json"
    files = [one] if one.is_file() else sorted((base / "data" / args.split).glob("*.json*"))
    if not files:
        raise CliError(f"no OS tasks at {one} or {base / 'data' / args.split}/*.json")
    return files, base / "scripts" / args.split


def _os_tasks(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ..envs.agentbench.os import load_os_tasks

    files, scripts = _os_files(args)
    try:
        return [t for f in files for t in load_os_tasks(f, scripts, args.split)]
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _need_dir(args: argparse.Namespace) -> None:
    """``args.dir`` checked; a checkout of AgentBench stands for its ``data/`` folder."""
    if args.dir is None:
        raise CliError("give --dir (AgentBench's data folder) or set AGENTBENCH_DIR")
    if not Path(args.dir).is_dir():
        raise CliError(f"no such folder: {args.dir}")
    data = Path(args.dir) / "data"
    if any((data / sub).is_dir() for sub in ("dbbench", "os_interaction")):
        args.dir = data


def _import(args: argparse.Namespace) -> int:
    import asyncio

    from ..envs.registry import task_store
    from ..stack.embedded import NoStoreError, StackError

    _need_dir(args)
    env = f"agentbench_{args.env}"
    tasks = _db_tasks(args) if args.env == "db" else _os_tasks(args)

    async def put() -> str:
        async with read_state(args, "aios-rl-agentbench-import", create=True) as state:
            result = await task_store(state.bus, env).put_all(tasks)
            return f"{result.stored} new, {result.existing} already there"

    try:
        said = asyncio.run(put())
    except (NoStoreError, StackError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
    make_console(args).print(
        f"{len(tasks)} {env} tasks in split {args.split}: {said}. A runner runs their "
        f"rollout jobs: `python -m services.runner --env {env}` on a stack started with "
        f"`aios-rl up --env {env}` (docs/agentbench.md)"
    )
    return 0


def _images_build(args: argparse.Namespace) -> int:
    from ..envs.agentbench.images import ImageMissing, build_image

    console = make_console(args)
    for name in args.names:
        try:
            root = build_image(name, mirror=args.mirror, log=console.print)
        except (ImageMissing, PermissionError, FileNotFoundError, RuntimeError) as exc:
            raise CliError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from None
        console.print(f"{name}: {root}")
    return 0


def _images_list(args: argparse.Namespace) -> int:
    from ..envs.agentbench.images import IMAGES, image_dir, images_home, recipe_digest

    rows = []
    for name, recipe in sorted(IMAGES.items()):
        where = image_dir(recipe)
        rows.append(
            {
                "image": name,
                "digest": recipe_digest(recipe),
                "built": (where / "manifest.json").is_file(),
                "path": str(where / "root"),
                "packages": list(recipe.packages),
            }
        )
    if args.json:
        print_json({"home": str(images_home()), "images": rows})
        return 0
    table = Table(title=f"agentbench OS images in {images_home()}")
    for col in ("image", "digest", "built", "packages"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["image"], r["digest"], "yes" if r["built"] else "no", " ".join(r["packages"])
        )
    make_console(args).print(table)
    return 0


def _with_progress(console: Any, bench: str, tasks: list[Any], verify: Any) -> list[Any]:
    """``verify(tasks, progress=...)`` under a status line counting the tasks done."""
    with console.status(f"verifying {len(tasks)} {bench} tasks") as status:
        done: list[object] = []

        def seen(check: object) -> None:
            done.append(check)
            status.update(f"verifying {bench} tasks: {len(done)}/{len(tasks)}")

        return verify(tasks, progress=seen)


def _verify_os(args: argparse.Namespace, console: Any) -> list[Any]:
    from ..envs.agentbench.images import ImageMissing, image_root
    from ..envs.agentbench.verify import verify_os

    tasks = _os_tasks(args)
    if os.geteuid() != 0:
        raise CliError("the agentbench OS environment needs root (its machines map 65536 uids)")
    try:
        for image in sorted({t.image for t in tasks}):
            image_root(image)
    except ImageMissing as exc:
        raise CliError(str(exc)) from None
    return _with_progress(console, "OS", tasks, verify_os)


def _verify_db(args: argparse.Namespace, console: Any) -> list[Any]:
    from ..envs.agentbench.mariadb import MariaDbError
    from ..envs.agentbench.verify import verify_db

    tasks = _db_tasks(args)
    try:
        return _with_progress(console, "DB", tasks, verify_db)
    except MariaDbError as exc:
        raise CliError(str(exc)) from None


def _verify(args: argparse.Namespace) -> int:
    _need_dir(args)
    console = make_console(args)
    benches = ["db", "os"] if args.env == "all" else [args.env]
    if args.env == "all":
        base = Path(args.dir)
        benches = [
            b for b in benches if (base / ("dbbench" if b == "db" else "os_interaction")).is_dir()
        ]
        if not benches:
            raise CliError(f"{args.dir} holds neither dbbench/ nor os_interaction/")
    results = {b: (_verify_db if b == "db" else _verify_os)(args, console) for b in benches}
    every = [c for checks in results.values() for c in checks]
    ok = all(c.passed for c in every)
    if args.json:
        print_json(
            {
                "split": args.split,
                **{
                    b: {
                        "tasks": len(checks),
                        "passed": sum(c.passed for c in checks),
                        "checks": [c.__dict__ for c in checks],
                    }
                    for b, checks in results.items()
                },
            }
        )
        return 0 if ok else 1
    for bench, checks in results.items():
        passed = sum(c.passed for c in checks)
        table = Table(title=f"agentbench {bench}, {args.split}: {passed}/{len(checks)} pass")
        for col in ("task", "source", "kind", "result", "failure"):
            table.add_column(col)
        for c in checks:
            table.add_row(
                c.task_id, c.source, c.kind, "pass" if c.passed else "FAIL",
                f"{c.failure}: {c.detail}" if c.failure else c.detail,
            )  # fmt: skip
        console.print(table)
        by_kind = Counter(c.kind for c in checks)
        ok_kind = Counter(c.kind for c in checks if c.passed)
        console.print(
            f"{bench}: "
            + ", ".join(f"{k} {ok_kind[k]}/{n}" for k, n in sorted(by_kind.items()))
            + "; failure classes: "
            + f"{dict(Counter(c.failure for c in checks if not c.passed)) or 'none'}"
        )
    return 0 if ok else 1


def _eval(args: argparse.Namespace) -> int:
    import asyncio

    from contracts.subjects import runner_name

    from ..envs.registry import task_store
    from ..stack.embedded import StackError, stack
    from ._training import check_student, check_text_student, embedded_options
    from .engine import evaluate, resolve, summary_table

    check_student(args)
    env = f"agentbench_{args.env}"
    args.nats_url = url(args)
    console = make_console(args)

    async def main() -> int:
        async with stack(
            args.nats_url,
            namespace=args.namespace,
            data_dir=Path(args.store),
            insecure=args.insecure,
            needs={"sampler", "trainer", runner_name(env)},
            echo=console.print,
            environments=(env,),
            **embedded_options(args),  # type: ignore[arg-type]
        ) as st:
            ids = (await task_store(st.bus, env).list(args.split))[: args.limit]
            if not ids:
                raise CliError(
                    f"no {env} tasks in split {args.split}: store them first with "
                    f"`aios-rl agentbench import --env {args.env} --split {args.split} --dir ...`"
                )
            checkpoint = await resolve(st.bus, args.checkpoint)
            await check_text_student(st.bus, checkpoint)
            summary, episodes = await evaluate(
                st.bus,
                checkpoint,
                ids,
                console,
                split=args.split,
                label=f"{env} {args.split}",
                seed=args.seed,
                env=env,
            )
            endings = Counter(ep.info.get("ending") or ep.outcome for ep in episodes)
            if args.json:
                print_json(
                    {
                        "environment": env,
                        "checkpoint": checkpoint,
                        "split": args.split,
                        **summary.__dict__,
                        "endings": dict(endings),
                    }
                )
                return 0
            console.print(
                summary_table(
                    f"{env} eval: {args.split}, {len(ids)} tasks, near-greedy, 95% intervals",
                    {checkpoint[:12]: summary},
                )
            )
            console.print(
                "how the episodes ended: "
                + ", ".join(f"{k} {v}" for k, v in sorted(endings.items()))
            )
            return 0

    try:
        return asyncio.run(main())
    except (StackError, TimeoutError) as exc:
        raise CliError(str(exc)) from None


def _train(args: argparse.Namespace) -> int:
    from ..stack.embedded import StackError
    from .engine import run_train

    args.environment = f"agentbench_{args.env}"
    args.heldout_split = args.heldout_split or args.split
    if args.student is not None and args.student not in TEXT_BACKENDS:
        raise CliError(f"--student {args.student} cannot write text: AgentBench needs hf")
    args.nats_url = url(args)
    try:
        return run_train(args)
    except (StackError, TimeoutError) as exc:
        raise CliError(str(exc)) from None
