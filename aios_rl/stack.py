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
    ServiceEntry(
        "orchestrator-runner",
        "services.orchestrator_runner",
        "runs orchestrator decision episodes (dispatch, preflight, clarity)",
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
)


def by_name() -> dict[str, ServiceEntry]:
    """Service name -> entry."""
    return {s.name: s for s in SERVICES}
