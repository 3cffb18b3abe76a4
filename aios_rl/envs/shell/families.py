"""Phase 1 code bases: small modules we wrote, each with a ``unittest`` file strong enough that
mutants fail.

A :class:`Family` is a module template and its tests (``string.Template``: ``$name``
placeholders). A *variant* fills the placeholders: names of the module, its class and some
functions, and constants (capacities, defaults, limits). Variant ``v`` of a family is drawn from
a generator seeded by ``(family, v)`` only, so "variant 2 of ``stack``" is the same code whatever
seed a task generation runs with: that is what lets the train and held-out splits be told apart
by (family, operator, variant). :func:`render` gives the files of one variant.
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["FAMILIES", "VARIANTS", "Family", "Rendered", "render"]

VARIANTS = 4
"""Variants per family (``0 .. VARIANTS - 1``)."""


@dataclass(frozen=True)
class Family:
    """A module template, its tests, and how a variant fills them."""

    name: str
    summary: str
    """What the module does, in a phrase (the task statement uses it)."""
    module: str
    tests: str
    choose: Callable[[random.Random, int], dict[str, object]]
    """``(rng, variant) -> placeholder values``; must set ``module`` (the module's name)."""


class Rendered(NamedTuple):
    """One variant's files."""

    family: str
    variant: int
    module_path: str
    test_path: str
    files: dict[str, str]


def render(family: Family, variant: int) -> Rendered:
    """The files of ``variant`` of ``family`` (deterministic). Raises ``ValueError`` for a
    variant out of range and ``KeyError`` for a placeholder the family does not fill."""
    if not 0 <= variant < VARIANTS:
        raise ValueError(f"variant {variant} is out of range 0..{VARIANTS - 1}")
    digest = hashlib.sha256(f"{family.name}:{variant}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    values = {k: str(v) for k, v in family.choose(rng, variant).items()}
    module = values["module"]
    module_path, test_path = f"{module}.py", f"test_{module}.py"
    files = {
        module_path: string.Template(family.module).substitute(values),
        test_path: string.Template(family.tests).substitute(values),
    }
    return Rendered(family.name, variant, module_path, test_path, files)


def _pick(pool: list[str], variant: int) -> str:
    return pool[variant % len(pool)]


# -- stack --------------------------------------------------------------------------------------------

_STACK = '''"""A bounded $cls: last in, first out."""


class ${cls}Error(Exception):
    """Raised on overflow, underflow or a bad argument."""


class $cls:
    def __init__(self, capacity=$cap):
        if capacity < 1:
            raise ${cls}Error("capacity must be positive")
        self.capacity = capacity
        self._items = []

    def __len__(self):
        return len(self._items)

    def is_empty(self):
        return len(self._items) == 0

    def is_full(self):
        return len(self._items) >= self.capacity

    def free(self):
        return self.capacity - len(self._items)

    def $push(self, item):
        if self.is_full():
            raise ${cls}Error("overflow")
        self._items.append(item)
        return len(self._items)

    def $pop(self):
        if self.is_empty():
            raise ${cls}Error("underflow")
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise ${cls}Error("empty")
        return self._items[-1]

    def $pop_many(self, count):
        if count < 0 or count > len(self._items):
            raise ${cls}Error("bad count")
        cut = len(self._items) - count
        taken = self._items[cut:]
        del self._items[cut:]
        return taken[::-1]

    def top(self, n=$topn):
        """The n most recent items, most recent first."""
        if n <= 0:
            return []
        return list(reversed(self._items[-n:]))
'''

_STACK_TESTS = """import unittest

from $module import $cls, ${cls}Error


class ${cls}Test(unittest.TestCase):
    def test_new_stack_is_empty(self):
        s = $cls()
        self.assertTrue(s.is_empty())
        self.assertFalse(s.is_full())
        self.assertEqual(len(s), 0)
        self.assertEqual(s.capacity, $cap)
        self.assertEqual(s.free(), $cap)

    def test_capacity_must_be_positive(self):
        with self.assertRaises(${cls}Error):
            $cls(0)
        self.assertEqual($cls(1).capacity, 1)

    def test_push_returns_size(self):
        s = $cls(5)
        self.assertEqual(s.$push("a"), 1)
        self.assertEqual(s.$push("b"), 2)
        self.assertFalse(s.is_empty())
        self.assertEqual(s.free(), 3)

    def test_last_in_first_out(self):
        s = $cls(5)
        for item in (1, 2, 3):
            s.$push(item)
        self.assertEqual([s.$pop(), s.$pop(), s.$pop()], [3, 2, 1])
        self.assertTrue(s.is_empty())

    def test_overflow(self):
        s = $cls(3)
        for item in range(3):
            s.$push(item)
        self.assertTrue(s.is_full())
        self.assertEqual(s.free(), 0)
        with self.assertRaises(${cls}Error):
            s.$push(99)
        self.assertEqual(len(s), 3)
        s.$pop()
        self.assertFalse(s.is_full())

    def test_underflow(self):
        s = $cls()
        with self.assertRaises(${cls}Error):
            s.$pop()
        with self.assertRaises(${cls}Error):
            s.peek()

    def test_peek_does_not_remove(self):
        s = $cls()
        s.$push("x")
        s.$push("y")
        self.assertEqual(s.peek(), "y")
        self.assertEqual(len(s), 2)

    def test_pop_many(self):
        s = $cls(8)
        for item in range(1, 6):
            s.$push(item)
        self.assertEqual(s.$pop_many(2), [5, 4])
        self.assertEqual(len(s), 3)
        self.assertEqual(s.$pop_many(0), [])
        self.assertEqual(len(s), 3)
        self.assertEqual(s.$pop_many(3), [3, 2, 1])
        self.assertTrue(s.is_empty())

    def test_pop_many_bad_counts(self):
        s = $cls(4)
        s.$push(1)
        with self.assertRaises(${cls}Error):
            s.$pop_many(2)
        with self.assertRaises(${cls}Error):
            s.$pop_many(-1)
        self.assertEqual(s.$pop_many(1), [1])

    def test_top(self):
        s = $cls(8)
        for item in range(1, 6):
            s.$push(item)
        self.assertEqual(s.top(2), [5, 4])
        self.assertEqual(s.top(1), [5])
        self.assertEqual(s.top(), [5, 4, 3, 2, 1][:$topn])
        self.assertEqual(s.top(0), [])
        self.assertEqual(s.top(-1), [])
        self.assertEqual(len(s), 5)


if __name__ == "__main__":
    unittest.main()
"""


def _stack(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["stack", "lifo", "pile", "plate_stack"], v),
        "cls": _pick(["Stack", "LifoStack", "Pile", "PlateStack"], v),
        "push": _pick(["push", "push", "put", "add"], v),
        "pop": _pick(["pop", "pop", "take", "remove_top"], v),
        "pop_many": _pick(["pop_many", "pop_n", "take_many", "drop_many"], v),
        "cap": rng.randint(6, 12),
        "topn": rng.choice([2, 3, 4]),
    }


# -- ring queue ---------------------------------------------------------------------------------------

_QUEUE = '''"""A fixed-size circular $cls: first in, first out."""


class QueueFull(Exception):
    """Raised when putting into a full queue."""


class QueueEmpty(Exception):
    """Raised when taking from an empty queue."""


class $cls:
    def __init__(self, size=$size):
        if size <= 0:
            raise ValueError("size must be positive")
        self._slots = [None] * size
        self._head = 0
        self._count = 0

    @property
    def size(self):
        return len(self._slots)

    def __len__(self):
        return self._count

    def is_full(self):
        return self._count == len(self._slots)

    def $put(self, item):
        if self.is_full():
            raise QueueFull(item)
        tail = (self._head + self._count) % len(self._slots)
        self._slots[tail] = item
        self._count += 1

    def $get(self):
        if self._count == 0:
            raise QueueEmpty()
        item = self._slots[self._head]
        self._slots[self._head] = None
        self._head = (self._head + 1) % len(self._slots)
        self._count -= 1
        return item

    def peek(self):
        if not self._count:
            raise QueueEmpty()
        return self._slots[self._head]

    def to_list(self):
        return [self._slots[(self._head + i) % len(self._slots)] for i in range(self._count)]

    def drain(self, limit=None):
        out = []
        while self._count > 0 and (limit is None or len(out) < limit):
            out.append(self.$get())
        return out

    def rotate(self, steps=$steps):
        """Move the first ``steps`` items to the back."""
        for _ in range(steps % max(self._count, 1)):
            self.$put(self.$get())
'''

_QUEUE_TESTS = """import unittest

from $module import QueueEmpty, QueueFull, $cls


class ${cls}Test(unittest.TestCase):
    def test_defaults(self):
        q = $cls()
        self.assertEqual(q.size, $size)
        self.assertEqual(len(q), 0)
        self.assertFalse(q.is_full())

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            $cls(0)
        self.assertEqual($cls(1).size, 1)

    def test_first_in_first_out(self):
        q = $cls(4)
        for item in "abc":
            q.$put(item)
        self.assertEqual(len(q), 3)
        self.assertEqual(q.peek(), "a")
        self.assertEqual([q.$get(), q.$get(), q.$get()], ["a", "b", "c"])
        self.assertEqual(len(q), 0)

    def test_full(self):
        q = $cls(2)
        q.$put(1)
        self.assertFalse(q.is_full())
        q.$put(2)
        self.assertTrue(q.is_full())
        with self.assertRaises(QueueFull):
            q.$put(3)
        self.assertEqual(q.to_list(), [1, 2])

    def test_empty(self):
        q = $cls(2)
        with self.assertRaises(QueueEmpty):
            q.$get()
        with self.assertRaises(QueueEmpty):
            q.peek()

    def test_wraps_around(self):
        q = $cls(3)
        for item in (1, 2, 3):
            q.$put(item)
        self.assertEqual(q.$get(), 1)
        self.assertEqual(q.$get(), 2)
        q.$put(4)
        q.$put(5)
        self.assertTrue(q.is_full())
        self.assertEqual(q.to_list(), [3, 4, 5])
        self.assertEqual(q.peek(), 3)
        self.assertEqual([q.$get(), q.$get(), q.$get()], [3, 4, 5])

    def test_drain(self):
        q = $cls(5)
        for item in range(5):
            q.$put(item)
        self.assertEqual(q.drain(2), [0, 1])
        self.assertEqual(q.drain(0), [])
        self.assertEqual(q.drain(), [2, 3, 4])
        self.assertEqual(q.drain(), [])

    def test_rotate(self):
        q = $cls(4)
        for item in "wxyz":
            q.$put(item)
        q.rotate(1)
        self.assertEqual(q.to_list(), list("xyzw"))
        q.rotate(6)
        self.assertEqual(q.to_list(), list("zwxy"))
        q.rotate()
        self.assertEqual(q.to_list(), (list("zwxy") * 2)[$steps % 4:$steps % 4 + 4])

    def test_rotate_empty(self):
        q = $cls(2)
        q.rotate(3)
        self.assertEqual(q.to_list(), [])


if __name__ == "__main__":
    unittest.main()
"""


def _queue(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["ring_queue", "fifo", "circular", "ringbuffer"], v),
        "cls": _pick(["RingQueue", "Fifo", "CircularQueue", "RingBuffer"], v),
        "put": _pick(["put", "enqueue", "push", "append"], v),
        "get": _pick(["get", "dequeue", "shift", "popleft"], v),
        "size": rng.randint(5, 16),
        "steps": rng.choice([1, 2, 3]),
    }


# -- interval arithmetic ---------------------------------------------------------------------------------

_INTERVAL = '''"""Closed intervals [lo, hi] of numbers and their arithmetic."""


class $cls:
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        if lo > hi:
            raise ValueError("empty interval")
        self.lo = lo
        self.hi = hi

    def __eq__(self, other):
        return isinstance(other, $cls) and (self.lo, self.hi) == (other.lo, other.hi)

    def __repr__(self):
        return "$cls(%r, %r)" % (self.lo, self.hi)

    def length(self):
        return self.hi - self.lo

    def contains(self, x):
        return self.lo <= x <= self.hi

    def overlaps(self, other):
        return self.lo <= other.hi and other.lo <= self.hi

    def intersection(self, other):
        if not self.overlaps(other):
            return None
        return $cls(max(self.lo, other.lo), min(self.hi, other.hi))

    def hull(self, other):
        return $cls(min(self.lo, other.lo), max(self.hi, other.hi))

    def __add__(self, other):
        return $cls(self.lo + other.lo, self.hi + other.hi)

    def __sub__(self, other):
        return $cls(self.lo - other.hi, self.hi - other.lo)

    def __mul__(self, other):
        products = [self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi]
        return $cls(min(products), max(products))

    def widen(self, margin=$margin):
        return $cls(self.lo - margin, self.hi + margin)


def $merge(intervals, gap=0):
    """Merge intervals at most ``gap`` apart; the result is sorted by ``lo``."""
    result = []
    for iv in sorted(intervals, key=lambda i: (i.lo, i.hi)):
        if result and iv.lo - result[-1].hi <= gap:
            last = result[-1]
            result[-1] = $cls(last.lo, max(last.hi, iv.hi))
        else:
            result.append(iv)
    return result


def total_length(intervals):
    return sum(iv.length() for iv in $merge(intervals))
'''

_INTERVAL_TESTS = """import unittest

from $module import $cls as I, $merge, total_length


class ${cls}Test(unittest.TestCase):
    def test_construct(self):
        self.assertEqual(I(1, 3).lo, 1)
        self.assertEqual(I(1, 3).hi, 3)
        self.assertEqual(I(2, 2).length(), 0)
        with self.assertRaises(ValueError):
            I(3, 1)

    def test_equality_and_repr(self):
        self.assertEqual(I(1, 2), I(1, 2))
        self.assertNotEqual(I(1, 2), I(1, 3))
        self.assertNotEqual(I(1, 2), I(0, 2))
        self.assertNotEqual(I(1, 2), (1, 2))
        self.assertEqual(repr(I(1, 2)), "$cls(1, 2)")

    def test_length_and_contains(self):
        self.assertEqual(I(-2, 5).length(), 7)
        self.assertTrue(I(0, 10).contains(0))
        self.assertTrue(I(0, 10).contains(10))
        self.assertTrue(I(0, 10).contains(4))
        self.assertFalse(I(0, 10).contains(11))
        self.assertFalse(I(0, 10).contains(-1))

    def test_overlaps(self):
        self.assertTrue(I(0, 5).overlaps(I(5, 8)))
        self.assertTrue(I(5, 8).overlaps(I(0, 5)))
        self.assertTrue(I(0, 10).overlaps(I(2, 3)))
        self.assertFalse(I(0, 4).overlaps(I(5, 8)))
        self.assertFalse(I(6, 8).overlaps(I(0, 5)))

    def test_intersection(self):
        self.assertEqual(I(0, 5).intersection(I(3, 9)), I(3, 5))
        self.assertEqual(I(3, 9).intersection(I(0, 5)), I(3, 5))
        self.assertEqual(I(0, 5).intersection(I(5, 9)), I(5, 5))
        self.assertIsNone(I(0, 1).intersection(I(2, 3)))

    def test_hull(self):
        self.assertEqual(I(0, 1).hull(I(4, 6)), I(0, 6))
        self.assertEqual(I(4, 6).hull(I(0, 1)), I(0, 6))

    def test_arithmetic(self):
        self.assertEqual(I(1, 2) + I(10, 20), I(11, 22))
        self.assertEqual(I(1, 2) - I(10, 20), I(-19, -8))
        self.assertEqual(I(1, 2) * I(3, 4), I(3, 8))
        self.assertEqual(I(-1, 2) * I(3, 4), I(-4, 8))
        self.assertEqual(I(-3, -2) * I(-5, 4), I(-12, 15))

    def test_widen(self):
        self.assertEqual(I(0, 1).widen(2), I(-2, 3))
        self.assertEqual(I(10, 20).widen(), I(10 - $margin, 20 + $margin))

    def test_merge(self):
        merged = $merge([I(5, 7), I(1, 3), I(2, 4), I(8, 9)])
        self.assertEqual(merged, [I(1, 4), I(5, 7), I(8, 9)])
        self.assertEqual($merge([I(1, 3), I(3, 5)]), [I(1, 5)])
        self.assertEqual($merge([I(1, 10), I(2, 3)]), [I(1, 10)])
        self.assertEqual($merge([]), [])

    def test_merge_with_gap(self):
        self.assertEqual($merge([I(1, 2), I(4, 5)], gap=2), [I(1, 5)])
        self.assertEqual($merge([I(1, 2), I(4, 5)], gap=1), [I(1, 2), I(4, 5)])

    def test_total_length(self):
        self.assertEqual(total_length([I(0, 2), I(1, 4), I(10, 11)]), 5)
        self.assertEqual(total_length([]), 0)


if __name__ == "__main__":
    unittest.main()
"""


def _interval(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["interval", "ranges", "span_math", "intervals"], v),
        "cls": _pick(["Interval", "Range", "Span", "Segment"], v),
        "merge": _pick(["merge", "merge_all", "coalesce", "union_all"], v),
        "margin": rng.randint(1, 5),
    }


# -- text wrapping ---------------------------------------------------------------------------------------

_WRAP = '''"""Greedy word wrapping and friends for plain text."""

DEFAULT_WIDTH = $width


def words(text):
    return text.split()


def $wrap(text, width=DEFAULT_WIDTH):
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in words(text):
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width=DEFAULT_WIDTH):
    return "\\n".join($wrap(text, width))


def justify(line, width):
    parts = line.split()
    if len(parts) < 2:
        return line.ljust(width)
    gaps = len(parts) - 1
    spaces = width - sum(len(p) for p in parts)
    base, extra = divmod(spaces, gaps)
    out = ""
    for i, part in enumerate(parts[:-1]):
        out += part + " " * (base + (1 if i < extra else 0))
    return out + parts[-1]


def $truncate(text, limit, suffix="$suffix"):
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(suffix))] + suffix


def indent(text, prefix="$prefix"):
    return "\\n".join(prefix + line if line.strip() else line for line in text.split("\\n"))
'''

_WRAP_TESTS = """import unittest

from $module import DEFAULT_WIDTH, fill, indent, justify, $truncate, $wrap


class WrapTest(unittest.TestCase):
    def test_short_text_is_one_line(self):
        self.assertEqual($wrap("hello world", 20), ["hello world"])
        self.assertEqual($wrap("", 10), [])
        self.assertEqual($wrap("   ", 10), [])

    def test_breaks_between_words(self):
        self.assertEqual($wrap("aa bb cc dd", 5), ["aa bb", "cc dd"])
        self.assertEqual($wrap("aa bb cc dd", 4), ["aa", "bb", "cc", "dd"])
        self.assertEqual($wrap("one two three", 7), ["one two", "three"])

    def test_exact_width_fits(self):
        self.assertEqual($wrap("abc de", 6), ["abc de"])
        self.assertEqual($wrap("abc def", 6), ["abc", "def"])

    def test_long_words_are_split(self):
        self.assertEqual($wrap("abcdefgh", 3), ["abc", "def", "gh"])
        self.assertEqual($wrap("x abcdef y", 3), ["x", "abc", "def", "y"])
        self.assertEqual($wrap("abcdef", 3), ["abc", "def"])

    def test_bad_width(self):
        with self.assertRaises(ValueError):
            $wrap("text", 0)
        self.assertEqual($wrap("ab", 1), ["a", "b"])

    def test_default_width(self):
        self.assertEqual(DEFAULT_WIDTH, $width)
        text = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do"
        self.assertEqual($wrap(text), $wrap(text, $width))
        self.assertTrue(all(len(line) <= $width for line in $wrap(text)))
        self.assertEqual(" ".join($wrap(text)), text)
        self.assertEqual(fill(text), "\\n".join($wrap(text, $width)))

    def test_fill(self):
        self.assertEqual(fill("aa bb cc", 5), "aa bb\\ncc")

    def test_justify(self):
        self.assertEqual(justify("a b c", 7), "a  b  c")
        self.assertEqual(justify("a b c", 8), "a   b  c")
        self.assertEqual(justify("ab cd", 6), "ab  cd")
        self.assertEqual(justify("word", 6), "word  ")

    def test_truncate(self):
        self.assertEqual($truncate("short", 10), "short")
        self.assertEqual($truncate("exactly", 7), "exactly")
        self.assertEqual($truncate("abcdefghij", 6, suffix="~"), "abcde~")
        self.assertEqual($truncate("abcdefghij", 8), "abcdefghij"[: 8 - len("$suffix")] + "$suffix")
        self.assertEqual(len($truncate("abcdefghijkl", 9)), 9)

    def test_indent(self):
        self.assertEqual(indent("a\\n\\nb", "> "), "> a\\n\\n> b")
        self.assertEqual(indent("x"), "$prefix" + "x")


if __name__ == "__main__":
    unittest.main()
"""


def _wrap(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["wrapping", "textfill", "linebreak", "paragraphs"], v),
        "wrap": _pick(["wrap", "wrap_text", "break_lines", "wrap_words"], v),
        "truncate": _pick(["truncate", "shorten", "clip", "ellipsize"], v),
        "width": rng.choice([12, 16, 20, 24, 30]),
        "suffix": _pick(["...", "~", "..", "+"], v),
        "prefix": rng.choice(["  ", "    ", "> ", "| "]),
    }


# -- run-length encoding ------------------------------------------------------------------------------------

_RLE = '''"""Run-length encoding of text without digits: "aaab" <-> "3a1b"."""

MAX_RUN = $maxrun


def $encode(text):
    if not text:
        return ""
    out = []
    run_char = text[0]
    run_len = 1
    for ch in text[1:]:
        if ch == run_char and run_len < MAX_RUN:
            run_len += 1
        else:
            out.append(str(run_len) + run_char)
            run_char = ch
            run_len = 1
    out.append(str(run_len) + run_char)
    return "".join(out)


def $decode(data):
    out = []
    count = 0
    seen_digit = False
    for ch in data:
        if ch.isdigit():
            count = count * 10 + int(ch)
            seen_digit = True
        else:
            if not seen_digit:
                raise ValueError("missing count")
            out.append(ch * count)
            count = 0
            seen_digit = False
    if seen_digit:
        raise ValueError("dangling count")
    return "".join(out)


def runs(text):
    """[(char, length), ...] with no length limit."""
    result = []
    for ch in text:
        if result and result[-1][0] == ch:
            result[-1] = (ch, result[-1][1] + 1)
        else:
            result.append((ch, 1))
    return result


def longest_run(text):
    best = ("", 0)
    for ch, n in runs(text):
        if n > best[1]:
            best = (ch, n)
    return best


def ratio(text):
    if not text:
        return 1.0
    return len($encode(text)) / len(text)
'''

_RLE_TESTS = """import unittest

from $module import MAX_RUN, $decode, $encode, longest_run, ratio, runs


class RunLengthTest(unittest.TestCase):
    def test_encode(self):
        self.assertEqual($encode("aaab"), "3a1b")
        self.assertEqual($encode("abc"), "1a1b1c")
        self.assertEqual($encode("a"), "1a")
        self.assertEqual($encode(""), "")
        self.assertEqual($encode("aabbbaa"), "2a3b2a")

    def test_encode_splits_long_runs(self):
        self.assertEqual(MAX_RUN, $maxrun)
        self.assertEqual($encode("z" * MAX_RUN), str(MAX_RUN) + "z")
        self.assertEqual($encode("z" * (MAX_RUN + 2)), str(MAX_RUN) + "z2z")

    def test_decode(self):
        self.assertEqual($decode("3a1b"), "aaab")
        self.assertEqual($decode("12x"), "x" * 12)
        self.assertEqual($decode(""), "")
        self.assertEqual($decode("0a2b"), "bb")

    def test_decode_errors(self):
        with self.assertRaises(ValueError):
            $decode("a")
        with self.assertRaises(ValueError):
            $decode("2a3")
        with self.assertRaises(ValueError):
            $decode("2ab")

    def test_round_trip(self):
        for text in ["", "a", "hello", "aaaaabbbbbcccccd", "zz" * 30, "x" * (3 * MAX_RUN + 1)]:
            self.assertEqual($decode($encode(text)), text)

    def test_runs(self):
        self.assertEqual(runs("aabccc"), [("a", 2), ("b", 1), ("c", 3)])
        self.assertEqual(runs(""), [])
        self.assertEqual(runs("x" * 40), [("x", 40)])

    def test_longest_run(self):
        self.assertEqual(longest_run("abbcccbb"), ("c", 3))
        self.assertEqual(longest_run("aabb"), ("a", 2))
        self.assertEqual(longest_run(""), ("", 0))

    def test_ratio(self):
        self.assertEqual(ratio(""), 1.0)
        self.assertEqual(ratio("aaaa"), 0.5)
        self.assertEqual(ratio("ab"), 2.0)


if __name__ == "__main__":
    unittest.main()
"""


def _rle(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["rle", "runlength", "squash", "run_codec"], v),
        "encode": _pick(["encode", "compress", "pack", "rle_encode"], v),
        "decode": _pick(["decode", "expand", "unpack", "rle_decode"], v),
        "maxrun": rng.choice([9, 12, 15, 20, 99]),
    }


# -- matrices -------------------------------------------------------------------------------------------------

_MATRIX = '''"""Matrices as lists of rows."""


def zeros(rows, cols):
    return [[0] * cols for _ in range(rows)]


def identity(n):
    m = zeros(n, n)
    for i in range(n):
        m[i][i] = 1
    return m


def shape(m):
    return (len(m), len(m[0]) if m else 0)


def transpose(m):
    rows, cols = shape(m)
    return [[m[r][c] for r in range(rows)] for c in range(cols)]


def add(a, b):
    if shape(a) != shape(b):
        raise ValueError("shape mismatch")
    return [[a[i][j] + b[i][j] for j in range(len(a[0]))] for i in range(len(a))]


def $multiply(a, b):
    ra, ca = shape(a)
    rb, cb = shape(b)
    if ca != rb:
        raise ValueError("shape mismatch")
    out = zeros(ra, cb)
    for i in range(ra):
        for j in range(cb):
            total = 0
            for k in range(ca):
                total += a[i][k] * b[k][j]
            out[i][j] = total
    return out


def scale(m, factor=$factor):
    return [[x * factor for x in row] for row in m]


def trace(m):
    rows, cols = shape(m)
    if rows != cols:
        raise ValueError("not square")
    return sum(m[i][i] for i in range(rows))


def $power(m, n):
    if n < 0:
        raise ValueError("negative power")
    result = identity(len(m))
    for _ in range(n):
        result = $multiply(result, m)
    return result


def $det(m):
    n, cols = shape(m)
    if n != cols:
        raise ValueError("not square")
    if n == 1:
        return m[0][0]
    if n == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    total = 0
    for c in range(n):
        minor = [row[:c] + row[c + 1 :] for row in m[1:]]
        sign = 1 if c % 2 == 0 else -1
        total += sign * m[0][c] * $det(minor)
    return total
'''

_MATRIX_TESTS = """import unittest

from $module import add, $det, identity, $multiply, $power, scale, shape, trace, transpose, zeros

A = [[1, 2, 3], [4, 5, 6]]
B = [[7, 8], [9, 10], [11, 12]]


class MatrixTest(unittest.TestCase):
    def test_zeros_and_identity(self):
        self.assertEqual(zeros(2, 3), [[0, 0, 0], [0, 0, 0]])
        self.assertEqual(identity(3), [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
        m = zeros(2, 2)
        m[0][0] = 5
        self.assertEqual(m[1][0], 0)

    def test_shape(self):
        self.assertEqual(shape(A), (2, 3))
        self.assertEqual(shape(B), (3, 2))
        self.assertEqual(shape([]), (0, 0))

    def test_transpose(self):
        self.assertEqual(transpose(A), [[1, 4], [2, 5], [3, 6]])
        self.assertEqual(transpose(transpose(B)), B)

    def test_add(self):
        self.assertEqual(add(A, A), [[2, 4, 6], [8, 10, 12]])
        self.assertEqual(add([[1, 2]], [[10, 20]]), [[11, 22]])
        with self.assertRaises(ValueError):
            add(A, B)

    def test_multiply(self):
        self.assertEqual($multiply(A, B), [[58, 64], [139, 154]])
        self.assertEqual($multiply(B, A), [[39, 54, 69], [49, 68, 87], [59, 82, 105]])
        self.assertEqual($multiply(identity(2), [[1, 2], [3, 4]]), [[1, 2], [3, 4]])
        with self.assertRaises(ValueError):
            $multiply(A, A)

    def test_scale(self):
        self.assertEqual(scale([[1, -2]], 3), [[3, -6]])
        self.assertEqual(scale([[1, 2]]), [[$factor, 2 * $factor]])

    def test_trace(self):
        self.assertEqual(trace([[1, 2], [3, 4]]), 5)
        self.assertEqual(trace(identity(4)), 4)
        with self.assertRaises(ValueError):
            trace(A)

    def test_power(self):
        m = [[1, 1], [1, 0]]
        self.assertEqual($power(m, 0), identity(2))
        self.assertEqual($power(m, 1), m)
        self.assertEqual($power(m, 5), [[8, 5], [5, 3]])
        with self.assertRaises(ValueError):
            $power(m, -1)

    def test_determinant(self):
        self.assertEqual($det([[7]]), 7)
        self.assertEqual($det([[1, 2], [3, 4]]), -2)
        self.assertEqual($det([[2, 0, 1], [1, 3, 2], [1, 1, 2]]), 6)
        self.assertEqual($det([[6, 1, 1], [4, -2, 5], [2, 8, 7]]), -306)
        self.assertEqual($det([[1, 2, 3, 4], [5, 6, 7, 8], [2, 6, 4, 8], [3, 1, 1, 2]]), 72)
        with self.assertRaises(ValueError):
            $det(A)


if __name__ == "__main__":
    unittest.main()
"""


def _matrix(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["matrix", "linalg_lite", "grids", "matops"], v),
        "multiply": _pick(["multiply", "matmul", "dot", "product"], v),
        "power": _pick(["power", "matpow", "mpow", "repeat_product"], v),
        "det": _pick(["determinant", "det", "determinant_of", "det_laplace"], v),
        "factor": rng.choice([2, 3, 5, 10]),
    }


# -- dates ---------------------------------------------------------------------------------------------------

_DATES = '''"""Calendar arithmetic on (year, month, day) tuples, without the datetime module.

Ordinals count days from 0001-01-01 (ordinal 1), as in the proleptic Gregorian calendar."""

DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
WEEK_STARTS_ON = $weekstart
"""0 when weeks start on Monday, 6 when on Sunday."""


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError("bad month")
    if month == 2 and is_leap(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def $day_of_year(year, month, day):
    if day < 1 or day > days_in_month(year, month):
        raise ValueError("bad day")
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def to_ordinal(year, month, day):
    y = year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + $day_of_year(year, month, day)


def from_ordinal(n):
    if n < 1:
        raise ValueError("ordinal must be positive")
    year = (n - 1) // 366 + 1
    while to_ordinal(year + 1, 1, 1) <= n:
        year += 1
    remaining = n - to_ordinal(year, 1, 1) + 1
    month = 1
    while remaining > days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return (year, month, remaining)


def $add_days(date, days):
    return from_ordinal(to_ordinal(*date) + days)


def days_between(start, end):
    return to_ordinal(*end) - to_ordinal(*start)


def weekday(date):
    """Day of the week, 0 for the first day of the week."""
    return (to_ordinal(*date) - 1 - WEEK_STARTS_ON) % 7


def month_end(date, months=$months):
    """The last day of the month ``months`` after ``date``'s."""
    year, month, _ = date
    index = year * 12 + (month - 1) + months
    year, month = divmod(index, 12)
    return (year, month + 1, days_in_month(year, month + 1))
'''

_DATES_TESTS = """import datetime
import unittest

from $module import (
    WEEK_STARTS_ON,
    $add_days,
    $day_of_year,
    days_between,
    days_in_month,
    from_ordinal,
    is_leap,
    month_end,
    to_ordinal,
    weekday,
)

SAMPLES = [(1, 1, 1), (1999, 12, 31), (2000, 2, 29), (2023, 3, 1), (2024, 12, 31), (1900, 3, 1)]


class DatesTest(unittest.TestCase):
    def test_leap_years(self):
        self.assertTrue(is_leap(2024))
        self.assertTrue(is_leap(2000))
        self.assertFalse(is_leap(1900))
        self.assertFalse(is_leap(2023))
        self.assertTrue(is_leap(4))

    def test_days_in_month(self):
        self.assertEqual(days_in_month(2023, 1), 31)
        self.assertEqual(days_in_month(2023, 2), 28)
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(2023, 4), 30)
        self.assertEqual(days_in_month(2023, 12), 31)
        for bad in (0, 13):
            with self.assertRaises(ValueError):
                days_in_month(2023, bad)

    def test_day_of_year(self):
        self.assertEqual($day_of_year(2023, 1, 1), 1)
        self.assertEqual($day_of_year(2023, 3, 1), 60)
        self.assertEqual($day_of_year(2024, 3, 1), 61)
        self.assertEqual($day_of_year(2024, 12, 31), 366)
        with self.assertRaises(ValueError):
            $day_of_year(2023, 2, 29)
        with self.assertRaises(ValueError):
            $day_of_year(2023, 1, 0)

    def test_ordinals_match_datetime(self):
        for date in SAMPLES:
            self.assertEqual(to_ordinal(*date), datetime.date(*date).toordinal(), date)
            self.assertEqual(from_ordinal(to_ordinal(*date)), date)
        with self.assertRaises(ValueError):
            from_ordinal(0)

    def test_from_ordinal_everywhere_in_a_leap_year(self):
        start = datetime.date(2024, 1, 1).toordinal()
        for n in range(start - 2, start + 368, 13):
            d = datetime.date.fromordinal(n)
            self.assertEqual(from_ordinal(n), (d.year, d.month, d.day))

    def test_add_days(self):
        self.assertEqual($add_days((2024, 2, 28), 1), (2024, 2, 29))
        self.assertEqual($add_days((2023, 2, 28), 1), (2023, 3, 1))
        self.assertEqual($add_days((2023, 12, 31), 1), (2024, 1, 1))
        self.assertEqual($add_days((2024, 1, 1), -1), (2023, 12, 31))
        self.assertEqual($add_days((2020, 5, 17), 1000), (2023, 2, 11))

    def test_days_between(self):
        self.assertEqual(days_between((2024, 1, 1), (2024, 3, 1)), 60)
        self.assertEqual(days_between((2024, 3, 1), (2024, 1, 1)), -60)
        self.assertEqual(days_between((2023, 5, 5), (2023, 5, 5)), 0)

    def test_weekday(self):
        self.assertEqual(WEEK_STARTS_ON, $weekstart)
        for date in SAMPLES:
            expected = (datetime.date(*date).weekday() - WEEK_STARTS_ON) % 7
            self.assertEqual(weekday(date), expected, date)

    def test_month_end(self):
        self.assertEqual(month_end((2024, 1, 15), 1), (2024, 2, 29))
        self.assertEqual(month_end((2023, 11, 2), 2), (2024, 1, 31))
        self.assertEqual(month_end((2023, 3, 9), 0), (2023, 3, 31))
        self.assertEqual(month_end((2023, 3, 9), -3), (2022, 12, 31))
        y, m = divmod(2023 * 12 + 5 + $months, 12)
        self.assertEqual(month_end((2023, 6, 1)), (y, m + 1, days_in_month(y, m + 1)))


if __name__ == "__main__":
    unittest.main()
"""


def _dates(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["datemath", "calendar_math", "daycount", "dates"], v),
        "day_of_year": _pick(["day_of_year", "yearday", "ordinal_in_year", "doy"], v),
        "add_days": _pick(["add_days", "shift", "plus_days", "advance"], v),
        "weekstart": _pick(["0", "6", "6", "0"], v),
        "months": rng.choice([1, 2, 3, 6]),
    }


# -- bank account ----------------------------------------------------------------------------------------------

_BANK = '''"""A bank $cls with an overdraft limit, fees and interest; amounts in cents."""


class InsufficientFunds(Exception):
    """Raised when a withdrawal would go past the overdraft limit."""


class $cls:
    def __init__(self, owner, balance=0, overdraft=$overdraft):
        if balance < 0 or overdraft < 0:
            raise ValueError("negative opening balance or overdraft")
        self.owner = owner
        self.balance = balance
        self.overdraft = overdraft
        self.history = []

    def available(self):
        return self.balance + self.overdraft

    def $deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))
        return self.balance

    def $withdraw(self, amount, fee=$fee):
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        total = amount + fee
        if total > self.available():
            raise InsufficientFunds(total - self.available())
        self.balance -= total
        self.history.append(("withdraw", total))
        return self.balance

    def transfer(self, other, amount):
        self.$withdraw(amount, fee=0)
        other.$deposit(amount)
        return (self.balance, other.balance)

    def apply_interest(self, rate_percent=$rate):
        if self.balance <= 0:
            return 0
        interest = self.balance * rate_percent // 100
        self.balance += interest
        self.history.append(("interest", interest))
        return interest

    def statement(self, last=$last):
        return self.history[-last:]

    def total(self, kind):
        return sum(amount for k, amount in self.history if k == kind)
'''

_BANK_TESTS = """import unittest

from $module import $cls, InsufficientFunds


class ${cls}Test(unittest.TestCase):
    def test_open(self):
        acct = $cls("ann")
        self.assertEqual(acct.owner, "ann")
        self.assertEqual(acct.balance, 0)
        self.assertEqual(acct.overdraft, $overdraft)
        self.assertEqual(acct.available(), $overdraft)
        self.assertEqual($cls("bo", 500, 100).available(), 600)
        with self.assertRaises(ValueError):
            $cls("x", -1)
        with self.assertRaises(ValueError):
            $cls("x", 0, -5)

    def test_deposit(self):
        acct = $cls("ann", 100)
        self.assertEqual(acct.$deposit(50), 150)
        self.assertEqual(acct.history, [("deposit", 50)])
        for bad in (0, -10):
            with self.assertRaises(ValueError):
                acct.$deposit(bad)
        self.assertEqual(acct.balance, 150)

    def test_withdraw_with_fee(self):
        acct = $cls("ann", 1000, 0)
        self.assertEqual(acct.$withdraw(100, fee=5), 895)
        self.assertEqual(acct.history, [("withdraw", 105)])
        self.assertEqual(acct.$withdraw(100), 795 - $fee)
        with self.assertRaises(ValueError):
            acct.$withdraw(0)

    def test_overdraft_limit(self):
        acct = $cls("ann", 100, 50)
        self.assertEqual(acct.$withdraw(150, fee=0), -50)
        with self.assertRaises(InsufficientFunds):
            acct.$withdraw(1, fee=0)
        self.assertEqual(acct.balance, -50)
        exact = $cls("bo", 10, 5)
        self.assertEqual(exact.$withdraw(13, fee=2), -5)

    def test_insufficient_funds_says_how_much(self):
        acct = $cls("ann", 10, 0)
        with self.assertRaises(InsufficientFunds) as ctx:
            acct.$withdraw(15, fee=1)
        self.assertEqual(ctx.exception.args, (6,))
        self.assertEqual(acct.history, [])

    def test_transfer(self):
        a = $cls("a", 300, 0)
        b = $cls("b", 20, 0)
        self.assertEqual(a.transfer(b, 120), (180, 140))
        self.assertEqual(a.history, [("withdraw", 120)])
        self.assertEqual(b.history, [("deposit", 120)])
        with self.assertRaises(InsufficientFunds):
            a.transfer(b, 181)
        self.assertEqual((a.balance, b.balance), (180, 140))

    def test_interest(self):
        acct = $cls("ann", 1000)
        self.assertEqual(acct.apply_interest(5), 50)
        self.assertEqual(acct.balance, 1050)
        self.assertEqual(acct.apply_interest(), 1050 * $rate // 100)
        self.assertEqual($cls("bo", 0).apply_interest(10), 0)
        self.assertEqual($cls("cy", 199).apply_interest(1), 1)

    def test_statement_and_totals(self):
        acct = $cls("ann", 0, 0)
        for amount in range(1, 8):
            acct.$deposit(amount)
        acct.$withdraw(3, fee=1)
        self.assertEqual(acct.statement(2), [("deposit", 7), ("withdraw", 4)])
        self.assertEqual(len(acct.statement()), $last)
        self.assertEqual(acct.statement()[-1], ("withdraw", 4))
        self.assertEqual(acct.total("deposit"), 28)
        self.assertEqual(acct.total("withdraw"), 4)
        self.assertEqual(acct.total("interest"), 0)


if __name__ == "__main__":
    unittest.main()
"""


def _bank(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["bank", "ledger_account", "wallet", "checking"], v),
        "cls": _pick(["Account", "LedgerAccount", "Wallet", "CheckingAccount"], v),
        "deposit": _pick(["deposit", "credit", "pay_in", "deposit"], v),
        "withdraw": _pick(["withdraw", "debit", "pay_out", "take_out"], v),
        "overdraft": rng.choice([0, 100, 250, 500]),
        "fee": rng.choice([1, 2, 3, 5]),
        "rate": rng.choice([2, 3, 4, 7]),
        "last": rng.choice([3, 4, 5]),
    }


# -- inventory --------------------------------------------------------------------------------------------------

_INVENTORY = '''"""A stock $cls: quantities and unit prices per SKU."""


class OutOfStock(Exception):
    """Raised when removing more than is in stock."""


class $cls:
    def __init__(self, reorder_level=$reorder):
        self.reorder_level = reorder_level
        self._stock = {}
        self._prices = {}

    def $add(self, sku, qty, price=None):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        self._stock[sku] = self._stock.get(sku, 0) + qty
        if price is not None:
            self._prices[sku] = price

    def $remove(self, sku, qty):
        have = self._stock.get(sku, 0)
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if qty > have:
            raise OutOfStock(sku)
        if qty == have:
            del self._stock[sku]
        else:
            self._stock[sku] = have - qty
        return have - qty

    def quantity(self, sku):
        return self._stock.get(sku, 0)

    def skus(self):
        return sorted(self._stock)

    def value(self):
        return sum(qty * self._prices.get(sku, 0) for sku, qty in self._stock.items())

    def needs_reorder(self):
        return sorted(sku for sku, qty in self._stock.items() if qty < self.reorder_level)

    def most_stocked(self, n=$top):
        ranked = sorted(self._stock.items(), key=lambda kv: (-kv[1], kv[0]))
        return [sku for sku, _ in ranked[:n]]

    def move_to(self, other, sku, qty):
        self.$remove(sku, qty)
        other.$add(sku, qty, self._prices.get(sku))
'''

_INVENTORY_TESTS = """import unittest

from $module import $cls, OutOfStock


def stocked():
    inv = $cls(reorder_level=5)
    inv.$add("bolt", 10, price=3)
    inv.$add("nut", 4, price=2)
    inv.$add("gear", 7, price=20)
    inv.$add("washer", 4)
    return inv


class ${cls}Test(unittest.TestCase):
    def test_add_accumulates(self):
        inv = $cls()
        inv.$add("a", 2)
        inv.$add("a", 3, price=7)
        self.assertEqual(inv.quantity("a"), 5)
        self.assertEqual(inv.quantity("missing"), 0)
        self.assertEqual(inv.value(), 35)
        with self.assertRaises(ValueError):
            inv.$add("a", 0)

    def test_remove(self):
        inv = stocked()
        self.assertEqual(inv.$remove("bolt", 4), 6)
        self.assertEqual(inv.quantity("bolt"), 6)
        self.assertEqual(inv.$remove("bolt", 6), 0)
        self.assertNotIn("bolt", inv.skus())
        with self.assertRaises(OutOfStock):
            inv.$remove("nut", 5)
        with self.assertRaises(OutOfStock):
            inv.$remove("nothing", 1)
        with self.assertRaises(ValueError):
            inv.$remove("nut", 0)
        self.assertEqual(inv.quantity("nut"), 4)

    def test_skus_sorted(self):
        self.assertEqual(stocked().skus(), ["bolt", "gear", "nut", "washer"])

    def test_value(self):
        self.assertEqual(stocked().value(), 10 * 3 + 4 * 2 + 7 * 20)
        self.assertEqual($cls().value(), 0)

    def test_reorder(self):
        inv = stocked()
        self.assertEqual(inv.needs_reorder(), ["nut", "washer"])
        inv.$add("nut", 1)
        self.assertEqual(inv.needs_reorder(), ["washer"])
        self.assertEqual($cls().reorder_level, $reorder)

    def test_most_stocked(self):
        inv = stocked()
        self.assertEqual(inv.most_stocked(2), ["bolt", "gear"])
        self.assertEqual(inv.most_stocked(4), ["bolt", "gear", "nut", "washer"])
        self.assertEqual(inv.most_stocked(), ["bolt", "gear", "nut", "washer"][:$top])
        self.assertEqual(inv.most_stocked(0), [])

    def test_move_to(self):
        a, b = stocked(), $cls()
        a.move_to(b, "gear", 3)
        self.assertEqual((a.quantity("gear"), b.quantity("gear")), (4, 3))
        self.assertEqual(b.value(), 60)
        with self.assertRaises(OutOfStock):
            a.move_to(b, "gear", 5)
        self.assertEqual(b.quantity("gear"), 3)


if __name__ == "__main__":
    unittest.main()
"""


def _inventory(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["inventory", "stockroom", "warehouse", "pantry"], v),
        "cls": _pick(["Inventory", "Stockroom", "Warehouse", "Pantry"], v),
        "add": _pick(["add", "receive", "stock", "put"], v),
        "remove": _pick(["remove", "ship", "take", "consume"], v),
        "reorder": rng.choice([3, 5, 10]),
        "top": rng.choice([1, 2, 3]),
    }


# -- roman numerals ------------------------------------------------------------------------------------------------

_ROMAN = '''"""Roman numerals from 1 to $maxvalue."""

NUMERALS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]
VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
MAX_VALUE = $maxvalue


def $to_roman(n, lower=$lower):
    if not isinstance(n, int) or n < 1 or n > MAX_VALUE:
        raise ValueError("out of range")
    out = []
    for value, symbol in NUMERALS:
        while n >= value:
            out.append(symbol)
            n -= value
    text = "".join(out)
    return text.lower() if lower else text


def $from_roman(text):
    if not text:
        raise ValueError("empty numeral")
    s = text.upper()
    total = 0
    for i, ch in enumerate(s):
        if ch not in VALUES:
            raise ValueError("bad symbol")
        value = VALUES[ch]
        if i + 1 < len(s) and VALUES.get(s[i + 1], 0) > value:
            total -= value
        else:
            total += value
    if total < 1 or total > MAX_VALUE or $to_roman(total, lower=False) != s:
        raise ValueError("not a canonical numeral")
    return total


def is_roman(text):
    try:
        $from_roman(text)
    except ValueError:
        return False
    return True


def add_roman(a, b):
    return $to_roman($from_roman(a) + $from_roman(b))
'''

_ROMAN_TESTS = """import unittest

from $module import MAX_VALUE, add_roman, $from_roman, is_roman, $to_roman

KNOWN = {
    1: "I", 3: "III", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD",
    1994: "MCMXCIV", 2024: "MMXXIV", 3888: "MMMDCCCLXXXVIII", 444: "CDXLIV", 949: "CMXLIX",
}


class RomanTest(unittest.TestCase):
    def test_to_roman(self):
        for n, text in KNOWN.items():
            self.assertEqual($to_roman(n, lower=False), text, n)

    def test_lower(self):
        self.assertEqual($to_roman(14, lower=True), "xiv")
        self.assertEqual($to_roman(6), "vi" if $lower else "VI")

    def test_range(self):
        self.assertEqual(MAX_VALUE, $maxvalue)
        self.assertEqual($from_roman($to_roman(MAX_VALUE)), MAX_VALUE)
        self.assertEqual($to_roman(3000, lower=False), "MMM")
        for bad in (0, -1, MAX_VALUE + 1, 2.0, "5"):
            with self.assertRaises(ValueError):
                $to_roman(bad)

    def test_from_roman(self):
        for n, text in KNOWN.items():
            self.assertEqual($from_roman(text), n, text)
        self.assertEqual($from_roman("mcmxciv"), 1994)

    def test_from_roman_rejects(self):
        for bad in ("", "IIII", "VX", "IC", "ABC", "MMMM", "IIV", "XM"):
            with self.assertRaises(ValueError, msg=bad):
                $from_roman(bad)

    def test_round_trip(self):
        for n in range(1, MAX_VALUE + 1, 7):
            self.assertEqual($from_roman($to_roman(n, lower=False)), n)

    def test_is_roman(self):
        self.assertTrue(is_roman("XLII"))
        self.assertFalse(is_roman("XLIIII"))
        self.assertFalse(is_roman(""))

    def test_add(self):
        self.assertEqual(add_roman("IX", "VI").upper(), "XV")
        self.assertEqual(add_roman("MM", "CD").upper(), "MMCD")


if __name__ == "__main__":
    unittest.main()
"""


def _roman(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["roman", "numerals", "roman_numerals", "latin_numbers"], v),
        "to_roman": _pick(["to_roman", "encode", "int_to_roman", "roman_of"], v),
        "from_roman": _pick(["from_roman", "decode", "roman_to_int", "value_of"], v),
        "maxvalue": rng.choice([3999, 3999, 3900, 3950]),
        "lower": _pick(["False", "True", "False", "True"], v),
    }


# -- binary search ----------------------------------------------------------------------------------------------------

_BSEARCH = '''"""Binary search over sorted sequences and monotone predicates."""


def $left(items, x, lo=0, hi=None):
    """The first index whose item is not less than ``x``."""
    if hi is None:
        hi = len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def $right(items, x, lo=0, hi=None):
    """The first index whose item is greater than ``x``."""
    if hi is None:
        hi = len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def $index_of(items, x):
    i = $left(items, x)
    if i < len(items) and items[i] == x:
        return i
    return -1


def count_between(items, low, high):
    """How many items lie in [low, high]."""
    if low > high:
        return 0
    return $right(items, high) - $left(items, low)


def first_true(lo, hi, pred):
    """The smallest n in [lo, hi) with pred(n), or hi if there is none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def isqrt(n):
    if n < 0:
        raise ValueError("negative")
    return first_true(0, n + 2, lambda r: r * r > n) - 1


def nearest(items, x, default=$default):
    if not items:
        return default
    i = $left(items, x)
    if i == 0:
        return items[0]
    if i == len(items):
        return items[-1]
    before, after = items[i - 1], items[i]
    return before if x - before <= after - x else after
'''

_BSEARCH_TESTS = """import unittest

from $module import count_between, first_true, $index_of, isqrt, $left, nearest, $right

DATA = [1, 3, 3, 3, 7, 9, 12]


class SearchTest(unittest.TestCase):
    def test_left(self):
        self.assertEqual($left(DATA, 3), 1)
        self.assertEqual($left(DATA, 0), 0)
        self.assertEqual($left(DATA, 4), 4)
        self.assertEqual($left(DATA, 12), 6)
        self.assertEqual($left(DATA, 13), 7)
        self.assertEqual($left([], 5), 0)
        self.assertEqual($left(DATA, 3, lo=2), 2)
        self.assertEqual($left(DATA, 9, 0, 3), 3)

    def test_right(self):
        self.assertEqual($right(DATA, 3), 4)
        self.assertEqual($right(DATA, 0), 0)
        self.assertEqual($right(DATA, 12), 7)
        self.assertEqual($right(DATA, 8), 5)
        self.assertEqual($right(DATA, 1, 0, 1), 1)
        self.assertEqual($right(DATA, 3, hi=2), 2)

    def test_index_of(self):
        self.assertEqual($index_of(DATA, 3), 1)
        self.assertEqual($index_of(DATA, 12), 6)
        self.assertEqual($index_of(DATA, 1), 0)
        self.assertEqual($index_of(DATA, 5), -1)
        self.assertEqual($index_of(DATA, 13), -1)
        self.assertEqual($index_of([], 1), -1)

    def test_count_between(self):
        self.assertEqual(count_between(DATA, 3, 3), 3)
        self.assertEqual(count_between(DATA, 2, 9), 5)
        self.assertEqual(count_between(DATA, 0, 100), 7)
        self.assertEqual(count_between(DATA, 10, 11), 0)
        self.assertEqual(count_between(DATA, 9, 3), 0)

    def test_first_true(self):
        self.assertEqual(first_true(0, 100, lambda n: n >= 37), 37)
        self.assertEqual(first_true(0, 10, lambda n: False), 10)
        self.assertEqual(first_true(5, 10, lambda n: True), 5)
        self.assertEqual(first_true(3, 3, lambda n: True), 3)

    def test_isqrt(self):
        for n, r in [(0, 0), (1, 1), (3, 1), (4, 2), (15, 3), (16, 4), (17, 4), (99, 9), (100, 10)]:
            self.assertEqual(isqrt(n), r, n)
        with self.assertRaises(ValueError):
            isqrt(-4)

    def test_nearest(self):
        self.assertEqual(nearest(DATA, 5), 3)
        self.assertEqual(nearest(DATA, 6), 7)
        self.assertEqual(nearest(DATA, 8), 7)
        self.assertEqual(nearest(DATA, -10), 1)
        self.assertEqual(nearest(DATA, 50), 12)
        self.assertEqual(nearest(DATA, 10), 9)
        self.assertEqual(nearest(DATA, 11), 12)
        self.assertEqual(nearest([], 3), $default)
        self.assertEqual(nearest([], 3, default=None), None)


if __name__ == "__main__":
    unittest.main()
"""


def _bsearch(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["bsearch", "bisection", "sorted_search", "halving"], v),
        "left": _pick(["bisect_left", "lower_bound", "left_index", "first_not_less"], v),
        "right": _pick(["bisect_right", "upper_bound", "right_index", "first_greater"], v),
        "index_of": _pick(["index_of", "find", "search", "locate"], v),
        "default": rng.choice([-1, 0, 42]),
    }


# -- tokenizer ---------------------------------------------------------------------------------------------------------

_TOKENIZER = '''"""A tokenizer for a small expression language.

Tokens are (kind, text, position) tuples; kinds: number, name, keyword, string, op."""

KEYWORDS = frozenset($keywords)
TWO_CHAR_OPS = ("==", "!=", "<=", ">=", "->")
ONE_CHAR_OPS = "+-*/()=<>,"
COMMENT = "$comment"
QUOTE = '$quote'


class TokenizeError(Exception):
    """Raised on a character no token can start with, or an unterminated string."""


def $tokenize(source):
    tokens = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch.isspace():
            i += 1
        elif ch == COMMENT:
            end = source.find("\\n", i)
            i = len(source) if end < 0 else end
        elif ch.isdigit():
            start = i
            while i < len(source) and (source[i].isdigit() or source[i] == "."):
                i += 1
            tokens.append(("number", source[start:i], start))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(source) and (source[i].isalnum() or source[i] == "_"):
                i += 1
            word = source[start:i]
            tokens.append(("keyword" if word in KEYWORDS else "name", word, start))
        elif ch == QUOTE:
            end = source.find(QUOTE, i + 1)
            if end < 0:
                raise TokenizeError("unterminated string")
            tokens.append(("string", source[i + 1 : end], i))
            i = end + 1
        elif source[i : i + 2] in TWO_CHAR_OPS:
            tokens.append(("op", source[i : i + 2], i))
            i += 2
        elif ch in ONE_CHAR_OPS:
            tokens.append(("op", ch, i))
            i += 1
        else:
            raise TokenizeError("unexpected character")
    return tokens


def kinds(tokens):
    return [kind for kind, _, _ in tokens]


def $untokenize(tokens):
    parts = []
    for kind, text, _ in tokens:
        parts.append(QUOTE + text + QUOTE if kind == "string" else text)
    return " ".join(parts)


def count_kind(tokens, kind="$countkind"):
    return sum(1 for k, _, _ in tokens if k == kind)
'''

_TOKENIZER_TESTS = """import unittest

from $module import KEYWORDS, TokenizeError, count_kind, kinds, $tokenize, $untokenize

Q = '$quote'


class TokenizeTest(unittest.TestCase):
    def test_numbers_and_ops(self):
        self.assertEqual(
            $tokenize("12+3.5*x"),
            [("number", "12", 0), ("op", "+", 2), ("number", "3.5", 3), ("op", "*", 6), ("name", "x", 7)],
        )

    def test_names_and_keywords(self):
        self.assertEqual(sorted(KEYWORDS), $keywords)
        for word in KEYWORDS:
            self.assertEqual($tokenize(word), [("keyword", word, 0)])
        keyword = sorted(KEYWORDS)[0]
        toks = $tokenize(keyword + " _a1 b")
        self.assertEqual(kinds(toks), ["keyword", "name", "name"])
        self.assertEqual(toks[1], ("name", "_a1", len(keyword) + 1))
        self.assertEqual(toks[2][1], "b")

    def test_two_char_ops(self):
        toks = $tokenize("a<=b!=c->d==e>=f")
        self.assertEqual([t[1] for t in toks if t[0] == "op"], ["<=", "!=", "->", "==", ">="])
        self.assertEqual($tokenize("a < b"), [("name", "a", 0), ("op", "<", 2), ("name", "b", 4)])

    def test_strings(self):
        toks = $tokenize("x = " + Q + "hi there" + Q + " + y")
        self.assertEqual(toks[2], ("string", "hi there", 4))
        self.assertEqual(toks[3], ("op", "+", 15))
        self.assertEqual($tokenize(Q + Q), [("string", "", 0)])
        with self.assertRaises(TokenizeError):
            $tokenize(Q + "open")

    def test_whitespace_and_comments(self):
        self.assertEqual($tokenize("  \\t\\n"), [])
        toks = $tokenize("a $comment note + 1\\nb")
        self.assertEqual(toks, [("name", "a", 0), ("name", "b", len("a $comment note + 1\\n"))])
        self.assertEqual($tokenize("x $comment end"), [("name", "x", 0)])

    def test_bad_character(self):
        with self.assertRaises(TokenizeError):
            $tokenize("a ? b")

    def test_untokenize(self):
        src = "f(a, 2) -> " + Q + "s" + Q
        self.assertEqual($untokenize($tokenize(src)), "f ( a , 2 ) -> " + Q + "s" + Q)
        self.assertEqual($tokenize($untokenize($tokenize(src)))[-1][:2], ("string", "s"))

    def test_count_kind(self):
        toks = $tokenize("a + b * 3 - 4")
        self.assertEqual(count_kind(toks, "number"), 2)
        self.assertEqual(count_kind(toks, "op"), 3)
        self.assertEqual(count_kind(toks), count_kind(toks, "$countkind"))
        self.assertEqual(count_kind(toks, "string"), 0)


if __name__ == "__main__":
    unittest.main()
"""


def _tokenizer(rng: random.Random, v: int) -> dict[str, object]:
    keywords = rng.sample(["let", "if", "else", "fn", "return", "while", "and", "or", "not"], 4)
    return {
        "module": _pick(["tokenizer", "lexer", "scanner", "tokens"], v),
        "tokenize": _pick(["tokenize", "lex", "scan", "split_tokens"], v),
        "untokenize": _pick(["untokenize", "join_tokens", "render", "unlex"], v),
        "keywords": repr(sorted(keywords)),
        "comment": _pick(["#", ";", "#", "%"], v),
        "quote": _pick(['"', '"', "`", '"'], v),
        "countkind": rng.choice(["name", "op"]),
    }


# -- priority scheduler --------------------------------------------------------------------------------------------------

_SCHEDULER = '''"""A priority $cls: higher priority first, first come first served within a priority."""

import heapq


class $cls:
    def __init__(self, default_priority=$prio):
        self.default_priority = default_priority
        self._heap = []
        self._counter = 0
        self._cancelled = set()

    def $submit(self, name, priority=None):
        if priority is None:
            priority = self.default_priority
        if priority < 0:
            raise ValueError("priority must not be negative")
        self._counter += 1
        heapq.heappush(self._heap, (-priority, self._counter, name))
        return self._counter

    def cancel(self, ticket):
        if ticket < 1 or ticket > self._counter:
            raise KeyError(ticket)
        self._cancelled.add(ticket)

    def __len__(self):
        return sum(1 for _, ticket, _ in self._heap if ticket not in self._cancelled)

    def _drop_cancelled(self):
        while self._heap and self._heap[0][1] in self._cancelled:
            _, ticket, _ = heapq.heappop(self._heap)
            self._cancelled.discard(ticket)

    def peek(self):
        self._drop_cancelled()
        if not self._heap:
            raise IndexError("nothing scheduled")
        return self._heap[0][2]

    def $next(self):
        self._drop_cancelled()
        if not self._heap:
            raise IndexError("nothing scheduled")
        return heapq.heappop(self._heap)[2]

    def run_all(self):
        order = []
        while len(self) > 0:
            order.append(self.$next())
        return order

    def age(self, boost=$boost):
        """Raise every waiting task's priority by ``boost``."""
        self._heap = [(p - boost, ticket, name) for p, ticket, name in self._heap]
        heapq.heapify(self._heap)

    def pending(self):
        return [name for _, ticket, name in sorted(self._heap) if ticket not in self._cancelled]
'''

_SCHEDULER_TESTS = """import unittest

from $module import $cls


class ${cls}Test(unittest.TestCase):
    def test_priority_order(self):
        s = $cls()
        s.$submit("low", 1)
        s.$submit("high", 9)
        s.$submit("mid", 5)
        self.assertEqual(s.run_all(), ["high", "mid", "low"])

    def test_fifo_within_priority(self):
        s = $cls()
        for name in "abc":
            s.$submit(name, 3)
        s.$submit("z", 4)
        self.assertEqual(s.run_all(), ["z", "a", "b", "c"])

    def test_default_priority(self):
        s = $cls()
        self.assertEqual(s.default_priority, $prio)
        s.$submit("below", $prio - 1)
        s.$submit("default")
        s.$submit("above", $prio + 1)
        self.assertEqual(s.run_all(), ["above", "default", "below"])
        self.assertEqual($cls(default_priority=7).default_priority, 7)

    def test_tickets(self):
        s = $cls()
        self.assertEqual(s.$submit("a", 1), 1)
        self.assertEqual(s.$submit("b", 1), 2)
        with self.assertRaises(ValueError):
            s.$submit("c", -1)
        self.assertEqual(s.$submit("zero", 0), 3)

    def test_len_and_peek(self):
        s = $cls()
        self.assertEqual(len(s), 0)
        with self.assertRaises(IndexError):
            s.peek()
        with self.assertRaises(IndexError):
            s.$next()
        s.$submit("a", 2)
        s.$submit("b", 3)
        self.assertEqual(len(s), 2)
        self.assertEqual(s.peek(), "b")
        self.assertEqual(len(s), 2)

    def test_cancel(self):
        s = $cls()
        t1 = s.$submit("a", 5)
        s.$submit("b", 4)
        t3 = s.$submit("c", 3)
        s.cancel(t1)
        s.cancel(t3)
        self.assertEqual(len(s), 1)
        self.assertEqual(s.peek(), "b")
        self.assertEqual(s.run_all(), ["b"])
        with self.assertRaises(KeyError):
            s.cancel(99)
        with self.assertRaises(KeyError):
            s.cancel(0)

    def test_age(self):
        s = $cls()
        s.$submit("a", 1)
        s.$submit("b", 2)
        s.age(10)
        self.assertEqual(s.pending(), ["b", "a"])
        s.$submit("c", 12)
        self.assertEqual(s.run_all(), ["b", "c", "a"])
        t = $cls()
        t.$submit("old", 1)
        t.age()
        t.$submit("new", 1 + $boost)
        self.assertEqual(t.run_all(), ["old", "new"])

    def test_pending(self):
        s = $cls()
        s.$submit("x", 1)
        t = s.$submit("y", 2)
        s.$submit("z", 2)
        s.cancel(t)
        self.assertEqual(s.pending(), ["z", "x"])


if __name__ == "__main__":
    unittest.main()
"""


def _scheduler(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["scheduler", "job_queue", "dispatcher", "triage"], v),
        "cls": _pick(["Scheduler", "JobQueue", "Dispatcher", "Triage"], v),
        "submit": _pick(["submit", "enqueue", "schedule", "add_job"], v),
        "next": _pick(["next", "pop_next", "dispatch", "take"], v),
        "prio": rng.choice([3, 5, 10]),
        "boost": rng.choice([1, 2, 4]),
    }


# -- LRU cache ------------------------------------------------------------------------------------------------------------

_LRU = '''"""A least-recently-used $cls with hit statistics."""

from collections import OrderedDict


class $cls:
    def __init__(self, capacity=$cap):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def $get(self, key, default=None):
        if key in self._data:
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]
        self.misses += 1
        return default

    def $put(self, key, value):
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        evicted = []
        while len(self._data) > self.capacity:
            evicted.append(self._data.popitem(last=False)[0])
        return evicted

    def keys(self):
        """Least recently used first."""
        return list(self._data)

    def hit_rate(self):
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def resize(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        evicted = []
        while len(self._data) > capacity:
            evicted.append(self._data.popitem(last=False)[0])
        return evicted
'''

_LRU_TESTS = """import unittest

from $module import $cls


class ${cls}Test(unittest.TestCase):
    def test_defaults(self):
        c = $cls()
        self.assertEqual(c.capacity, $cap)
        self.assertEqual(len(c), 0)
        with self.assertRaises(ValueError):
            $cls(0)
        self.assertEqual($cls(1).capacity, 1)

    def test_get_and_put(self):
        c = $cls(3)
        self.assertEqual(c.$put("a", 1), [])
        self.assertEqual(c.$get("a"), 1)
        self.assertIsNone(c.$get("b"))
        self.assertEqual(c.$get("b", 0), 0)
        self.assertIn("a", c)
        self.assertNotIn("b", c)

    def test_eviction_order(self):
        c = $cls(2)
        c.$put("a", 1)
        c.$put("b", 2)
        self.assertEqual(c.$put("c", 3), ["a"])
        self.assertEqual(c.keys(), ["b", "c"])
        self.assertEqual(len(c), 2)

    def test_get_refreshes(self):
        c = $cls(2)
        c.$put("a", 1)
        c.$put("b", 2)
        c.$get("a")
        self.assertEqual(c.$put("c", 3), ["b"])
        self.assertEqual(c.keys(), ["a", "c"])

    def test_put_existing_refreshes_and_updates(self):
        c = $cls(2)
        c.$put("a", 1)
        c.$put("b", 2)
        self.assertEqual(c.$put("a", 10), [])
        self.assertEqual(c.keys(), ["b", "a"])
        self.assertEqual(c.$get("a"), 10)
        self.assertEqual(len(c), 2)

    def test_hit_rate(self):
        c = $cls(3)
        self.assertEqual(c.hit_rate(), 0.0)
        c.$put("a", 1)
        c.$get("a")
        c.$get("a")
        c.$get("x")
        self.assertEqual((c.hits, c.misses), (2, 1))
        self.assertAlmostEqual(c.hit_rate(), 2 / 3)

    def test_resize(self):
        c = $cls(4)
        for i in range(4):
            c.$put(i, i * i)
        self.assertEqual(c.resize(2), [0, 1])
        self.assertEqual(c.keys(), [2, 3])
        self.assertEqual(c.resize(5), [])
        self.assertEqual(c.capacity, 5)
        with self.assertRaises(ValueError):
            c.resize(0)


if __name__ == "__main__":
    unittest.main()
"""


def _lru(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["lru", "lru_cache", "recent", "memo_cache"], v),
        "cls": _pick(["LRUCache", "Cache", "RecentCache", "MemoCache"], v),
        "get": _pick(["get", "lookup", "fetch", "get"], v),
        "put": _pick(["put", "store", "insert", "set"], v),
        "cap": rng.choice([16, 32, 64, 128]),
    }


# -- descriptive statistics ------------------------------------------------------------------------------------------------

_STATS = '''"""Descriptive statistics over lists of numbers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of no data")
    return sum(xs) / len(xs)


def $median(xs):
    if not xs:
        raise ValueError("median of no data")
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def mode(xs):
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    best = max(counts.values())
    return min(x for x, c in counts.items() if c == best)


def $variance(xs, sample=$sample):
    n = len(xs)
    if n < 2:
        raise ValueError("variance needs at least two points")
    m = mean(xs)
    ss = sum((x - m) ** 2 for x in xs)
    return ss / (n - 1) if sample else ss / n


def percentile(xs, p):
    """Nearest-rank percentile, p in [0, 100]."""
    if not 0 <= p <= 100:
        raise ValueError("p out of range")
    s = sorted(xs)
    rank = max(1, -(-p * len(s) // 100))
    return s[rank - 1]


def moving_average(xs, window=$window):
    if window < 1:
        raise ValueError("window must be positive")
    return [sum(xs[i : i + window]) / window for i in range(len(xs) - window + 1)]


def $zscores(xs):
    m = mean(xs)
    sd = $variance(xs, sample=False) ** 0.5
    return [(x - m) / sd for x in xs]
'''

_STATS_TESTS = """import unittest

from $module import mean, $median, mode, moving_average, percentile, $variance, $zscores


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)
        self.assertEqual(mean([5]), 5)
        with self.assertRaises(ValueError):
            mean([])

    def test_median(self):
        self.assertEqual($median([3, 1, 2]), 2)
        self.assertEqual($median([4, 1, 3, 2]), 2.5)
        self.assertEqual($median([7]), 7)
        self.assertEqual($median([1, 9]), 5)
        with self.assertRaises(ValueError):
            $median([])

    def test_mode(self):
        self.assertEqual(mode([1, 2, 2, 3, 3]), 2)
        self.assertEqual(mode([5, 4, 4, 5, 6]), 4)
        self.assertEqual(mode([9]), 9)

    def test_variance(self):
        data = [2, 4, 4, 4, 5, 5, 7, 9]
        self.assertEqual($variance(data, sample=False), 4)
        self.assertAlmostEqual($variance(data, sample=True), 32 / 7)
        self.assertAlmostEqual($variance(data), 32 / 7 if $sample else 4)
        with self.assertRaises(ValueError):
            $variance([1])

    def test_percentile(self):
        data = [15, 20, 35, 40, 50]
        self.assertEqual(percentile(data, 0), 15)
        self.assertEqual(percentile(data, 30), 20)
        self.assertEqual(percentile(data, 40), 20)
        self.assertEqual(percentile(data, 50), 35)
        self.assertEqual(percentile(data, 100), 50)
        with self.assertRaises(ValueError):
            percentile(data, 101)
        with self.assertRaises(ValueError):
            percentile(data, -1)

    def test_moving_average(self):
        self.assertEqual(moving_average([1, 2, 3, 4, 5], 2), [1.5, 2.5, 3.5, 4.5])
        self.assertEqual(moving_average([1, 2, 3], 3), [2.0])
        self.assertEqual(moving_average([1, 2], 3), [])
        data = list(range(10))
        self.assertEqual(len(moving_average(data)), 11 - $window)
        self.assertEqual(moving_average(data)[0], sum(range($window)) / $window)
        with self.assertRaises(ValueError):
            moving_average(data, 0)

    def test_zscores(self):
        z = $zscores([2, 4, 4, 4, 5, 5, 7, 9])
        self.assertEqual(z[0], -1.5)
        self.assertEqual(z[-1], 2.0)
        self.assertAlmostEqual(sum(z), 0.0)


if __name__ == "__main__":
    unittest.main()
"""


def _stats(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["stats", "describe", "summary_stats", "num_summary"], v),
        "median": _pick(["median", "middle", "median_of", "med"], v),
        "variance": _pick(["variance", "var", "spread", "variance_of"], v),
        "zscores": _pick(["zscores", "standardize", "normalize", "z_scores"], v),
        "sample": _pick(["True", "False", "False", "True"], v),
        "window": rng.choice([2, 3, 4]),
    }


# -- word frequencies ------------------------------------------------------------------------------------------------

_WORDS = '''"""Word counts and simple text statistics."""

STOPWORDS = frozenset($stopwords)
MIN_LENGTH = $minlen


def $normalize(word):
    return word.strip(".,;:!?\\"'()").lower()


def $count(text, skip_stopwords=True):
    counts = {}
    for raw in text.split():
        word = $normalize(raw)
        if len(word) < MIN_LENGTH:
            continue
        if skip_stopwords and word in STOPWORDS:
            continue
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n=$topn):
    counts = $count(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:n]


def longest(text):
    best = ""
    for raw in text.split():
        word = $normalize(raw)
        if len(word) > len(best) or (len(word) == len(best) and word < best):
            best = word
    return best


def capitalized_ratio(text):
    tokens = text.split()
    if not tokens:
        return 0.0
    caps = sum(1 for t in tokens if t[:1].isupper())
    return caps / len(tokens)
'''

_WORDS_TESTS = """import unittest

from $module import MIN_LENGTH, STOPWORDS, capitalized_ratio, $count, longest, $normalize, top_words

TEXT = "The cat sat. The cat ran! A dog ran, and the DOG sat (quietly)."


class WordsTest(unittest.TestCase):
    def test_normalize(self):
        self.assertEqual($normalize("Hello,"), "hello")
        self.assertEqual($normalize("(quietly)."), "quietly")
        self.assertEqual($normalize('"Quoted!"'), "quoted")
        self.assertEqual($normalize("it's"), "it's")

    def test_count(self):
        counts = $count(TEXT, skip_stopwords=False)
        self.assertEqual(counts["cat"], 2)
        self.assertEqual(counts["dog"], 2)
        self.assertEqual(counts["ran"], 2)
        self.assertEqual(counts["quietly"], 1)
        self.assertEqual(counts.get("the", 0), 3 if MIN_LENGTH <= 3 else 0)

    def test_stopwords_skipped_by_default(self):
        self.assertEqual(sorted(STOPWORDS), $stopwords)
        counts = $count(TEXT)
        for word in STOPWORDS:
            self.assertNotIn(word, counts)
        self.assertEqual(counts["cat"], 2)

    def test_min_length(self):
        self.assertEqual(MIN_LENGTH, $minlen)
        counts = $count("a bb ccc dddd", skip_stopwords=False)
        self.assertEqual(sorted(counts), [w for w in ["a", "bb", "ccc", "dddd"] if len(w) >= MIN_LENGTH])

    def test_top_words(self):
        self.assertEqual(top_words(TEXT, 2), [("cat", 2), ("dog", 2)])
        self.assertEqual(top_words(TEXT, 1), [("cat", 2)])
        self.assertEqual(len(top_words("alpha bravo charlie delta echo foxtrot golf hotel")), $topn)
        self.assertEqual(top_words(""), [])

    def test_longest(self):
        self.assertEqual(longest(TEXT), "quietly")
        self.assertEqual(longest("bb aa cc"), "aa")
        self.assertEqual(longest(""), "")

    def test_capitalized_ratio(self):
        self.assertEqual(capitalized_ratio("Hello world Foo bar"), 0.5)
        self.assertEqual(capitalized_ratio(""), 0.0)
        self.assertEqual(capitalized_ratio("A B C"), 1.0)


if __name__ == "__main__":
    unittest.main()
"""


def _words(rng: random.Random, v: int) -> dict[str, object]:
    stop = ["the", "and", "a", "an", "of", "to", "in"]
    return {
        "module": _pick(["wordfreq", "textstats", "concordance", "wordcount"], v),
        "normalize": _pick(["normalize", "clean", "canonical", "fold"], v),
        "count": _pick(["count_words", "frequencies", "tally", "word_counts"], v),
        "stopwords": repr(sorted(stop[: rng.randint(3, 7)])),
        "minlen": rng.choice([1, 2, 3]),
        "topn": rng.choice([3, 5]),
    }


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("stack", "a bounded stack", _STACK, _STACK_TESTS, _stack),
        Family("ring_queue", "a fixed-size circular queue", _QUEUE, _QUEUE_TESTS, _queue),
        Family("interval", "interval arithmetic", _INTERVAL, _INTERVAL_TESTS, _interval),
        Family("text_wrap", "word wrapping and truncation", _WRAP, _WRAP_TESTS, _wrap),
        Family("run_length", "run-length encoding", _RLE, _RLE_TESTS, _rle),
        Family("matrix", "matrix operations", _MATRIX, _MATRIX_TESTS, _matrix),
        Family("date_math", "calendar arithmetic", _DATES, _DATES_TESTS, _dates),
        Family("bank_account", "a bank account", _BANK, _BANK_TESTS, _bank),
        Family("inventory", "a stock inventory", _INVENTORY, _INVENTORY_TESTS, _inventory),
        Family("roman", "Roman numeral conversion", _ROMAN, _ROMAN_TESTS, _roman),
        Family("binary_search", "binary search utilities", _BSEARCH, _BSEARCH_TESTS, _bsearch),
        Family("tokenizer", "an expression tokenizer", _TOKENIZER, _TOKENIZER_TESTS, _tokenizer),
        Family("scheduler", "a priority scheduler", _SCHEDULER, _SCHEDULER_TESTS, _scheduler),
        Family("lru_cache", "an LRU cache", _LRU, _LRU_TESTS, _lru),
        Family("statistics", "descriptive statistics", _STATS, _STATS_TESTS, _stats),
        Family("word_freq", "word frequency counting", _WORDS, _WORDS_TESTS, _words),
    )
}
"""Every phase 1 family by name."""
