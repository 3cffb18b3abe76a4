"""``replay``: routes compared episodes into replay lanes and serves seeded batches from them."""

__version__ = "0.1.0"
