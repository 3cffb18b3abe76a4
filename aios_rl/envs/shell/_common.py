"""What phase 1 (:mod:`.generate`) and phase 2 (:mod:`.realcode`) task generation share: their
error, their progress callback and the order they deal candidates in. Both import it, so neither
imports the other for it; :mod:`.generate` re-exports every name, its public home."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from aios_rl.errors import AiosError

__all__ = ["GenerationError", "Progress", "deal"]

T = TypeVar("T")

Progress = Callable[[str], None]
"""Called with a line of progress text as generation goes."""


class GenerationError(AiosError, RuntimeError):
    """Not enough candidates passed verification, or an original module fails its own tests."""


def deal(groups: Sequence[Sequence[T]]) -> Iterator[T]:
    """One from each group per round, until every group is exhausted."""
    for round_ in range(max((len(g) for g in groups), default=0)):
        for group in groups:
            if round_ < len(group):
                yield group[round_]
