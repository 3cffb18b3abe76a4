"""``trainer``: one PPO / GRPO update per ``trainer.cmd.update``, written through the registry."""

__version__ = "0.1.0"
