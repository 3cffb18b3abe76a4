"""``rail``: the RAIL controller of every campaign that uses it (decides branches, learns from
traces, promotes and demotes), restart-safe through KV ``control``, the ``rail`` Object Store and
the ``RAIL`` stream."""

__version__ = "0.1.0"
