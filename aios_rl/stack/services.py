"""The registry of services that make up the stack: what ``aios-rl up`` runs and what
``docker-compose.yml`` must declare. A new service adds one line here (and its compose entry)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SERVICES", "ServiceEntry", "by_name"]


@dataclass(frozen=True)
class ServiceEntry:
    """One service of the stack."""

    name: str
    """Service name: the process label, the ``nats.micro`` name and the compose service."""
    module: str
    """Python module run as ``python -m <module>``."""
    description: str
    replicas: int = 1
    """Processes ``aios-rl up`` starts by default (``--scale NAME=N`` overrides)."""
    scalable: bool = True
    """Whether replicas may share its work (durable consumer / queue group)."""
    args: tuple[str, ...] = ()
    """Arguments after the module: the command is ``python -m <module> <args...>``."""


SERVICES: tuple[ServiceEntry, ...] = (
    ServiceEntry(
        "campaign",
        "services.campaign",
        "runs campaigns: collect, compare, decide (promote / hold / roll back), train",
        scalable=False,  # one driver per campaign
    ),
    ServiceEntry(
        "trainer",
        "services.trainer",
        "PPO / GRPO updates of the student through the checkpoint registry",
        scalable=False,  # one writer of updates: a second would only lose the pointer race
    ),
    ServiceEntry(
        "sampler", "services.sampler", "serves the student on policy.act with dynamic batching"
    ),
    # One runner program, deployed once per environment (each scaled on its own).
    ServiceEntry(
        "shell-runner",
        "services.runner",
        "runs shell bug-fix episodes: each action asked of the sampler, commands in the sandbox",
        args=("--env", "shell"),
    ),
    ServiceEntry(
        "browser-runner",
        "services.runner",
        "runs browser episodes in real Chromium: web flows on the sites service, MiniWoB++ tasks",
        args=("--env", "browser"),
    ),
    ServiceEntry(
        "orchestrator-runner",
        "services.runner",
        "runs orchestrator decision episodes (dispatch, preflight, clarity)",
        args=("--env", "orchestrator"),
    ),
    ServiceEntry(
        "teacher-gateway",
        "services.teacher_gateway",
        "picks the episodes a teacher judges, asks the backend named in KV control, passes every episode on as taught",
    ),
    ServiceEntry(
        "teacher-oracle",
        "services.teacher_oracle",
        "teacher from ground truth: hints the true fix of generated shell tasks (the default backend)",
    ),
    ServiceEntry(
        "teacher-noisy-oracle",
        "services.teacher_oracle",
        "fallible teacher: the oracle with each hint and verdict wrong 30 % of the time "
        "(--accuracy), to measure learning against teacher quality",
        args=("--accuracy", "0.7"),
        replicas=0,
    ),
    ServiceEntry(
        "teacher-claude",
        "services.teacher_cli.claude",
        "teacher: the claude CLI, a subprocess per request (needs claude on PATH)",
        replicas=0,
    ),
    ServiceEntry(
        "teacher-codex",
        "services.teacher_cli.codex",
        "teacher: the codex CLI, a subprocess per request (needs codex on PATH)",
        replicas=0,
    ),
    ServiceEntry(
        "teacher-gemini",
        "services.teacher_cli.gemini",
        "teacher: the gemini CLI, a subprocess per request (needs gemini on PATH)",
        replicas=0,
    ),
    ServiceEntry(
        "teacher-opencode",
        "services.teacher_cli.opencode",
        "teacher: the opencode CLI, a subprocess per request (needs opencode on PATH)",
        replicas=0,
    ),
    ServiceEntry(
        "teacher-openai",
        "services.teacher_openai",
        "teacher: any OpenAI-compatible chat-completions server (AIOS_BASE_URL, AIOS_MODEL)",
        replicas=0,
    ),
    ServiceEntry("reward", "services.reward", "fuses environment reward with teacher shaping"),
    ServiceEntry(
        "comparison",
        "services.comparison",
        "compares each episode with the reference policy; epoch verdicts",
    ),
    ServiceEntry(
        "replay",
        "services.replay",
        "routes compared episodes into replay lanes; serves training batches",
        scalable=False,  # its lane index lives in the process
    ),
    ServiceEntry(
        "rail",
        "services.rail",
        "RAIL: decides where and how to branch rollouts, learns from the traces",
        scalable=False,  # a campaign's controller lives in the process
    ),
    ServiceEntry(
        "sites",
        "services.sites",
        "the local web sites browser episodes run against (HTTP); opens and judges their sessions",
        scalable=False,  # a session's state lives in the process its URL reaches
    ),
    ServiceEntry(
        "agent-gateway",
        "services.agent_gateway",
        "OpenAI-compatible chat completions by the student for agents you bring (HTTP, port "
        "8410 or the next free one); tokens from aios-rl auth agent-token",
        replicas=0,
        scalable=False,  # an episode's pinned checkpoint and owner live in the process
    ),
    ServiceEntry(
        "dashboard",
        "services.dashboard",
        "read-only live view of the bus (HTTP, port 8400 or the next free one) and Prometheus "
        "metrics",
        scalable=False,  # each instance serves its own port
    ),
)


def by_name() -> dict[str, ServiceEntry]:
    """Service name -> entry."""
    return {s.name: s for s in SERVICES}
