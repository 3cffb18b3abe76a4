"""Architecture rules, checked on the source with ``ast``:

- no subject is spelled outside ``contracts/`` (services ask a ``Names`` for it);
- no service imports another service's code;
- ``contracts/`` imports only msgspec and the standard library;
- only the bus kit and the state room import ``nats``;
- no two modules of ``aios_rl/`` import each other, directly or through others, at module level.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import contracts

REPO = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("aios_rl", "services", "bench")
SUBJECT_PREFIXES = (
    "episode.",
    "rollout.",
    "policy.",
    "rail.",
    "teacher.",
    "campaign.",
    "checkpoint.",
    "trainer.",
    "replay.",
    "dlq.",
    "aios.",
)

ALLOWED_SUBJECT_LIKE: dict[tuple[str, str], str] = {
    (
        "services/reward/handlers.py",
        "episode.rewarded",
    ): "a structlog event name (log.debug('episode.rewarded', ...)), never used as a subject",
}
"""(file, literal) -> why this subject-like string is not a subject. Keep it small."""

SCHEMA_NAMES = frozenset(contracts.registered())
"""Schema names (``episode.v1``, ...) start like subjects but name a contract, not a subject."""


def python_files(*dirs: str) -> Iterator[Path]:
    for d in dirs:
        root = REPO / d
        if root.is_dir():
            yield from sorted(p for p in root.rglob("*.py") if ".venv" not in p.parts)


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# -- subjects ----------------------------------------------------------------------------------------


def subject_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string constant that starts like a subject of the stack.

    Covers plain strings, the literal parts of f-strings (``f"episode.{stage}"``) and pieces of
    concatenations; docstrings start with prose, so they do not match."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(SUBJECT_PREFIXES)
            and node.value not in SCHEMA_NAMES
        ):
            found.append((node.lineno, node.value))
    return found


def test_subject_scanner_finds_literals() -> None:
    src = (
        'A = "episode.completed.shell"\n'
        "def f(env):\n"
        '    """Publishes on episode.completed: prose does not match."""\n'
        '    return f"rollout.job.{env}", "dlq." + env, "service.ready", "aios-rl", "episode.v1"\n'
    )
    assert subject_literals(ast.parse(src)) == [
        (1, "episode.completed.shell"),
        (4, "rollout.job."),
        (4, "dlq."),
    ]


def test_no_subject_literal_outside_contracts() -> None:
    files = list(python_files(*SCANNED_DIRS))
    assert REPO / "services" / "reward" / "handlers.py" in files, "the scan missed the services"
    seen: set[tuple[str, str]] = set()
    offending = []
    for path in files:
        for line, text in subject_literals(parse(path)):
            key = (rel(path), text)
            if key in ALLOWED_SUBJECT_LIKE:
                seen.add(key)
                continue
            offending.append(f"{rel(path)}:{line}: {text!r}")
    assert not offending, (
        "subject strings spelled outside contracts/ (build them with contracts.Names):\n  "
        + "\n  ".join(offending)
    )
    stale = sorted(set(ALLOWED_SUBJECT_LIKE) - seen)
    assert not stale, f"allowlist entries that no longer match anything (remove them): {stale}"


# -- service isolation -----------------------------------------------------------------------------------


def imported_modules(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in ``tree``, relative imports resolved against
    ``module``. ``from x import y`` yields both ``x`` and ``x.y`` (``y`` may be a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            out.append((node.lineno, target))
            out += [(node.lineno, f"{target}.{a.name}") for a in node.names if a.name != "*"]
    return out


def module_name(path: Path) -> tuple[str, bool]:
    """Dotted module name of a file under the repo, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def cross_service_imports(service: str, sources: dict[Path, str]) -> list[str]:
    """Imports of ``services.<other>`` in the given files of ``services/<service>/``."""
    bad = set()
    for path, text in sources.items():
        mod, is_pkg = module_name(path)
        for line, target in imported_modules(ast.parse(text), mod, is_pkg):
            parts = target.split(".")
            if parts[0] == "services" and len(parts) > 1 and parts[1] != service:
                bad.add(f"{rel(path)}:{line}: imports {target}")
    return sorted(bad)


def test_import_resolution() -> None:
    tree = ast.parse(
        "from .logic import fuse\nfrom .. import comparison\nfrom ..comparison.logic import x\n"
        "import services.rail\nfrom services import replay\nfrom aios_rl.bus import Bus\n"
    )
    targets = {t for _, t in imported_modules(tree, "services.reward.handlers", False)}
    assert {
        "services.reward.logic",
        "services.comparison",
        "services.comparison.logic",
        "services.rail",
        "services.replay",
        "aios_rl.bus",
    } <= targets
    in_init = {
        t
        for _, t in imported_modules(
            ast.parse("from .main import build\n"), "services.reward", True
        )
    }
    assert "services.reward.main" in in_init


def test_cross_service_check_catches_an_import() -> None:
    probe = REPO / "services" / "reward" / "probe.py"
    src = "from ..comparison import logic\nfrom . import logic as own\nimport services.rail.main\n"
    assert cross_service_imports("reward", {probe: src}) == [
        "services/reward/probe.py:1: imports services.comparison",
        "services/reward/probe.py:1: imports services.comparison.logic",
        "services/reward/probe.py:3: imports services.rail.main",
    ]


def service_packages() -> list[Path]:
    return sorted(
        p for p in (REPO / "services").iterdir() if p.is_dir() and (p / "__init__.py").exists()
    )


def test_services_exist_to_check() -> None:
    assert "reward" in [p.name for p in service_packages()]


@pytest.mark.parametrize("service", service_packages(), ids=lambda p: p.name)
def test_no_service_imports_another_service(service: Path) -> None:
    files = list(python_files(rel(service)))
    assert files
    bad = cross_service_imports(service.name, {p: p.read_text(encoding="utf-8") for p in files})
    assert not bad, (
        f"services/{service.name} imports another service's code (talk over the bus):\n  "
        + "\n  ".join(bad)
    )


# -- contracts' dependencies ----------------------------------------------------------------------------

ALLOWED_CONTRACT_IMPORTS = {"msgspec", "contracts", "__future__"}


def test_contracts_import_only_msgspec_and_the_standard_library() -> None:
    files = list(python_files("contracts"))
    assert REPO / "contracts" / "codec.py" in files
    bad = []
    for path in files:
        tree = parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in ALLOWED_CONTRACT_IMPORTS and top not in sys.stdlib_module_names:
                    bad.append(f"{rel(path)}:{node.lineno}: imports {top}")
    assert not bad, (
        "contracts/ may import only msgspec and the standard library:\n  " + "\n  ".join(bad)
    )


# -- who may speak to NATS directly ---------------------------------------------------------------------

NATS_ROOMS = ("aios_rl/bus/", "aios_rl/state/")
"""The bus kit and the state room: the only code that imports ``nats``; everything else goes
through them (typed messages, typed state, one error tree each)."""


def nats_imports(tree: ast.Module) -> list[int]:
    """Lines of every ``import nats...`` / ``from nats... import`` in ``tree``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name == "nats" or a.name.startswith("nats.") for a in node.names
        ):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module is not None
            and (node.module == "nats" or node.module.startswith("nats."))
        ):
            lines.append(node.lineno)
    return lines


def test_nats_import_scanner_finds_imports() -> None:
    src = "import nats\nimport nats.errors as e\nfrom nats.js import api\nimport natsort\nfrom . import nats\n"
    assert nats_imports(ast.parse(src)) == [1, 2, 3]


def test_only_the_bus_kit_and_the_state_room_import_nats() -> None:
    files = list(python_files("aios_rl", "services"))
    assert REPO / "aios_rl" / "bus" / "_bus.py" in files, "the scan missed the bus kit"
    bad = [
        f"{rel(path)}:{line}"
        for path in files
        if not rel(path).startswith(NATS_ROOMS)
        for line in nats_imports(parse(path))
    ]
    assert not bad, (
        "nats imported outside aios_rl/bus and aios_rl/state (use the kit or the room):\n  "
        + "\n  ".join(bad)
    )


# -- import cycles ---------------------------------------------------------------------------------------


def _module_level(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node that runs when the module is imported: the module's statements, their blocks
    (``if``, ``try``, ``with``, ``if TYPE_CHECKING:`` too) and class bodies; not what is inside
    a function, which runs only when called."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield node
        yield from _module_level(node)


def module_imports(
    tree: ast.Module, module: str, is_package: bool, known: set[str]
) -> dict[str, int]:
    """The modules of ``known`` that importing ``module`` imports, at module level, with the
    line of the first import of each.

    ``from x import y`` is ``x.y`` when that is a module, else ``x``. Importing ``a.b.c`` runs
    the packages ``a`` and ``a.b`` first, so they count too, except ``module``'s own packages:
    those are running already (a package importing its submodules is no cycle), unless
    ``module`` imports a name from one of them."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    own = {".".join(package[:i]) for i in range(1, len(package) + 1)}
    targets: list[tuple[int, str]] = []
    for node in _module_level(tree):
        if isinstance(node, ast.Import):
            targets += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for a in node.names:
                sub = f"{source}.{a.name}"
                targets.append((node.lineno, sub if sub in known else source))
    out: dict[str, int] = {}
    for line, target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in known and name != module and (name not in own or name == target):
                out.setdefault(name, line)
    return out


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """module -> {imported module: line} for ``sources`` (module -> (text, is_package))."""
    known = set(sources)
    return {
        module: module_imports(ast.parse(text), module, is_package, known)
        for module, (text, is_package) in sources.items()
    }


def test_cycle_finder_sees_a_cycle_and_ignores_imports_in_functions() -> None:
    sources = {
        "pkg": ("from . import a\n", True),
        "pkg.a": ("from .b import x\n", False),
        "pkg.b": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n",
            False,
        ),
        "pkg.c": ("from . import a\n\ndef late():\n    from . import d\n", False),
        "pkg.d": ("import pkg.c\n", False),
        "pkg.e": ("class E:\n    from pkg import a\n", False),
        "pkg.f": ("from pkg import something_in_init\n", False),
    }
    graph = import_graph(sources)
    assert graph["pkg.c"] == {"pkg.a": 1}  # the import in late() does not count
    assert graph["pkg.e"] == {"pkg.a": 2}  # a package importing its own: no edge to itself
    assert graph["pkg.f"] == {"pkg": 1}  # a name from the package's __init__
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


@pytest.mark.parametrize(
    ("top", "probe"), [("aios_rl", "aios_rl.state._handles"), ("bench", "bench._kernel")]
)
def test_no_import_cycle_among_the_modules_of(top: str, probe: str) -> None:
    sources = {}
    for path in python_files(top):
        module, is_package = module_name(path)
        sources[module] = (path.read_text(encoding="utf-8"), is_package)
    assert probe in sources, f"the scan missed {probe}"
    graph = import_graph(sources)
    cycles = strongly_connected(graph)
    report = [
        "  "
        + ", ".join(cycle)
        + "\n"
        + "\n".join(
            f"    {m} imports {other} (line {line})"
            for m in cycle
            for other, line in sorted(graph[m].items())
            if other in cycle
        )
        for cycle in cycles
    ]
    assert not cycles, (
        f"modules of {top}/ that import each other at module level (move what they share to "
        "the module it belongs to, or to a small one both import):\n" + "\n".join(report)
    )


# -- benchmarks run the product's loop ---------------------------------------------------------------

LOOP_PARTS = (
    "aios_rl.envs.loop",
    "aios_rl.envs.runner",
    "aios_rl.rollouts.epoch",
    "aios_rl.rail.plan",
    "aios_rl.student.train",
    "aios_rl.comparison",
    "services.campaign",
    "services.runner",
    "services.trainer",
    "services.comparison",
    "services.sampler.logic",
)
"""What a benchmark would import to run episodes, epochs, updates or verdicts of its own: every
benchmark that trains goes through the in-process kernel (``aios_rl.local``) instead."""
UPDATE_BENCHES = {"bench/trainer.py", "bench/threads.py", "bench/lm.py"}
"""They time the update function itself (bare updates against the trainer service; the lm
student's token-level update in bench/lm.py)."""


def loop_imports(path: Path) -> list[str]:
    module, is_package = module_name(path)
    return sorted(
        f"{rel(path)}:{line}: imports {target}"
        for line, target in imported_modules(parse(path), module, is_package)
        if any(target == p or target.startswith(p + ".") for p in LOOP_PARTS)
    )


def test_the_loop_scanner_sees_an_import_of_the_campaigns_planner(tmp_path: Path) -> None:
    probe = REPO / "bench" / "_probe_loop.py"
    probe.write_text("from aios_rl.rollouts.epoch import plan_jobs\nimport aios_rl.local\n")
    try:
        assert loop_imports(probe) == [
            "bench/_probe_loop.py:1: imports aios_rl.rollouts.epoch",
            "bench/_probe_loop.py:1: imports aios_rl.rollouts.epoch.plan_jobs",
        ]
    finally:
        probe.unlink()


def test_benchmarks_train_through_the_kernel_not_a_loop_of_their_own() -> None:
    files = [p for p in python_files("bench") if rel(p) not in UPDATE_BENCHES]
    assert REPO / "bench" / "learning.py" in files, "the scan missed the benchmarks"
    found = [hit for p in files for hit in loop_imports(p)]
    assert not found, (
        "benchmarks that reach past the kernel (aios_rl.local) for a part of the loop:\n  "
        + "\n  ".join(found)
    )
