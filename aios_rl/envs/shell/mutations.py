"""Mutation operators: one-location bugs injected into Python source, with exact before/after text.

Every operator reads a module's AST and yields the :class:`Site` s it applies to: a byte span of
the UTF-8 source and the text that replaces it (token-precise: ``<`` becomes ``<=`` and nothing
else on the line moves). :func:`sites` enumerates every operator's sites in a stable order;
:func:`apply` makes one of them a :class:`Mutant`: the mutated source and its
:class:`~contracts.GroundTruth`, whose ``original`` / ``mutated`` snippets are whole lines
(widened with context lines until each occurs exactly once in its file), so
``CandidateEdit(old=mutated, new=original)`` always applies and restores the original file.

Everything here is pure: no file system, no processes. Operators (``OPERATORS``):

- ``off_by_one``: a boundary comparison (``<`` <-> ``<=``, ``>`` <-> ``>=``), or an integer
  constant in arithmetic, a comparison, an index or ``range(...)`` moved by one
- ``flipped_comparison``: ``<`` <-> ``>``, ``<=`` <-> ``>=``, ``==`` <-> ``!=``, ``in`` <->
  ``not in``, ``is`` <-> ``is not``
- ``wrong_operator``: ``+`` <-> ``-``, ``*`` -> ``/``, ``//`` -> ``/``, ``%`` -> ``//`` ... in
  expressions and augmented assignments
- ``swapped_arguments``: two adjacent positional arguments of a call exchanged
- ``wrong_constant``: a literal changed (``0`` <-> ``1``, ``k`` -> ``2k``, ``True`` <->
  ``False``, a string shortened)
- ``missing_return``: ``return expr`` becomes the bare expression statement ``expr``
- ``wrong_variable``: a local variable read replaced by another local defined before it
- ``inverted_condition``: ``if c`` / ``while c`` / ``x if c else y`` / comprehension filters
  negated (or their ``not`` dropped)
- ``wrong_slice``: ``[a:]`` <-> ``[:a]``, ``[a:b]`` -> ``[a:b + 1]``, a step dropped
- ``wrong_default``: a parameter's default value changed
- ``swapped_boolean``: ``and`` <-> ``or``
- ``wrong_builtin``: ``min`` <-> ``max``, ``any`` <-> ``all``, ``.lstrip`` <-> ``.rstrip``,
  ``.append`` <-> ``.extend`` ...
- ``wrong_attribute``: ``self.a`` read replaced by another attribute the class assigns
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aios_rl.errors import AiosError
from contracts import GroundTruth

from .pyparse import parse

__all__ = [
    "OPERATORS",
    "Mutant",
    "MutationError",
    "Site",
    "apply",
    "by_operator",
    "changed_lines",
    "same_module",
    "sites",
]


class MutationError(AiosError, ValueError):
    """A site does not make a valid, different module (it does not parse, or changes nothing)."""


@dataclass(frozen=True, order=True)
class Site:
    """One place an operator applies: replace bytes ``[start, end)`` of the UTF-8 source by
    ``replacement``. Sites sort by position, so enumeration order is stable."""

    start: int
    end: int
    operator: str
    replacement: str
    line: int
    """1-based line of the change."""
    function: str
    """The enclosing def, qualified (``Stack.pop``); ``""`` at module level."""
    original: str
    """The replaced text."""

    def describe(self) -> str:
        where = f"in {self.function}" if self.function else "at module level"
        return f"{self.operator}: `{self.original}` -> `{self.replacement}` {where}"


class Mutant(NamedTuple):
    """A module with one injected bug."""

    source: str
    site: Site
    ground_truth: GroundTruth


# -- the module as operators see it -------------------------------------------------------------------


class _Module:
    """A parsed module with byte offsets for its nodes and the context of each node."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.data = source.encode("utf-8")
        self.tree = parse(source)
        self.line_starts = [0] + [m.end() for m in re.finditer(b"\n", self.data)]
        self.function: dict[int, str] = {}
        """id(node) -> qualified name of the enclosing def."""
        self.parent: dict[int, ast.AST] = {}
        self.nodes: list[ast.AST] = []
        """Every node operators may touch, in source order (skipped regions left out)."""
        self._index(self.tree, "", None)

    def _index(self, node: ast.AST, qualname: str, parent: ast.AST | None) -> None:
        if parent is not None:
            self.parent[id(node)] = parent
        self.function[id(node)] = qualname
        self.nodes.append(node)
        inner = qualname
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = f"{qualname}.{node.name}" if qualname else node.name
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns", "decorator_list", "type_comment"):
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST) or _skipped(child):
                    continue
                # A def's defaults belong to the enclosing scope, its body to the def.
                scope = qualname if field == "args" else inner
                self._index(child, scope, node)

    # -- positions --------------------------------------------------------------------------------

    def offset(self, lineno: int, col: int) -> int:
        return self.line_starts[lineno - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def seg(self, node: ast.AST) -> str:
        return self.text(*self.span(node))

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self.line_starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.line_starts[mid] <= offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def site(self, node: ast.AST, start: int, end: int, operator: str, replacement: str) -> Site:
        return Site(
            start=start,
            end=end,
            operator=operator,
            replacement=replacement,
            line=self.line_of(start),
            function=self.function.get(id(node), ""),
            original=self.text(start, end),
        )

    def node_site(self, node: ast.AST, operator: str, replacement: str) -> Site:
        return self.site(node, *self.span(node), operator, replacement)

    def token_between(self, left: ast.AST, right: ast.AST, token: str) -> tuple[int, int] | None:
        """The span of ``token`` (an operator or keyword, e.g. ``<=``, ``not in``, ``and``)
        between two operands on one line: the gap may hold only it, spaces and parentheses."""
        start = self.span(left)[1]
        end = self.span(right)[0]
        gap = self.text(start, end)
        if "\n" in gap or "#" in gap or "\\" in gap:
            return None
        cleaned = gap.replace("(", " ").replace(")", " ")
        if " ".join(cleaned.split()) != token:
            return None
        lead = len(cleaned) - len(cleaned.lstrip())
        tail = len(cleaned.rstrip())
        return start + lead, start + tail  # the gap is ASCII: chars are bytes


def _skipped(node: ast.AST) -> bool:
    """Regions no operator touches: f-strings (their inner positions are unreliable before
    Python 3.12) and ``if __name__ == "__main__":`` blocks."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.If):
        test = node.test
        return (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__"
        )
    return False


def _one_line(*nodes: ast.AST) -> bool:
    return all(n.lineno == n.end_lineno for n in nodes)  # type: ignore[attr-defined]


def _is_docstring(m: _Module, node: ast.AST) -> bool:
    parent = m.parent.get(id(node))
    return isinstance(parent, ast.Expr) and isinstance(node, ast.Constant)


def _inside(m: _Module, node: ast.AST, kinds: tuple[type, ...]) -> bool:
    cur = m.parent.get(id(node))
    while cur is not None:
        if isinstance(cur, kinds):
            return True
        cur = m.parent.get(id(cur))
    return False


def _int_value(node: ast.AST) -> int | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return node.value
    return None


_ATOMIC = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)


def _paren(m: _Module, node: ast.AST) -> str:
    """The node's text, parenthesised unless it binds at least as tightly as ``+``."""
    text = m.seg(node)
    if isinstance(node, _ATOMIC):
        return text
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.FloorDiv | ast.Mod | ast.Pow
    ):
        return text
    return f"({text})"


# -- operators --------------------------------------------------------------------------------------

_CMP_TEXT: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_BOUNDARY = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_FLIPPED = {
    "<": ">",
    ">": "<",
    "<=": ">=",
    ">=": "<=",
    "==": "!=",
    "!=": "==",
    "in": "not in",
    "not in": "in",
    "is": "is not",
    "is not": "is",
}


def _compare_ops(m: _Module, node: ast.Compare) -> Iterator[tuple[int, int, str]]:
    operands = [node.left, *node.comparators]
    for k, op in enumerate(node.ops):
        text = _CMP_TEXT[type(op)]
        span = m.token_between(operands[k], operands[k + 1], text)
        if span is not None:
            yield span[0], span[1], text


def off_by_one(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if isinstance(node, ast.Compare):
            for start, end, text in _compare_ops(m, node):
                if text in _BOUNDARY:
                    yield m.site(node, start, end, "off_by_one", _BOUNDARY[text])
            continue
        value = _int_value(node)
        if value is None or not _one_line(node):
            continue
        parent = m.parent.get(id(node))
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.USub):
            parent = m.parent.get(id(parent))
        counted = (
            (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add | ast.Sub))
            or isinstance(parent, ast.Compare)
            or (isinstance(parent, ast.Subscript) and not isinstance(parent.slice, ast.Slice))
            or (
                isinstance(parent, ast.Call)
                and isinstance(parent.func, ast.Name)
                and parent.func.id == "range"
            )
        )
        if not counted:
            continue
        yield m.node_site(node, "off_by_one", str(value + 1))
        if value >= 1:
            yield m.node_site(node, "off_by_one", str(value - 1))


def flipped_comparison(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if isinstance(node, ast.Compare):
            for start, end, text in _compare_ops(m, node):
                yield m.site(node, start, end, "flipped_comparison", _FLIPPED[text])


_BINOP: dict[type, tuple[str, str]] = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
    ast.LShift: ("<<", ">>"),
    ast.RShift: (">>", "<<"),
    ast.BitAnd: ("&", "|"),
    ast.BitOr: ("|", "&"),
    ast.BitXor: ("^", "|"),
}


def _stringish(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def wrong_operator(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
            if _stringish(node.left) or _stringish(node.right):
                continue  # string concatenation and %-formatting: wrong_constant's ground
            text, repl = _BINOP[type(node.op)]
            span = m.token_between(node.left, node.right, text)
            if span is not None:
                yield m.site(node, *span, "wrong_operator", repl)
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP:
            text, repl = _BINOP[type(node.op)]
            span = m.token_between(node.target, node.value, text + "=")
            if span is not None:
                yield m.site(node, *span, "wrong_operator", repl + "=")


_SYMMETRIC_CALLS = frozenset({"max", "min", "print", "set", "frozenset", "hash"})


def swapped_arguments(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in _SYMMETRIC_CALLS:
            continue
        args = node.args
        if any(isinstance(a, ast.Starred) for a in args):
            continue
        for a, b in itertools.pairwise(args):
            if not _one_line(a, b):
                continue
            a_start, a_end = m.span(a)
            b_start, b_end = m.span(b)
            between = m.text(a_end, b_start)
            first, second = m.seg(a), m.seg(b)
            if between.strip() != "," or first == second:
                continue
            yield m.site(node, a_start, b_end, "swapped_arguments", second + between + first)


def _literal(value: object, like: str = "") -> str:
    """``value`` as a literal, in the quote style of ``like`` (the text it replaces)."""
    text = repr(value)
    if (
        isinstance(value, str)
        and like.startswith('"')
        and text.startswith("'")
        and '"' not in value
    ):
        text = '"' + text[1:-1].replace("\\'", "'") + '"'
    return text


def _changed_constant(value: object) -> object | None:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return {0: 1, 1: 0}.get(value, value * 2)
    if isinstance(value, float):
        return value * 2 if value else 1.0
    if isinstance(value, str):
        return value[:-1] if len(value) > 1 else "_" if value == " " else " "
    if isinstance(value, bytes):
        return value[:-1] if len(value) > 1 else b"_" if value == b" " else b" "
    return None


def _plain_literal(m: _Module, node: ast.AST) -> bool:
    """The node's text is one ordinary literal on one line (not an implicit concatenation)."""
    if not _one_line(node):
        return False
    text = m.seg(node)
    try:
        return ast.literal_eval(text) == node.value and not re.search(  # type: ignore[attr-defined]
            r"""['"]\s+[rbuRBU]*['"]""", text
        )
    except (ValueError, SyntaxError):
        return False


def _is_default(m: _Module, node: ast.AST) -> bool:
    parent = m.parent.get(id(node))
    if isinstance(parent, ast.UnaryOp):
        node, parent = parent, m.parent.get(id(parent))
    return isinstance(parent, ast.arguments) and (
        any(d is node for d in parent.defaults) or any(d is node for d in parent.kw_defaults)
    )


def _in_dunder_all(m: _Module, node: ast.AST) -> bool:
    cur = m.parent.get(id(node))
    while cur is not None:
        if isinstance(cur, ast.Assign):
            return any(isinstance(t, ast.Name) and t.id == "__all__" for t in cur.targets)
        cur = m.parent.get(id(cur))
    return False


def wrong_constant(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not isinstance(node, ast.Constant) or node.value is None or node.value is Ellipsis:
            continue
        if _is_docstring(m, node) or _is_default(m, node) or _in_dunder_all(m, node):
            continue
        if isinstance(node.value, str | bytes) and _inside(m, node, (ast.Raise,)):
            continue  # error messages: no test reads them
        new = _changed_constant(node.value)
        if new is None or new == node.value or not _plain_literal(m, node):
            continue
        yield m.node_site(node, "wrong_constant", _literal(new, m.seg(node)))


def missing_return(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        if isinstance(node.value, ast.Constant) and node.value.value is None:
            continue
        start = m.offset(node.lineno, node.col_offset)
        value_start = m.span(node.value)[0]
        keyword = m.text(start, value_start)
        if node.value.lineno != node.lineno or keyword.rstrip() != "return":
            continue
        yield m.site(node, start, value_start, "missing_return", "")


_SELF_NAMES = frozenset({"self", "cls"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scope_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a def's body that belong to its scope (nested defs, classes and lambdas
    left out; comprehensions kept: they read the def's locals)."""
    stack = list(getattr(func, "body", []))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES) or _skipped(child):
                continue
            stack.append(child)


def wrong_variable(m: _Module) -> Iterator[Site]:
    for func in m.nodes:
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first_def: dict[str, int] = {}
        a = func.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None and arg.arg not in _SELF_NAMES:
                first_def.setdefault(arg.arg, func.lineno)
        body = list(_scope_nodes(func))
        comp_targets: set[str] = set()
        for node in body:
            if isinstance(node, ast.comprehension):
                comp_targets.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        for node in body:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                if node.id not in comp_targets:
                    line = node.lineno
                    first_def[node.id] = min(first_def.get(node.id, line), line)
        for node in sorted(
            (n for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)),
            key=lambda n: (n.lineno, n.col_offset),
        ):
            if node.id not in first_def or node.id in comp_targets:
                continue
            if id(node) not in m.function:  # inside a skipped region
                continue
            # The other local defined most recently before this read (a parameter counts as
            # defined on the def's line).
            others = sorted(
                (
                    name
                    for name, line in first_def.items()
                    if name != node.id and (line < node.lineno or line == func.lineno)
                ),
                key=lambda name: (-first_def[name], name),
            )
            if others:
                yield m.node_site(node, "wrong_variable", others[0])


def inverted_condition(m: _Module) -> Iterator[Site]:
    tests: list[ast.AST] = []
    for node in m.nodes:
        if isinstance(node, ast.If | ast.While | ast.IfExp):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
    for test in tests:
        if not _one_line(test) or id(test) not in m.function:
            continue
        start, end = m.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            text = m.text(start, end)
            if not text.startswith("not"):
                continue
            yield m.site(test, start, end, "inverted_condition", text[3:].strip())
        elif isinstance(test, ast.BoolOp | ast.IfExp | ast.NamedExpr | ast.Lambda):
            yield m.site(test, start, end, "inverted_condition", f"not ({m.seg(test)})")
        else:
            yield m.site(test, start, end, "inverted_condition", f"not {m.seg(test)}")


def wrong_slice(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)):
            continue
        if not _one_line(node):
            continue
        s = node.slice
        value_end = m.span(node.value)[1]
        end = m.span(node)[1]
        inner = m.text(value_end, end)
        open_at = inner.find("[")
        if open_at < 0 or inner[:open_at].strip() or not inner.endswith("]"):
            continue
        start, stop = value_end + open_at + 1, end - 1
        lo = m.seg(s.lower) if s.lower is not None else None
        hi = m.seg(s.upper) if s.upper is not None else None
        if s.step is not None:
            new = f"{lo or ''}:{hi or ''}"
        elif lo is not None and hi is not None:
            new = f"{lo}:{_paren(m, s.upper)} + 1"  # type: ignore[arg-type]
        elif lo is not None:
            new = f":{lo}"
        elif hi is not None:
            new = f"{hi}:"
        else:
            continue
        yield m.site(node, start, stop, "wrong_slice", new)


def wrong_default(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not isinstance(node, ast.arguments):
            continue
        for default in [*node.defaults, *(d for d in node.kw_defaults if d is not None)]:
            if not _one_line(default):
                continue
            target = default
            sign = 1
            if (
                isinstance(default, ast.UnaryOp)
                and isinstance(default.op, ast.USub)
                and isinstance(default.operand, ast.Constant)
            ):
                target, sign = default.operand, -1
            if not isinstance(target, ast.Constant) or target.value is None:
                continue
            value = target.value
            if isinstance(value, bool):
                new: object = not value
            elif isinstance(value, int | float):
                new = sign * value + 1
            elif isinstance(value, str):
                new = value[:-1] if value else " "
            elif isinstance(value, bytes):
                new = value[:-1] if value else b" "
            else:
                continue
            yield m.node_site(default, "wrong_default", _literal(new, m.seg(target)))


def swapped_boolean(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if not isinstance(node, ast.BoolOp):
            continue
        text, repl = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        for a, b in itertools.pairwise(node.values):
            span = m.token_between(a, b, text)
            if span is not None:
                yield m.site(node, *span, "swapped_boolean", repl)


_NAME_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any"}
_ATTR_SWAPS = {
    "floor": "ceil",
    "ceil": "floor",
    "upper": "lower",
    "lower": "upper",
    "lstrip": "rstrip",
    "rstrip": "lstrip",
    "ljust": "rjust",
    "rjust": "ljust",
    "startswith": "endswith",
    "endswith": "startswith",
    "isupper": "islower",
    "islower": "isupper",
    "isdigit": "isalpha",
    "isalpha": "isdigit",
    "find": "rfind",
    "rfind": "find",
    "append": "extend",
    "extend": "append",
    "popleft": "pop",
    "appendleft": "append",
    "keys": "values",
    "values": "keys",
    "issubset": "issuperset",
    "issuperset": "issubset",
    "union": "intersection",
    "intersection": "union",
    "bisect_left": "bisect_right",
    "bisect_right": "bisect_left",
    "heappush": "heappop",
}


def wrong_builtin(m: _Module) -> Iterator[Site]:
    for node in m.nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in _NAME_SWAPS:
                yield m.node_site(node, "wrong_builtin", _NAME_SWAPS[node.id])
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and node.attr in _ATTR_SWAPS
            and _one_line(node)
        ):
            end = m.span(node)[1]
            start = end - len(node.attr)
            if m.text(start, end) == node.attr:
                yield m.site(node, start, end, "wrong_builtin", _ATTR_SWAPS[node.attr])


def wrong_attribute(m: _Module) -> Iterator[Site]:
    for cls in m.nodes:
        if not isinstance(cls, ast.ClassDef):
            continue
        attrs: set[str] = set()
        reads: list[ast.Attribute] = []
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                if isinstance(node.ctx, ast.Store):
                    attrs.add(node.attr)
                elif isinstance(node.ctx, ast.Load) and id(node) in m.function:
                    reads.append(node)
        names = sorted(attrs)
        for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):
            if node.attr not in attrs or not _one_line(node):
                continue
            end = m.span(node)[1]
            start = end - len(node.attr)
            if m.text(start, end) != node.attr:
                continue
            i = names.index(node.attr)
            for other in dict.fromkeys([names[(i + 1) % len(names)], names[i - 1]]):
                if other != node.attr:
                    yield m.site(node, start, end, "wrong_attribute", other)


OPERATORS: dict[str, Callable[[_Module], Iterator[Site]]] = {
    "off_by_one": off_by_one,
    "flipped_comparison": flipped_comparison,
    "wrong_operator": wrong_operator,
    "swapped_arguments": swapped_arguments,
    "wrong_constant": wrong_constant,
    "missing_return": missing_return,
    "wrong_variable": wrong_variable,
    "inverted_condition": inverted_condition,
    "wrong_slice": wrong_slice,
    "wrong_default": wrong_default,
    "swapped_boolean": swapped_boolean,
    "wrong_builtin": wrong_builtin,
    "wrong_attribute": wrong_attribute,
}
"""Operator name -> its site enumerator, in precedence order (when two operators make the same
change at the same place, the site is the first one's)."""


# -- enumerate and apply -------------------------------------------------------------------------------


def sites(source: str, operators: Iterable[str] | None = None) -> list[Site]:
    """Every site of ``operators`` (all by default) in ``source``, sorted by position.

    Deterministic: the same source gives the same list. Two operators making the same change
    at the same place yield one site (the earlier operator's in ``OPERATORS``). Raises
    ``SyntaxError`` when ``source`` does not parse and ``KeyError`` for an unknown operator."""
    wanted = list(OPERATORS) if operators is None else list(operators)
    for name in wanted:
        if name not in OPERATORS:
            raise KeyError(f"unknown mutation operator {name!r}; known: {', '.join(OPERATORS)}")
    module = _Module(source)
    seen: set[tuple[int, int, str]] = set()
    out: list[Site] = []
    for name in OPERATORS:
        if name not in wanted:
            continue
        for site in OPERATORS[name](module):
            key = (site.start, site.end, site.replacement)
            if key in seen or site.replacement == site.original:
                continue
            seen.add(key)
            out.append(site)
    return sorted(out)


def apply(source: str, site: Site, path: str) -> Mutant:
    """Apply ``site`` (found in ``source``) and describe the bug for a file named ``path``.

    Raises ``MutationError`` when the result does not parse or has the same AST."""
    data = source.encode("utf-8")
    if data[site.start : site.end].decode("utf-8") != site.original:
        raise MutationError(f"site {site.describe()} does not belong to this source")
    mutated = (data[: site.start] + site.replacement.encode("utf-8") + data[site.end :]).decode(
        "utf-8"
    )
    try:
        unchanged = same_module(mutated, source)
    except SyntaxError as exc:
        raise MutationError(f"{site.describe()} does not parse: {exc.msg}") from exc
    if unchanged:
        raise MutationError(f"{site.describe()} changes nothing")
    first = site.line
    last_original = first + site.original.count("\n")
    last_mutated = first + site.replacement.count("\n")
    original_snippet, mutated_snippet = _unique_snippets(
        source, mutated, first, last_original, last_mutated
    )
    truth = GroundTruth(
        path=path,
        line=first,
        operator=site.operator,
        original=original_snippet,
        mutated=mutated_snippet,
        description=site.describe(),
    )
    return Mutant(mutated, site, truth)


@functools.lru_cache(maxsize=32)
def _dump(source: str) -> str:
    return ast.dump(parse(source))


def same_module(a: str, b: str) -> bool:
    """Whether two sources parse to the same AST (formatting and comments aside). Raises
    ``SyntaxError`` when one does not parse."""
    return a == b or _dump(a) == _dump(b)


def _unique_snippets(
    original: str, mutated: str, first: int, last_original: int, last_mutated: int
) -> tuple[str, str]:
    """Whole lines ``first..last`` of both texts, widened by context lines (below first, then
    above, alternately) until each snippet occurs exactly once in its text."""
    o_lines = original.splitlines(keepends=True)
    m_lines = mutated.splitlines(keepends=True)
    above = below = 0
    while True:
        top = first - 1 - above
        o = "".join(o_lines[top : last_original + below])
        mu = "".join(m_lines[top : last_mutated + below])
        if original.count(o) == 1 and mutated.count(mu) == 1:
            return o, mu
        can_below = last_original + below < len(o_lines)
        if can_below and (below <= above or top == 0):
            below += 1
        elif top > 0:
            above += 1
        else:  # the whole texts: unique by definition
            return original, mutated


def changed_lines(old: str, new: str) -> tuple[str, str]:
    """The lines that differ between two snippets (common leading / trailing lines dropped),
    stripped: what a label shows."""
    a, b = old.splitlines(), new.splitlines()
    while a and b and a[0] == b[0]:
        a, b = a[1:], b[1:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    return " / ".join(s.strip() for s in a), " / ".join(s.strip() for s in b)


def by_operator(found: Sequence[Site]) -> dict[str, list[Site]]:
    """Sites grouped by operator (operators without sites left out), in ``OPERATORS`` order."""
    out: dict[str, list[Site]] = {}
    for name in OPERATORS:
        group = [s for s in found if s.operator == name]
        if group:
            out[name] = group
    return out
