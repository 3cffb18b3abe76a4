"""``campaign``: runs campaigns epoch by epoch: collect, compare, decide, train."""

__version__ = "0.1.0"
