"""``reward``: fuses each episode's environment reward with teacher shaping."""

__version__ = "0.1.0"
