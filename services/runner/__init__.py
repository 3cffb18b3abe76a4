"""``runner``: runs episodes of one environment for rollout jobs. One program for every
environment, deployed once per environment (``shell-runner``, ``orchestrator-runner``, ...):
``python -m services.runner --env shell``."""

__version__ = "0.2.0"
