"""Users' code as task files: a directory or a git commit snapshotted into ``path -> text``, and
the patches between two snapshots. No NATS here; git is run as a host program (it only reads
the repository: ``ls-files``, ``ls-tree``, ``cat-file``, ``rev-list``, ``log``; no hook runs).

What a snapshot takes
---------------------
Text files (UTF-8) under the root, except what the ignore rules drop: in a git work tree the
files git would track (``git ls-files --cached --others --exclude-standard``, so ``.gitignore``
holds), and always the :data:`IGNORED_DIRS` and :data:`IGNORED_SUFFIXES` (caches, virtualenvs,
build output, bytecode). A binary file is left out and reported (a task's files are text). A
symlink whose target stays in the tree becomes a copy of its target; one that leaves the tree is
an error (:class:`SnapshotError`): a task never carries a host path. Limits
(:class:`SnapshotLimits`) bound the file count, each file's size and the total; going over one is
an error that names it, never a silent cut.

A file's text is its bytes decoded as UTF-8, nothing translated: CRLF and lone CR line endings,
form feeds and a missing last newline stay as they are, in the snapshot, in patches made and
applied here, and in the files a task writes back (:func:`~.verify.materialize`). Lines are
what git counts: the text up to each ``\\n`` (:func:`lines_of`).
"""

from __future__ import annotations

import difflib
import os
import posixpath
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from aios_rl.errors import AiosError

from .verify import materialize

__all__ = [
    "IGNORED_DIRS",
    "IGNORED_SUFFIXES",
    "Commit",
    "Snapshot",
    "SnapshotError",
    "SnapshotLimits",
    "apply_patch",
    "changed_lines",
    "commits",
    "diff",
    "is_git",
    "is_test_path",
    "lines_of",
    "patch_of",
    "resolve",
    "snapshot_commit",
    "snapshot_dir",
]

IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "build",
        "dist",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".idea",
        ".vscode",
    }
)
"""Directories never snapshotted (also any ``*.egg-info``)."""

IGNORED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".o", ".a", ".dylib", ".whl", ".egg")
"""Files never snapshotted."""


class SnapshotError(AiosError, ValueError):
    """The tree cannot become a task: a limit, a symlink out of it, no such commit, not git."""


@dataclass(frozen=True)
class SnapshotLimits:
    """Bounds of one snapshot (a task is held whole in the Object Store and in each episode's
    task directory)."""

    max_files: int = 2000
    max_file_bytes: int = 512 << 10
    max_total_bytes: int = 8 << 20


@dataclass
class Snapshot:
    """The text files of a tree, and what was left out with why."""

    files: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Commit:
    sha: str
    parent: str
    subject: str


def is_test_path(path: str) -> bool:
    """Whether ``path`` is test code a policy must leave alone: ``test_*.py``, ``*_test.py``,
    ``*tests.py`` (``tests.py``, ``run_tests.py``, ``runtests.py``), ``conftest.py``, or anything
    under a ``test``/``tests``/``testing`` directory."""
    p = PurePosixPath(path)
    if any(part in ("test", "tests", "testing") for part in p.parts[:-1]):
        return True
    name = p.name
    return name == "conftest.py" or (
        name.endswith(".py")
        and (name.startswith("test_") or name.endswith(("_test.py", "tests.py")))
    )


def _ignored(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    if any(p in IGNORED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
        return True
    return parts[-1].endswith(IGNORED_SUFFIXES) or parts[-1] == ".DS_Store"


class _Budget:
    def __init__(self, limits: SnapshotLimits) -> None:
        self.limits = limits
        self.total = 0

    def admit(self, files: dict[str, str], rel: str, data: bytes, skipped: dict[str, str]) -> None:
        if len(data) > self.limits.max_file_bytes:
            raise SnapshotError(
                f"{rel} is {len(data)} bytes, over the {self.limits.max_file_bytes}-byte limit "
                "of one file (ignore it, or raise the limit)"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            skipped[rel] = "binary (not UTF-8 text)"
            return
        if "\x00" in text:
            skipped[rel] = "binary (NUL bytes)"
            return
        self.total += len(data)
        if self.total > self.limits.max_total_bytes:
            raise SnapshotError(
                f"the tree holds more than {self.limits.max_total_bytes} bytes of text"
            )
        if len(files) >= self.limits.max_files:
            raise SnapshotError(f"the tree holds more than {self.limits.max_files} files")
        files[rel] = text


# -- git -------------------------------------------------------------------------------------------


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def _git(repo: Path, *args: str, input_: bytes | None = None) -> bytes:
    env = _git_env()
    proc = subprocess.run(
        ["git", "-c", "core.quotepath=off", "-C", str(repo), *args],
        input=input_,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise SnapshotError(
            f"git {' '.join(args[:2])} failed in {repo}: "
            f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}"
        )
    return proc.stdout


def is_git(path: Path) -> bool:
    """Whether ``path`` is the top of a git work tree."""
    try:
        top = _git(path, "rev-parse", "--show-toplevel").decode().strip()
    except (SnapshotError, OSError):
        return False
    return Path(top).resolve() == Path(path).resolve()


def resolve(repo: Path, rev: str) -> str:
    """The full sha of ``rev`` in ``repo``. Raises ``SnapshotError``."""
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()


def commits(repo: Path, *, rev: str = "HEAD", since: str = "", limit: int = 0) -> list[Commit]:
    """Non-merge commits reachable from ``rev`` that have a parent, newest first (``since``: a git
    date, e.g. ``2024-01-01`` or ``3 months ago``; ``limit``: at most that many)."""
    args = ["log", "--no-merges", "--format=%H%x00%P%x00%s", rev]
    if since:
        args.insert(1, f"--since={since}")
    out: list[Commit] = []
    for line in _git(repo, *args).decode("utf-8", "replace").splitlines():
        sha, parents, subject = line.split("\x00", 2)
        if not parents:
            continue  # the root commit: nothing before it
        out.append(Commit(sha, parents.split()[0], subject))
        if limit and len(out) >= limit:
            break
    return out


def _inside(rel: str, target: str) -> str | None:
    """The tree path a symlink at ``rel`` pointing to ``target`` names, or ``None`` when it
    leaves the tree."""
    if target.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        return None
    return joined


def snapshot_commit(repo: Path, rev: str, limits: SnapshotLimits | None = None) -> Snapshot:
    """The tree of ``rev`` in ``repo`` (see the module docstring). Raises ``SnapshotError``."""
    sha = resolve(repo, rev)
    entries: list[tuple[str, str, str]] = []  # mode, object, path
    for record in _git(repo, "ls-tree", "-r", "-z", "--full-tree", sha).split(b"\x00"):
        if not record:
            continue
        meta, path = record.decode("utf-8", "replace").split("\t", 1)
        mode, kind, obj = meta.split()
        if kind == "blob" and not _ignored(path):
            entries.append((mode, obj, path))
    blobs = _cat_blobs(repo, [obj for _, obj, _ in entries])
    by_path = {path: (mode, blobs[obj]) for mode, obj, path in entries}
    files: dict[str, str] = {}
    skipped: dict[str, str] = {}
    budget = _Budget(limits or SnapshotLimits())
    for path in sorted(by_path):
        mode, data = by_path[path]
        if mode == "120000":
            target = _inside(path, data.decode("utf-8", "replace"))
            if target is None:
                raise SnapshotError(f"{path} is a symlink out of the tree at {sha[:12]}")
            if target not in by_path or by_path[target][0] == "120000":
                skipped[path] = "symlink to a directory or to a missing file"
                continue
            data = by_path[target][1]
        budget.admit(files, path, data, skipped)
    return Snapshot(files, skipped)


def _cat_blobs(repo: Path, objects: Sequence[str]) -> dict[str, bytes]:
    unique = list(dict.fromkeys(objects))
    if not unique:
        return {}
    out = _git(repo, "cat-file", "--batch", input_=("\n".join(unique) + "\n").encode())
    blobs: dict[str, bytes] = {}
    at = 0
    for obj in unique:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        size = int(header[2])
        blobs[obj] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return blobs


# -- a directory -----------------------------------------------------------------------------------


def _walk(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        kept = []
        for d in sorted(dirnames):
            if d in IGNORED_DIRS or d.endswith(".egg-info"):
                continue
            if (Path(dirpath) / d).is_symlink():
                filenames.append(d)  # judged as a symlink below
                continue
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            yield (rel_dir / name).as_posix()


def snapshot_dir(root: Path, limits: SnapshotLimits | None = None) -> Snapshot:
    """The text files under ``root`` (see the module docstring). Raises ``SnapshotError``."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise SnapshotError(f"{root} is not a directory")
    if is_git(root):
        listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
        names = sorted({n for n in listed.decode("utf-8", "replace").split("\x00") if n})
    else:
        names = list(_walk(root))
    files: dict[str, str] = {}
    skipped: dict[str, str] = {}
    budget = _Budget(limits or SnapshotLimits())
    for rel in names:
        if _ignored(rel):
            continue
        path = root / rel
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root):
                raise SnapshotError(f"{rel} is a symlink out of the tree (to {target})")
            if not target.is_file():
                skipped[rel] = "symlink to a directory or to a missing file"
                continue
        elif not path.is_file():
            if path.exists():
                skipped[rel] = "not a regular file"
            continue  # listed by git but deleted in the work tree
        budget.admit(files, rel, path.read_bytes(), skipped)
    return Snapshot(files, skipped)


# -- patches ---------------------------------------------------------------------------------------


def lines_of(text: str, *, keepends: bool = False) -> list[str]:
    r"""``text``'s lines as git numbers them: split at ``\n`` only, a ``\r`` before it kept in
    the line (``str.splitlines`` also splits at a lone ``\r``, a form feed, ``\x1c``, U+2028
    ...; Python's own line numbers differ from git's only at a lone ``\r``). No empty last
    line for text that ends in ``\n``."""
    if not text:
        return []
    parts = text.split("\n")
    if keepends:
        out = [p + "\n" for p in parts[:-1]]
        return [*out, parts[-1]] if parts[-1] else out
    return parts[:-1] if parts[-1] == "" else parts


def diff(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Paths whose text differs (added, removed or changed), sorted."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def patch_of(before: Mapping[str, str], after: Mapping[str, str], paths: Sequence[str]) -> str:
    """A unified diff (``a/``, ``b/``, three lines of context) of ``paths`` from ``before`` to
    ``after``."""
    out: list[str] = []
    for path in paths:
        old, new = before.get(path), after.get(path)
        out += difflib.unified_diff(
            lines_of(old or "", keepends=True),
            lines_of(new or "", keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out
    )


def changed_lines(before: str, after: str) -> list[int]:
    """Lines of ``before`` (1-based) that ``after`` changes or deletes, or after which it inserts
    (an insertion at the very top counts as line 1)."""
    lines: list[int] = []
    matcher = difflib.SequenceMatcher(a=lines_of(before), b=lines_of(after), autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i1 == i2:  # an insertion between lines i1 and i1 + 1
            lines += sorted({max(1, i1), i1 + 1} if i1 else {1})
        else:
            lines += range(i1 + 1, i2 + 1)
    return sorted(set(lines))


_HUNK_PATH = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)


def apply_patch(files: Mapping[str, str], patch: str) -> dict[str, str]:
    """``files`` with a unified diff applied (``git apply``, in a scratch directory, so the same
    rules as git: ``-p1``, exact context, bytes as they are: a CRLF line in the patch matches a
    CRLF line in the file). Raises ``SnapshotError`` when it does not apply."""
    with tempfile.TemporaryDirectory(prefix="aios-patch-") as tmp:
        root = Path(tmp)
        materialize(files, root)
        (root / ".fix.patch").write_bytes(patch.encode("utf-8"))
        proc = subprocess.run(
            ["git", "apply", "--whitespace=nowarn", ".fix.patch"],
            cwd=root,
            capture_output=True,
            env=_git_env(),
            timeout=60,
            check=False,
        )
        if proc.returncode != 0:
            raise SnapshotError(
                "the fix does not apply to the tree: "
                + proc.stderr.decode("utf-8", "replace").strip()[:400]
            )
        out = dict(files)
        touched = {p for p in _HUNK_PATH.findall(patch) if p != "/dev/null"}
        for path in touched | {p for p in files if not (root / p).exists()}:
            target = root / path
            if target.is_file():
                out[path] = target.read_bytes().decode("utf-8")
            else:
                out.pop(path, None)
        return out
