"""What the commands share: the bus and training arguments, the server URL, one-line errors,
running until Ctrl-C, and the state a command reads or writes (:func:`read_state`,
:func:`writing`: a command that stores tasks creates what it writes, :func:`provisioned`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import typing
import urllib.parse
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console

from aios_rl import recipes
from aios_rl.bus import Bus, ProvisionError, connect, provision
from aios_rl.errors import AiosError
from aios_rl.recipes import ENV_RECIPES
from aios_rl.rollouts import STRATEGIES
from aios_rl.rollouts import validate as validate_strategy
from aios_rl.stack.embedded import DEFAULT_STORE, reader
from aios_rl.stack.services import SERVICES
from contracts import (
    Algorithm,
    BranchingSettings,
    CampaignSpec,
    DecodingRegime,
    EnvironmentRecipe,
    Names,
)
from contracts.access import TEACHER_BACKENDS

__all__ = [
    "ALGORITHMS",
    "DEFAULT_URL",
    "STUDENTS",
    "TEACHERS",
    "CliError",
    "branching_spec",
    "bus_args",
    "fraction",
    "insecure_arg",
    "json_arg",
    "make_console",
    "nats_url",
    "port",
    "positive",
    "positive_float",
    "print_campaign_json",
    "print_json",
    "provisioned",
    "read_state",
    "run_until_interrupt",
    "store_arg",
    "training_args",
    "url",
    "use_credentials",
    "writing",
]

DEFAULT_URL = "nats://127.0.0.1:4222"

DEFAULT_CREDENTIALS = Path(".aios") / "stack" / "auth" / "admin.json"
"""The admin credentials ``aios-rl up`` keeps with its default ``--data-dir`` (a command's own
default is the one of its store: ``<--store>/auth/admin.json``)."""


ALGORITHMS: tuple[str, ...] = typing.get_args(Algorithm)
"""The trainer's updates (``TrainerSettings.algorithm``)."""

STUDENTS = ("tiny", "hf", "minilm", "lm")
"""Student backends ``--student`` offers."""

TEACHERS = tuple(
    dict.fromkeys(
        [
            *(
                s.name.removeprefix("teacher-")
                for s in SERVICES
                if s.name.startswith("teacher-") and s.name != "teacher-gateway"
            ),
            *TEACHER_BACKENDS,
            "none",
        ]
    )
)
"""Teacher backends ``--teacher`` offers: every ``teacher-<name>`` service but the gateway, the
backends deployed on their own (``ts``: examples/teacher-ts, which the stack does not start),
and ``none`` (no teacher)."""


class CliError(AiosError):
    """An error to show the user as one line."""


_SCHEMES = ("nats", "tls", "ws", "wss")


def nats_url(text: str) -> str:
    """A NATS server URL, or a comma-separated list of them (a cluster): ``nats://host:port``.
    Raises ``ArgumentTypeError`` (a one-line argparse error) for anything else."""
    for part in text.split(","):
        try:
            parsed = urllib.parse.urlsplit(part.strip())
            explicit_port = parsed.port
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{part!r} is not a NATS URL: {exc}") from None
        if parsed.scheme not in _SCHEMES or not parsed.hostname:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a NATS URL: use nats://HOST:PORT (or tls://, ws://, wss://)"
            )
        if explicit_port == 0:
            raise argparse.ArgumentTypeError(f"{part!r} is not a NATS URL: port 0")
    return text


def port(text: str) -> int:
    """A TCP port number (1-65535). Raises ``ArgumentTypeError`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (1-65535)")
    return value


def bus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nats-url",
        type=nats_url,
        default=os.environ.get("NATS_URL"),
        help=f"NATS server (env NATS_URL; default {DEFAULT_URL})",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("AIOS_NAMESPACE", ""),
        help="namespace of the stack (env AIOS_NAMESPACE)",
    )
    p.add_argument(
        "--credentials",
        default=os.environ.get("AIOS_CREDENTIALS"),
        metavar="FILE",
        help="NATS user and password to connect with: the admin's, <data-dir>/auth/admin.json "
        "of aios-rl up (env AIOS_CREDENTIALS; default <store>/auth/admin.json when it exists: "
        f"{DEFAULT_CREDENTIALS} unless --store / AIOS_STORE say otherwise; NATS_USER / "
        "NATS_PASSWORD win over both)",
    )


def use_credentials(args: argparse.Namespace) -> None:
    """Make ``--credentials`` (or the admin file of the command's store, ``<store>/auth/
    admin.json``, when it exists) the user and password every connection of this command makes,
    through ``NATS_USER`` / ``NATS_PASSWORD``; leaves them alone when the environment sets them.
    Raises ``CliError`` for an unreadable file. ``main`` restores the environment afterwards, so
    a command run in process leaves nothing behind."""
    if os.environ.get("NATS_USER"):
        return
    given = getattr(args, "credentials", None)
    store = getattr(args, "store", None) or getattr(args, "data_dir", None)
    if not store:
        store = Path(os.environ.get("AIOS_STORE") or DEFAULT_STORE)
    path = Path(given) if given else Path(store) / "auth" / "admin.json"
    if not given and not path.is_file():
        return
    try:
        doc = json.loads(path.read_text())
        user, password = str(doc["user"]), str(doc["password"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"cannot read credentials from {path}: {exc!r}") from None
    os.environ["NATS_USER"], os.environ["NATS_PASSWORD"] = user, password
    ca = path.parent / "tls" / "ca.pem"  # the stack's CA, when up runs with --tls
    if ca.is_file() and not os.environ.get("NATS_CA"):
        os.environ["NATS_CA"] = str(ca.resolve())


def insecure_arg(p: argparse.ArgumentParser) -> None:
    """``--insecure``: an embedded stack without NATS users (development only)."""
    p.add_argument(
        "--insecure",
        action="store_true",
        help="run an embedded stack without NATS users or permissions (development only; "
        "see docs/security.md)",
    )


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {value}")
    return value


def non_negative_float(text: str) -> float:
    """A number from 0 to 100 (a loss weight). Raises ``ArgumentTypeError`` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be between 0 and 100, not {value}")
    return value


def env_recipe(text: str) -> tuple[str, str]:
    """``ENV=grpo`` or ``ENV=recipe``. Raises ``ArgumentTypeError`` otherwise."""
    env, sep, name = text.partition("=")
    if not sep or not env.strip() or name.strip() not in ENV_RECIPES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not ENV=grpo or ENV=recipe (e.g. browser=grpo)"
        )
    return env.strip(), name.strip()


def env_recipes(given: Sequence[tuple[str, str]] | None) -> dict[str, EnvironmentRecipe]:
    """The trainer's per-environment recipes: the measured defaults, then ``--env-recipe``."""
    return recipes.env_recipes(dict(given or ()))


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"must be above 0 (and below 100), not {value}")
    return value


def store_arg(p: argparse.ArgumentParser) -> None:
    """``--store DIR`` (``--data-dir`` is the same): where the user's work is kept."""
    p.add_argument(
        "--store",
        "--data-dir",
        dest="store",
        type=Path,
        default=Path(os.environ.get("AIOS_STORE") or DEFAULT_STORE),
        metavar="DIR",
        help="where your work is kept, shared by every command: the embedded stack's JetStream "
        f"data, NATS users and service logs (env AIOS_STORE; default {DEFAULT_STORE}; "
        "--data-dir is the same)",
    )


def json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json", action="store_true", help="print the result as JSON (progress goes to stderr)"
    )


def training_args(
    p: argparse.ArgumentParser,
    *,
    epochs: int,
    train_tasks: int = 100,
    heldout: int = 50,
    tasks_per_epoch: int = 16,
    splits: tuple[str, ...] = ("train", "real"),
) -> None:
    """The options of every command that trains: the campaign's size, strategy, algorithm,
    student, teacher and split, the store, ``--json``."""
    p.add_argument("--epochs", type=positive, default=epochs, help=f"epochs (default {epochs})")
    p.add_argument(
        "--tasks-per-epoch",
        type=positive,
        default=tasks_per_epoch,
        help=f"tasks per epoch (default {tasks_per_epoch})",
    )
    p.add_argument(
        "--group-size",
        type=positive,
        default=4,
        help="rollouts per task, base rollouts and continuations together (default 4)",
    )
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="uniform",
        help="how each task's rollouts are spent: uniform GRPO groups, ARPO's entropy "
        "branching, DAPO's filter of tied groups, or RAIL's heuristic warm-up (default uniform)",
    )
    p.add_argument(
        "--initial-rollouts",
        type=positive,
        default=None,
        metavar="N",
        help="entropy / heuristic: base rollouts per task before branching (default half "
        "the group size)",
    )
    p.add_argument(
        "--branch-temperature",
        type=positive_float,
        default=None,
        metavar="T",
        help="entropy / heuristic: sampling temperature of continuations (default 1.0)",
    )
    p.add_argument(
        "--train-tasks",
        type=positive,
        default=train_tasks,
        help=f"tasks of the training split to draw from (default {train_tasks})",
    )
    p.add_argument(
        "--heldout",
        type=positive,
        default=heldout,
        help=f"held-out tasks scored before and after (default {heldout})",
    )
    if len(splits) > 1:
        p.add_argument(
            "--split",
            choices=splits,
            default=splits[0],
            help="the split the campaign trains on: generated tasks, or real code "
            "(standard-library modules with a bug, checked by their upstream tests); held-out "
            f"scores stay on the held-out split (default {splits[0]})",
        )
    else:
        p.set_defaults(split=splits[0])
    p.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default="grpo",
        help="the trainer's update: GRPO (group-relative advantages) or PPO (a learned value "
        "baseline) (default grpo)",
    )
    p.add_argument(
        "--learning-rate", type=fraction, default=5e-3, help="trainer step size (default 0.005)"
    )
    p.add_argument(
        "--distill",
        type=non_negative_float,
        default=0.0,
        metavar="WEIGHT",
        help="distil the teacher's hints into the student at this weight (cross-entropy toward "
        "the action the teacher named); 0: off, the student learns from reward alone (default 0)",
    )
    p.add_argument(
        "--self-imitation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also imitate each update's own successful rollouts (behaviour cloning filtered "
        "by the environment's outcome; a reward signal, not a teacher's); with step progress, "
        "what lets the student learn from reward alone (bench/results/learning_rl-*.md) "
        "(default on)",
    )
    p.add_argument(
        "--warm-optimizer",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep Adam's second moments from one update to the next when it starts from the "
        "weights the last one left, so an update with little to learn from takes a small step "
        "(a fresh Adam steps about the learning rate however weak the signal; not shown to "
        "help yet: docs/signals.md) (default off)",
    )
    p.add_argument(
        "--env-normalize",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="mixed campaigns: scale each environment's advantages to unit root mean square, "
        "so every environment weighs alike in an update (AgentRL's per-task normalisation) "
        "(default off)",
    )
    p.add_argument(
        "--progress-coef",
        type=non_negative_float,
        default=1.0,
        metavar="WEIGHT",
        help="credit each step with this times the progress the environment measured for it "
        "(shell: the tests re-run after each edit; environments that measure none: no "
        "effect); 0: every step shares its episode's credit (default 1)",
    )
    p.add_argument(
        "--env-recipe",
        type=env_recipe,
        action="append",
        default=None,
        metavar="ENV=grpo|recipe",
        help="how one environment's episodes learn from reward: grpo (GRPO alone) or recipe "
        "(the campaign's: --self-imitation, --progress-coef); repeatable (default: "
        "browser=grpo, measured better on MiniWoB++; every other environment: recipe)",
    )
    p.add_argument(
        "--student",
        choices=STUDENTS,
        default=None,
        help="the student a new store starts from: tiny (hashed n-grams), hf (a local Hugging "
        "Face causal LM, --model-path), minilm (the frozen all-MiniLM-L6-v2 encoder under a "
        "trained head) or lm (SmolLM2-135M-Instruct with LoRA, writing its actions) (default: the store's active student; tiny for a new store)",
    )
    p.add_argument(
        "--model-path",
        metavar="DIR",
        default=None,
        help="--student hf: the local Hugging Face model directory",
    )
    p.add_argument(
        "--teacher",
        choices=TEACHERS,
        default=None,
        help="the teacher backend the gateway asks (none: no teacher) (default: the store's "
        "setting; oracle for a new store)",
    )
    p.add_argument(
        "--agent-cmd",
        default=None,
        metavar="CMD",
        help="train your own agent: the runners start CMD for every episode (training and "
        "held-out), and it plays it over two URLs, the stack's OpenAI-compatible endpoint "
        "(OPENAI_BASE_URL, OPENAI_API_KEY) and the environment API (AIOS_ENV_URL, "
        "AIOS_EPISODE_ID); its completions are recorded token by token and trained on "
        "(docs/agents.md). Needs a student that writes text (--student hf or lm) and starts "
        "its own stack (default: the runner's own loop)",
    )
    p.add_argument(
        "--agent-name",
        default="agent",
        metavar="NAME",
        help="--agent-cmd: the agent's name, whose token (new for each run, in "
        "<store>/auth/agents.json) it is given (default agent)",
    )
    p.add_argument("--seed", type=int, default=0, help="task and campaign seed (default 0)")
    store_arg(p)
    json_arg(p)
    insecure_arg(p)


def branching_spec(args: argparse.Namespace) -> dict[str, object]:
    """The campaign spec's strategy fields from ``--strategy``, ``--initial-rollouts`` and
    ``--branch-temperature`` (raises ``CliError`` for a combination that cannot be planned)."""
    strategy = getattr(args, "strategy", "uniform")
    temperature = getattr(args, "branch_temperature", None)
    settings = BranchingSettings(
        initial=getattr(args, "initial_rollouts", None) or 0,
        regime=None if temperature is None else DecodingRegime(temperature=temperature),
    )
    fields: dict[str, object] = {"rollout_strategy": strategy, "branching": settings}
    probe = CampaignSpec(campaign_id="probe", group_size=args.group_size, **fields)  # type: ignore[arg-type]
    try:
        validate_strategy(probe)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    return fields


def url(args: argparse.Namespace) -> str:
    """``--nats-url``, else the default."""
    return args.nats_url or DEFAULT_URL


def read_state(args: argparse.Namespace, name: str, *, serve: bool = True, create: bool = False):  # type: ignore[no-untyped-def]
    """The state a read command looks at (``stack.embedded.reader``): the server at the URL,
    else the store's (``--store``). ``create``, for a command that writes: a new store too, and
    what it writes created wherever the state is (:func:`provisioned`). Raises ``NoStoreError``
    when there is neither, and with ``create`` what :func:`provisioned` raises."""
    state = reader(
        url(args),
        store=Path(args.store),
        namespace=args.namespace,
        name=name,
        serve=serve,
        create=create,
    )
    return _provisioning(state) if create else state


@asynccontextmanager
async def _provisioning(state):  # type: ignore[no-untyped-def]
    async with state as reading:
        await provisioned(reading.bus, reading.url)
        yield reading


async def provisioned(bus: Bus, where: str) -> None:
    """Create what a command writes, before it writes: the stack's streams, consumers, KV
    buckets and object stores under ``bus.names``, as ``aios-rl auth provision`` makes them (an
    existing one is left as it is or brought to the declared settings). Every command that
    stores tasks or other state calls this, so each works alike on a server (at ``where``) that
    has no aios-rl state yet. Raises ``CliError`` naming what to run when the server refuses:
    only the admin may create them."""
    try:
        await provision(bus)
    except ProvisionError as exc:
        ns = bus.names.namespace
        flags = f"--nats-url {where}" + (f" --namespace {ns}" if ns else "")
        raise CliError(
            f"cannot create the aios-rl streams and buckets at {where}: {exc}; as the admin, run "
            f"`aios-rl auth provision {flags}` first"
        ) from exc


@asynccontextmanager
async def writing(args: argparse.Namespace, name: str) -> AsyncIterator[Bus]:
    """A connection, as ``name``, to the server at ``--nats-url`` (``--namespace``) for a command
    that stores tasks there, with what it writes created (:func:`provisioned`). Raises
    ``ConnectError`` when no server answers, and what :func:`provisioned` raises."""
    async with connect(url(args), name=name, names=Names(args.namespace)) as bus:
        await provisioned(bus, url(args))
        yield bus


def print_json(doc: object) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")


def print_campaign_json(
    campaign_id: str,
    end: str,
    spec: object,
    before: dict[str, object],
    after: dict[str, object],
    records: object,
    seconds: float,
    **extra: object,
) -> None:
    """A training command's ``--json`` document: how its campaign ended, the held-out scores
    before and after (each with its ``checkpoint``), what ``extra`` adds, the epoch records and
    the wall time."""
    print_json(
        {
            "campaign_id": campaign_id,
            "end": end,
            "spec": spec,
            "before": before,
            "after": after,
            **extra,
            "records": records,
            "seconds": round(seconds, 1),
        }
    )


def make_console(args: argparse.Namespace | None = None) -> Console:
    """A console as wide as the terminal (or ``$COLUMNS``), else 120 columns when output is not
    a terminal (logs, pipes): the summary tables stay readable. With ``--json`` it writes to
    stderr (stdout is for the JSON)."""
    stderr = args is not None and bool(getattr(args, "json", False))
    sized = (sys.stderr if stderr else sys.stdout).isatty() or os.environ.get("COLUMNS")
    return Console(stderr=stderr) if sized else Console(stderr=stderr, width=120)


def run_until_interrupt(coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro``; Ctrl-C ends it with exit code 130."""
    try:
        return asyncio.run(coro)
    except KeyboardInterrupt:
        return 130


def eval_args(
    p: argparse.ArgumentParser, *, limit: int, splits: tuple[str, ...] = ("heldout", "train")
) -> None:
    """The arguments of an ``eval`` command: ``--checkpoint``, ``--split``, ``--limit``,
    ``--seed``, ``--json``, the store and the bus."""
    p.add_argument(
        "--checkpoint",
        default="active",
        metavar="ID|POINTER",
        help="checkpoint id, or active / last_stable / pre_update_ref (default active)",
    )
    p.add_argument(
        "--split", choices=splits, default="heldout", help="which tasks (default heldout)"
    )
    p.add_argument("--limit", type=positive, default=limit, help=f"tasks to run (default {limit})")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    json_arg(p)
    store_arg(p)
    insecure_arg(p)
    bus_args(p)
