"""Phase 1 code bases: small modules we wrote, each with a ``unittest`` file strong enough that
mutants fail.

A :class:`Family` is a module template and its tests: ``<family>/module.py`` and
``<family>/test_module.py`` in this folder, Python files with ``__tpl_<name>__`` markers where a
variant puts its names and constants (``class __tpl_cls__Error`` becomes ``class StackError``).
The templates are data: they are copied into task files byte for byte, and a task's id is the
hash of those files, so they are kept out of ruff's lint and format (``pyproject.toml``).

A *variant* fills the markers (:mod:`._choose`): names of the module, its class and some
functions, and constants (capacities, defaults, limits). Variant ``v`` of a family is drawn from
a generator seeded by ``(family, v)`` only, so "variant 2 of ``stack``" is the same code whatever
seed a task generation runs with: that is what lets the train and held-out splits be told apart
by (family, operator, variant). :func:`render` gives the files of one variant.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple

from . import _choose

__all__ = ["FAMILIES", "VARIANTS", "Family", "Rendered", "render"]

VARIANTS = 4
"""Variants per family (``0 .. VARIANTS - 1``)."""

MARKER = re.compile(r"__tpl_([a-z0-9_]+?)__")
"""A placeholder in a template; group 1 is its name (lower case, no double underscore)."""

Choose = Callable[[random.Random, int], dict[str, object]]
"""``(rng, variant) -> marker values``; must set ``module`` (the module's name)."""


@dataclass(frozen=True)
class Family:
    """A module template, its tests, and how a variant fills them."""

    name: str
    summary: str
    """What the module does, in a phrase (the task statement uses it)."""
    module: str
    """The module's template (``__tpl_<name>__`` markers)."""
    tests: str
    """The tests' template (``__tpl_<name>__`` markers)."""
    choose: Choose
    """How a variant fills the markers (see :data:`Choose`)."""


class Rendered(NamedTuple):
    """One variant's files."""

    family: str
    variant: int
    module_path: str
    test_path: str
    files: dict[str, str]


def render(family: Family, variant: int) -> Rendered:
    """The files of ``variant`` of ``family`` (deterministic). Raises ``ValueError`` for a
    variant out of range and ``KeyError`` for a marker the family does not fill."""
    if not 0 <= variant < VARIANTS:
        raise ValueError(f"variant {variant} is out of range 0..{VARIANTS - 1}")
    digest = hashlib.sha256(f"{family.name}:{variant}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    values = {k: str(v) for k, v in family.choose(rng, variant).items()}
    module = values["module"]
    module_path, test_path = f"{module}.py", f"test_{module}.py"
    files = {module_path: fill(family.module, values), test_path: fill(family.tests, values)}
    return Rendered(family.name, variant, module_path, test_path, files)


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every marker replaced by its value, in one pass. Raises ``KeyError``
    for a marker ``values`` does not fill."""
    return MARKER.sub(lambda m: values[m[1]], template)


def _family(name: str, summary: str, choose: Choose) -> Family:
    """The family whose templates are in the folder ``name`` of this package."""
    folder = resources.files(__name__) / name
    return Family(
        name,
        summary,
        (folder / "module.py").read_text(encoding="utf-8"),
        (folder / "test_module.py").read_text(encoding="utf-8"),
        choose,
    )


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        _family("stack", "a bounded stack", _choose.stack),
        _family("ring_queue", "a fixed-size circular queue", _choose.ring_queue),
        _family("interval", "interval arithmetic", _choose.interval),
        _family("text_wrap", "word wrapping and truncation", _choose.text_wrap),
        _family("run_length", "run-length encoding", _choose.run_length),
        _family("matrix", "matrix operations", _choose.matrix),
        _family("date_math", "calendar arithmetic", _choose.date_math),
        _family("bank_account", "a bank account", _choose.bank_account),
        _family("inventory", "a stock inventory", _choose.inventory),
        _family("roman", "Roman numeral conversion", _choose.roman),
        _family("binary_search", "binary search utilities", _choose.binary_search),
        _family("tokenizer", "an expression tokenizer", _choose.tokenizer),
        _family("scheduler", "a priority scheduler", _choose.scheduler),
        _family("lru_cache", "an LRU cache", _choose.lru_cache),
        _family("statistics", "descriptive statistics", _choose.statistics),
        _family("word_freq", "word frequency counting", _choose.word_freq),
    )
}
"""Every phase 1 family by name."""
