"""aios-rl: shared packages of the control plane (bus kit, CLI, supervisor, embedded NATS)."""

__version__ = "0.1.0"
