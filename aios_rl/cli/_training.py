"""What the training options ask of the stack: the campaign spec, the flags and replicas of the
services an embedded stack starts, the teacher the gateway follows, the student the store holds.

Pure but for :func:`apply_teacher` and :func:`check_store_student`, which read and write the
store through the state room. ``aios-rl config`` shows the same service flags
(:func:`service_flags`) with the settings they make.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from contracts import CampaignSpec, GatewaySettings, Names, TrainerSettings

from ..agents.tokens import add_agent, check_agent_name
from ..bus import Bus
from ..rollouts.plan import RAIL
from ..stack.auth import AUTH_DIR
from ..stack.services import by_name
from ..state.checkpoints import CheckpointRegistry
from ..state.control import ControlStore
from ._common import CliError, branching_spec, env_recipes

__all__ = [
    "ServiceFlag",
    "agent_runner",
    "agent_service_env",
    "apply_teacher",
    "campaign_spec",
    "check_agent",
    "check_store_student",
    "check_student",
    "embedded_options",
    "option_needs",
    "service_flags",
    "teacher_needs",
]

GATEWAY_CONTROL_ID = "default"
"""The control key the stack's gateway follows (``GatewayServiceSettings.control_id``)."""


@dataclass(frozen=True)
class ServiceFlag:
    """One command-line flag an embedded stack gives a service, and the ``aios-rl`` option it
    comes from."""

    service: str
    flag: str
    value: str
    option: str


def check_student(args: argparse.Namespace) -> None:
    """Raise ``CliError`` for a ``--student`` / ``--model-path`` combination that cannot run:
    ``hf`` without a model directory, a model path for another student, a backend whose module
    is not installed, ``minilm`` without its encoder."""
    student = getattr(args, "student", None)
    model_path = getattr(args, "model_path", None)
    if model_path is not None:
        if student != "hf":
            raise CliError("--model-path is for --student hf")
        if not Path(model_path).is_dir():
            raise CliError(f"--model-path {model_path}: no such directory")
    if student == "hf" and model_path is None:
        raise CliError("--student hf needs --model-path DIR, a local Hugging Face model directory")
    if student is None or student == "tiny":
        return
    module = f"aios_rl.student.{student}"
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:
        found = False
    if not found:
        raise CliError(
            f"--student {student}: its backend ({module}) is not installed in this checkout"
        )
    if student in ("minilm", "lm"):  # from a wheel: say so now, not when a service dies
        from ..student import StudentError
        from ..student.lm import model_source
        from ..student.minilm import encoder_source

        try:
            encoder_source() if student == "minilm" else model_source()
        except StudentError as exc:
            raise CliError(f"--student {student}: {exc}") from exc


LM_STUDENTS = ("hf", "lm")
"""Students that are language models."""
LM_ACT_TIMEOUT_S = 180.0
"""The runners' ``act_timeout_s`` with a language-model student (30 s otherwise)."""


def service_flags(args: argparse.Namespace) -> list[ServiceFlag]:
    """The flags ``--student``, ``--model-path`` and ``--teacher`` give the services of an
    embedded stack: the trainer's backend of the initial checkpoint and its model directory,
    the runners' act timeout for a language-model student, the gateway's default backend."""
    out: list[ServiceFlag] = []
    student = getattr(args, "student", None)
    model_path = getattr(args, "model_path", None)
    teacher = getattr(args, "teacher", None)
    if student is not None:
        out.append(ServiceFlag("trainer", "--backend", student, "--student"))
    if student in LM_STUDENTS:
        # A language model scores candidates in process (a pass over a long observation on a
        # CPU core takes seconds, more while others run): give the runners' requests time.
        out += [
            ServiceFlag(name, "--act-timeout-s", f"{LM_ACT_TIMEOUT_S:g}", "--student")
            for name in sorted(by_name())
            if name.endswith("-runner")
        ]
    if model_path is not None:
        resolved = str(Path(model_path).resolve())
        out.append(ServiceFlag("trainer", "--model-path", resolved, "--model-path"))
    if teacher is not None:
        out.append(ServiceFlag("teacher-gateway", "--default-backend", teacher, "--teacher"))
    if runner := agent_runner(args):
        out += [
            ServiceFlag(runner, "--agent-cmd", args.agent_cmd, "--agent-cmd"),
            ServiceFlag(runner, "--agent-name", args.agent_name, "--agent-name"),
        ]
    return out


def agent_runner(args: argparse.Namespace) -> str:
    """The runner that starts ``--agent-cmd`` (the environment's); empty without the option."""
    if not getattr(args, "agent_cmd", None):
        return ""
    return f"{getattr(args, 'environment', 'shell')}-runner"


def agent_service_env(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """``--agent-cmd``: a new token for ``--agent-name`` (its digest written to the store's
    ``auth/agents.json``, replacing the last one), as the environment of the runner that starts
    the agent; empty without the option. Raises ``CliError`` when the file cannot be written."""
    runner = agent_runner(args)
    if not runner:
        return {}
    try:
        token = add_agent(Path(args.store) / AUTH_DIR, args.agent_name)
    except (OSError, ValueError) as exc:
        raise CliError(f"--agent-cmd: cannot write the agent's token: {exc}") from exc
    return {runner: {"AIOS_AGENT_TOKEN": token}}


def check_agent(args: argparse.Namespace, environments: list[str]) -> None:
    """Raise ``CliError`` for ``--agent-cmd`` where it cannot run: a mixed campaign (one agent
    for one environment), a student that does not write text, a RAIL strategy (its context
    reads the student's hidden state at each step, which an agent's completions do not carry),
    a name a token cannot have."""
    if not getattr(args, "agent_cmd", None):
        return
    if len(environments) != 1:
        raise CliError("--agent-cmd trains an agent on one environment, not a mixed campaign")
    student = getattr(args, "student", None)
    if student is not None and student not in LM_STUDENTS:
        raise CliError(
            f"--agent-cmd needs a student that writes text (--student hf or lm), not {student}: "
            "the agent asks it for chat completions"
        )
    strategy = getattr(args, "strategy", "uniform")
    if strategy in RAIL:
        raise CliError(
            f"--agent-cmd with --strategy {strategy}: RAIL reads the student's hidden state at "
            "each step, which an agent's completions do not carry (docs/agents.md); use "
            "uniform, entropy, heuristic or dapo-filter"
        )
    name = getattr(args, "agent_name", "agent")
    try:
        check_agent_name(name)
    except ValueError:
        raise CliError(f"--agent-name {name!r}: use up to 64 letters, digits, '-' or '_'") from None


def teacher_needs(args: argparse.Namespace) -> set[str]:
    """The teacher service ``--teacher`` needs running: none for ``none``, no option, or a
    backend the stack does not run itself (``ts``, deployed on its own: examples/teacher-ts)."""
    teacher = getattr(args, "teacher", None)
    if teacher in (None, "none") or f"teacher-{teacher}" not in by_name():
        return set()
    return {f"teacher-{teacher}"}


def option_needs(args: argparse.Namespace) -> set[str]:
    """The services the training options add to a command's stack: the teacher's
    (:func:`teacher_needs`) and, with ``--agent-cmd``, the agent gateway."""
    return teacher_needs(args) | ({"agent-gateway"} if agent_runner(args) else set())


CLI_TEACHERS = ("claude", "codex", "gemini", "opencode")
"""Teachers that run a coding-agent CLI: its program must be on PATH where the stack runs."""


def check_teacher(
    args: argparse.Namespace, which: Callable[[str], str | None] = shutil.which
) -> None:
    """Raise ``CliError`` before any stack starts when ``--teacher`` names a CLI teacher whose
    program is not on PATH (``AIOS_EXECUTABLE`` overrides the program's name, as for the
    service): otherwise the teacher service exits at start and the command waits for it."""
    teacher = getattr(args, "teacher", None)
    if teacher not in CLI_TEACHERS:
        return
    program = os.environ.get("AIOS_EXECUTABLE") or teacher
    if which(program) is None:
        raise CliError(
            f"--teacher {teacher}: {program!r} is not an executable on PATH; install the "
            f"{teacher} CLI (or set AIOS_EXECUTABLE), or pick another teacher (oracle, openai)"
        )


def embedded_options(args: argparse.Namespace) -> dict[str, object]:
    """``stack()``'s ``service_args`` and ``scale`` for these options: the service flags, and one
    replica of a teacher the registry does not start by default."""
    args_of: dict[str, list[str]] = {}
    for f in service_flags(args):
        args_of.setdefault(f.service, []).extend([f.flag, f.value])
    registry = by_name()
    scale = {name: 1 for name in option_needs(args) if registry[name].replicas < 1}
    return {"service_args": args_of, "scale": scale}


IMPORTED = frozenset({"agentbench_db", "agentbench_os"})
"""Environments whose tasks are only imported (AgentBench's): any split name, never generated."""


def campaign_spec(
    args: argparse.Namespace,
    campaign_id: str,
    environments: Mapping[str, float],
    *,
    episode_deadline_s: float = 300,
) -> CampaignSpec:
    """The campaign the training options describe. Raises ``CliError`` for a strategy that
    cannot be planned or a split an environment does not have."""
    split = getattr(args, "split", "train")
    if split != "train" and set(environments) != {"shell"} and not set(environments) <= IMPORTED:
        raise CliError(f"--split {split} is for shell tasks only")
    return CampaignSpec(
        campaign_id=campaign_id,
        environments=dict(environments),
        tasks_per_epoch=args.tasks_per_epoch,
        group_size=args.group_size,
        epochs=args.epochs,
        episode_deadline_s=episode_deadline_s,
        seed=args.seed,
        split=split,
        trainer=TrainerSettings(
            algorithm=args.algorithm,
            learning_rate=args.learning_rate,
            update_epochs=4,
            distill_coef=getattr(args, "distill", 0.0),
            self_imitation=getattr(args, "self_imitation", False),
            warm_optimizer=getattr(args, "warm_optimizer", False),
            env_normalize=getattr(args, "env_normalize", False),
            progress_coef=getattr(args, "progress_coef", 0.0),
            by_environment=env_recipes(getattr(args, "env_recipe", None)),
            seed=args.seed,
        ),
        **branching_spec(args),  # type: ignore[arg-type]
    )


async def apply_teacher(bus: Bus, teacher: str | None) -> None:
    """Make ``teacher`` the backend the stack's gateway asks, from the next episode on (its
    control key, which it follows live); nothing for ``None``."""
    if teacher is None:
        return
    await ControlStore(bus).update(
        Names.key_control("gateway", GATEWAY_CONTROL_ID),
        lambda s: msgspec.structs.replace(s, backend=teacher),  # type: ignore[type-var]
        init=GatewaySettings,
    )


async def current_teacher(bus: Bus) -> str:
    """The backend the stack's gateway asks now (its control key; the gateway's default when
    the key is not written yet)."""
    snap, _ = await ControlStore(bus).load(Names.key_control("gateway", GATEWAY_CONTROL_ID))
    if snap is not None and isinstance(snap.state, GatewaySettings):
        return snap.state.backend
    return GatewaySettings().backend


async def check_text_student(bus: Bus, checkpoint_id: str, *, why: str = "") -> None:
    """Raise ``CliError`` unless ``checkpoint_id``'s student writes text (the AgentBench
    environments offer no actions to choose among; ``why``: another reason, an option that
    needs it, such as ``--agent-cmd``)."""
    from ..student import TEXT_BACKENDS

    backend = (await CheckpointRegistry(bus).meta(checkpoint_id)).backend
    if backend not in TEXT_BACKENDS:
        reason = (
            f"{why} asks it for chat completions"
            if why
            else "AgentBench episodes offer no actions to choose among"
        )
        raise CliError(
            f"checkpoint {checkpoint_id[:12]} is a {backend} student, which chooses among "
            f"offered actions; {reason}: use a store whose student writes text (a new store "
            "with --student lm, or --student hf --model-path DIR)"
        )


async def check_store_student(bus: Bus, checkpoint_id: str, student: str | None) -> None:
    """Raise ``CliError`` when ``--student`` asks for another backend than the store's active
    checkpoint has: the trainer starts a new student only in a store without one."""
    if student is None:
        return
    meta = await CheckpointRegistry(bus).meta(checkpoint_id)
    if meta.backend != student:
        raise CliError(
            f"--student {student}, but the store's active checkpoint {checkpoint_id[:12]} is a "
            f"{meta.backend} student: train it without --student, or give another --store"
        )
