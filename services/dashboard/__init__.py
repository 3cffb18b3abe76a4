"""``dashboard``: a read-only live view of everything on the bus (services, campaigns, the
checkpoint lineage, replay lanes, RAIL, episodes down to each step) and a Prometheus endpoint."""

__version__ = "0.1.0"
