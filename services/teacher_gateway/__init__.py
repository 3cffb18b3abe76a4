"""``teacher-gateway``: decides which completed episodes get a teacher, asks the backend named in
KV ``control`` for a judgement, and passes every episode on as taught."""

__version__ = "0.1.0"
