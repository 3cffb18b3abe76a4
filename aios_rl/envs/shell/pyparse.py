"""``ast.parse`` behind one lock per process.

CPython 3.11's C-to-Python AST conversion is not safe when several threads parse at once: the
shell environment builds episodes and generates tasks in worker threads (``asyncio.to_thread``),
and two concurrent parses once failed with ``SystemError: AST constructor recursion depth
mismatch`` (seen in ``bench/phase_de.py``). Parsing a task's few small files is cheap, so
serialising it costs nothing measurable."""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time. Raises what ``ast.parse`` raises."""
    with _LOCK:
        return ast.parse(source)
