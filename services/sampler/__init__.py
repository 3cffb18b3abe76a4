"""``sampler``: serves the student at inference: ``policy.act`` with dynamic batching, hot reload
of the ``active`` checkpoint, any named checkpoint from a small cache."""

__version__ = "0.1.0"
