"""``orchestrator-runner``: runs orchestrator decision episodes for rollout jobs."""

__version__ = "0.1.0"
