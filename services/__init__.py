"""aios-rl services: one package per service. No service imports another's code."""
