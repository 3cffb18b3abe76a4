"""``shell import`` of the trees that used to fail it (issue 33, items 4 and 6), in the real
sandbox: a bug that loops for ever makes a task whose looping test fails under a per-test
timeout, in every run of the import and of the task's episodes; a tree with CRLF lines is
imported byte for byte and a fix made by ``git diff`` on it applies."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from aios_rl.cli import main as cli_main
from aios_rl.envs.shell.episode import RUN_TESTS, SUBMIT, ShellEpisode
from aios_rl.envs.shell.importing import ImportOptions, RejectedTask, build_task, fix_command
from aios_rl.envs.shell.localise import spectrum
from aios_rl.envs.shell.repair import RETRY_FACTOR, RepairOptions, propose, run_tests_with
from aios_rl.envs.shell.repo import apply_patch, changed_lines, lines_of, patch_of
from aios_rl.envs.shell.sandbox import ExecResult, SandboxConfig, policy_executor
from aios_rl.envs.shell.store import read_dir
from aios_rl.envs.shell.verify import failing_test_ids, run_files

SEARCH = '''
def bisect_left(xs, x):
    """The first index at which x could be inserted into sorted xs."""
    lo, hi = 0, len(xs)
    while lo <= hi:
        mid = (lo + hi) // 2
        if xs[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def contains(xs, x):
    return x in xs
'''
"""``while lo <= hi`` never ends once ``lo == hi`` (the fix: ``lo < hi``)."""

TESTS = """
import unittest

from calc.search import bisect_left, contains


class Search(unittest.TestCase):
    def test_first(self):
        self.assertEqual(bisect_left([1, 2, 3], 1), 0)

    def test_contains(self):
        self.assertTrue(contains([1, 2], 2))
"""

RETRIES = """
    def test_retries(self):
        while True:  # a retry loop that swallows every error
            try:
                self.assertEqual(bisect_left([1, 2, 3], 1), 0)
                break
            except Exception:
                continue
"""

BLOCKS_ALARMS = """
    def test_first_without_alarms(self):
        import signal

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        self.assertEqual(bisect_left([1, 2, 3], 1), 0)
"""

UNITTEST = ["{python}", "-m", "unittest", "tests.test_search"]
PYTEST = ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
PYTEST += ["-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio", "-p", "no:timeout"]
"""pytest without this venv's heavy plugins (their import takes seconds on a busy machine)."""
SCRIPT = ["{python}", "run_tests.py"]


def tree(tests: str = TESTS) -> dict[str, str]:
    return {
        "calc/__init__.py": "",
        "calc/search.py": SEARCH.lstrip(),
        "tests/test_search.py": tests.lstrip(),
        "run_tests.py": 'import unittest\n\nunittest.main(module="tests.test_search")\n',
    }


def write(root: Path, files: dict[str, str] | dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as ended:
        cli_main(argv)
    return int(ended.value.code or 0)


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    """The policy sandbox; its wall-clock limit ends a run no per-test timeout stopped, so a
    test here fails instead of hanging."""
    return policy_executor(SandboxConfig(wall_timeout_s=40))


# -- a bug that loops for ever -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "failing"),
    [
        (
            UNITTEST,
            ["tests.test_search.Search.test_first", "tests.test_search.Search.test_retries"],
        ),
        (SCRIPT, ["tests.test_search.Search.test_first", "tests.test_search.Search.test_retries"]),
        (
            PYTEST,
            [
                "tests/test_search.py::Search::test_first",
                "tests/test_search.py::Search::test_retries",
            ],
        ),
    ],
    ids=["unittest", "script", "pytest"],
)
def test_a_looping_test_fails_under_the_per_test_timeout_and_the_run_goes_on(
    sandbox,  # type: ignore[no-untyped-def]
    command: list[str],
    failing: list[str],
) -> None:
    files = tree(TESTS + RETRIES)
    result = run_tests_with(files, command, sandbox, per_test_s=1)
    assert not result.timed_out and result.blocked_reason is None, result.output[-800:]
    assert result.exit_code == 1 and failing_test_ids(result.output) == failing, result.output
    assert result.output.count("per-test timeout: the test ran longer than 1 s") >= 2
    if command is UNITTEST:  # the unsandboxed runner (check_task's) times tests the same way
        local = run_files(files, command, timeout=40, per_test=1)
        assert not local.timed_out and failing_test_ids(local.output) == failing


def test_localisation_sees_the_looping_test_fail(sandbox) -> None:  # type: ignore[no-untyped-def]
    files = tree()
    spec = spectrum(files, PYTEST, ["calc/search.py"], sandbox, per_test_s=1)
    assert spec is not None
    assert spec.failing == ["tests/test_search.py::Search::test_first"]
    assert ("calc/search.py", 4) in spec.lines["tests/test_search.py::Search::test_first"]


def test_shell_import_makes_a_task_of_a_bug_that_loops_for_ever(
    sandbox,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = tree()
    write(tmp_path / "calc", files)
    fixed = {**files, "calc/search.py": files["calc/search.py"].replace("lo <= hi", "lo < hi")}
    (tmp_path / "fix.patch").write_text(patch_of(files, fixed, ["calc/search.py"]))
    argv = [
        "shell",
        "import",
        str(tmp_path / "calc"),
        "--test-cmd",
        "python -m unittest tests.test_search",
    ]
    argv += ["--fix-patch", str(tmp_path / "fix.patch"), "--test-timeout", "1", "--max-tries", "4"]
    argv += ["--timeout", "20"]
    argv += ["--out", str(tmp_path / "out"), "--no-store", "--json"]
    assert run_cli(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failing_tests"] == ["tests.test_search.Search.test_first"]
    # Every candidate checked was offered: none timed the tests out, though some keep the loop.
    assert doc["tried"] == doc["candidates"] == 4
    (task,) = read_dir(tmp_path / "out", "real")
    assert task.test_timeout_s == 1.0 and task.known_fix is not None
    assert "per-test timeout" in task.statement  # the failure reason the policy reads
    looping = [e for e in task.candidate_edits if "`lo, hi = 1, len(xs)`" in e.label]
    assert looping and not looping[0].is_fix  # lo = 1 keeps test_first looping

    # The episode runs the tests with the task's per-test timeout: judged, never blocked.
    with ShellEpisode(task, sandbox) as episode:
        episode.step(looping[0].label)
        observation = episode.step(RUN_TESTS)
        assert "[tests: 1 failing]" in observation and "per-test timeout" in observation
        episode.step(SUBMIT)
        assert episode.result is not None
        assert episode.result.outcome == "failure", episode.result
        assert episode.result.failing_after == ["tests.test_search.Search.test_first"]


def test_a_hang_no_per_test_timeout_can_stop_still_rejects_the_tree(tmp_path: Path) -> None:
    short = policy_executor(SandboxConfig(wall_timeout_s=3))
    files = tree(TESTS + BLOCKS_ALARMS)
    options = ImportOptions(test_timeout_s=1, repair=RepairOptions(max_tries=1))
    with pytest.raises(RejectedTask, match=r"wall-clock timeout.*1-s per-test timeout stopped it"):
        build_task(files, UNITTEST, short, name="calc", source="import:calc", options=options)


class _Slow:
    """An executor whose first ``slow`` runs read as timed out (a machine busy with something
    else), then pass: what ``propose`` does with a run that timed out, without the load."""

    def __init__(self, slow: int) -> None:
        self.slow, self.calls, self.limits = slow, 0, []

    def run(self, argv: list[str], workdir: Path, *, stdin: str = "") -> ExecResult:
        self.calls += 1
        self.limits.append(float(argv[argv.index("/usr/bin/timeout") + 3]))
        late = self.calls <= self.slow
        return ExecResult(
            exit_code=124 if late else 0, output="", truncated=False, timed_out=late,
            killed_by="wall_timeout" if late else None,
            blocked_reason="wall-clock timeout" if late else None, duration_s=0.0,
        )  # fmt: skip


def test_a_candidate_run_that_timed_out_once_is_run_again_before_it_is_dropped() -> None:
    files = {"calc/ops.py": "def at_least(x, k):\n    return x > k\n"}
    ranked, options = [("calc/ops.py", 2)], RepairOptions(max_tries=1, workers=1)
    once = _Slow(slow=1)
    got = propose(files, UNITTEST, ["t"], ranked, once, options=options, timeout_s=1)
    assert once.calls == 2 and got.tried == 1 and len(got.solving) == 1
    # Once more with a longer limit: a load spike the first limit did not allow for.
    assert once.limits == [1.0, RETRY_FACTOR * 1.0] and RETRY_FACTOR > 1
    # Timed out twice: an edit that makes the tests loop, not offered.
    twice = _Slow(slow=2)
    got = propose(files, UNITTEST, ["t"], ranked, twice, options=options, timeout_s=1)
    assert twice.calls == 2 and got.solving == [] and got.edits == []


# -- bytes as they are -------------------------------------------------------------------------

CRLF_OPS = (
    b"def count_at_least(xs, k):\r\n"
    b'    """How many of xs are at least k."""\r\n'
    b"    return sum(1 for x in xs if x > k)\r\n"
)
MIXED = b"def one():\n    return 1\r\n\x0c\ndef two():\n    return 2"
"""One CRLF line, a form feed line, no newline at the end."""

CRLF_TESTS = textwrap.dedent(
    """
    import unittest

    from calc.more import one, two
    from calc.ops import count_at_least


    class Ops(unittest.TestCase):
        def test_boundary(self):
            self.assertEqual(count_at_least([1, 2, 3], 2), 2)

        def test_more(self):
            self.assertEqual(one() + two(), 3)
    """
).lstrip()


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org")
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    return subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-C", str(repo), *args],
        input=stdin,
        check=True,
        capture_output=True,
        env=env,
    ).stdout


def test_shell_import_keeps_crlf_bytes_and_a_git_diff_fix_applies(
    sandbox,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    repo = tmp_path / "calc"
    buggy = {
        "calc/__init__.py": b"",
        "calc/ops.py": CRLF_OPS,
        "calc/more.py": MIXED,
        "tests/test_ops.py": CRLF_TESTS.encode(),
    }
    write(repo, buggy)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "buggy")
    fixed = {
        "calc/ops.py": CRLF_OPS.replace(b"x > k", b"x >= k"),
        "calc/more.py": MIXED.replace(b"return 2", b"return 2  # two"),
    }
    write(repo, fixed)
    (tmp_path / "fix.patch").write_bytes(git(repo, "diff"))
    assert b"x >= k)\r\n" in (tmp_path / "fix.patch").read_bytes()
    git(repo, "checkout", "--", ".")

    argv = ["shell", "import", str(repo), "--test-cmd", "python -m unittest tests.test_ops"]
    argv += ["--fix-patch", str(tmp_path / "fix.patch"), "--max-tries", "2"]
    argv += ["--out", str(tmp_path / "out"), "--no-store", "--json"]
    assert run_cli(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failing_tests"] == ["tests.test_ops.Ops.test_boundary"]
    (task,) = read_dir(tmp_path / "out", "real")
    assert {p: t.encode() for p, t in task.files.items()} == buggy  # the tree's bytes
    written = tmp_path / "out" / "real" / task.task_id / "files"
    assert {p: (written / p).read_bytes() for p in buggy} == buggy
    assert task.known_fix is not None
    assert {p: t.encode() for p, t in task.known_fix.files.items()} == fixed
    assert task.known_fix.lines == ["calc/more.py:5", "calc/ops.py:3"]
    # The fix the task keeps applies to the real tree, as the user's own did.
    git(repo, "apply", "--check", "-", stdin=task.known_fix.patch.encode())

    # Materialised in the sandbox, fixed by the oracle's command, judged: the same bytes.
    command = fix_command(task)
    assert command is not None
    with ShellEpisode(task, sandbox) as episode:
        assert (episode.workdir / "calc/ops.py").read_bytes() == CRLF_OPS
        episode.step(command)
        assert {p: (episode.workdir / p).read_bytes() for p in fixed} == fixed
        episode.step(SUBMIT)
        assert episode.result is not None and episode.result.outcome == "success"


@pytest.mark.parametrize(
    "before",
    [
        "a = 1\r\nb = 2\r\nc = 3\r\n",
        "a = 1\nb = 2\r\n\x0c\nc = 3",
        "a = 1\rb = 2\nc = 3\n",
        "a = 1\u2028x\nb = 2\nc = 3\n",
    ],
    ids=["crlf", "mixed-no-final-newline", "lone-cr", "line-separator"],
)
def test_patches_keep_line_endings_and_number_lines_as_git_does(before: str) -> None:
    after = before.replace("b = 2", "b = 20")
    patched = apply_patch({"m.py": before}, patch_of({"m.py": before}, {"m.py": after}, ["m.py"]))
    assert patched == {"m.py": after}
    line = lines_of(before).index(next(x for x in lines_of(before) if "b = 2" in x)) + 1
    assert changed_lines(before, after) == [line]
    assert "".join(lines_of(before, keepends=True)) == before
