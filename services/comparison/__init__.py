"""``comparison``: measures each rollout against the reference policy on the same task and
aggregates a paired epoch verdict (rules in :mod:`aios_rl.comparison`, shared with the in-process kernel)."""

__version__ = "0.1.0"
