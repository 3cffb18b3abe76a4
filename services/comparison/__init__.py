"""``comparison``: measures each rollout against the reference policy on the same task and
aggregates a paired epoch verdict (rules in :mod:`services.comparison.logic`)."""

__version__ = "0.1.0"
