"""``shell-runner``: runs shell bug-fix episodes in the sandbox for rollout jobs."""

__version__ = "0.1.0"
