"""JetStream state behind one room: KV buckets, Object Stores and the stores built on them.

- handles: :class:`Kv` (one bucket: latest / write-on-revision / put / read / scan / purge /
  watch), :class:`Objects` (one Object Store: verified reads, puts), :func:`compare_and_set`
  (the one read-modify-write loop), :func:`translated` (the one place nats errors become ours)
- stores: :mod:`.checkpoints` (registry and lineage), :mod:`.control` (control snapshots),
  :mod:`.ledger` (epoch records), :mod:`.tasks` (every environment's tasks)
- errors: :class:`StateError` and its four kinds, :class:`NotFoundError`,
  :class:`CorruptError`, :class:`UnavailableError`, :class:`ContentionError`; each store's own
  classes derive from its kind

Only this package and the bus kit import ``nats``.
"""

from ._errors import (
    ContentionError,
    CorruptError,
    NotFoundError,
    StaleRevisionError,
    StateError,
    UnavailableError,
)
from ._handles import Cas, EntryDecoder, ErrorKinds, Kv, Objects, compare_and_set, translated
from ._kv import KvEntry, KvWatch, family

__all__ = [
    "Cas",
    "ContentionError",
    "CorruptError",
    "EntryDecoder",
    "ErrorKinds",
    "Kv",
    "KvEntry",
    "KvWatch",
    "NotFoundError",
    "Objects",
    "StaleRevisionError",
    "StateError",
    "UnavailableError",
    "compare_and_set",
    "family",
    "translated",
]
