"""``teacher-oracle``: the privileged, offline teacher that knows generated shell tasks' ground
truth (the injected bug and the edit that fixes it)."""

__version__ = "0.1.0"
