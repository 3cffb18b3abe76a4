"""Users' repositories as tasks (``aios-rl shell import`` / ``shell mine``): a small git history
built here, mined in the real sandbox, gives exactly its two real bug fixes (not the docs commit,
the refactor or the flaky fix); a generated candidate solves the bug an operator can express; a
known fix never becomes a candidate; the tasks run through the real runner on a real
nats-server; and the pure parts (snapshots, patches, localisation, commands) on their own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus
from aios_rl.cli import main as cli_main
from aios_rl.envs.shell.assemble import failure_reasons, pointed_functions
from aios_rl.envs.shell.episode import SUBMIT
from aios_rl.envs.shell.importing import (
    Imported,
    MineReport,
    RejectedTask,
    build_task,
    fix_command,
    mine,
    normalise_command,
    split_for,
)
from aios_rl.envs.shell.localise import Spectrum, ochiai, traceable
from aios_rl.envs.shell.policies import oracle_policy
from aios_rl.envs.shell.repair import run_tests_with
from aios_rl.envs.shell.repo import (
    SnapshotError,
    SnapshotLimits,
    apply_patch,
    changed_lines,
    is_test_path,
    patch_of,
    snapshot_commit,
    snapshot_dir,
)
from aios_rl.envs.shell.sandbox import LocalExecutor, SandboxConfig, policy_executor
from aios_rl.envs.shell.store import ShellTaskStore, read_dir
from aios_rl.envs.shell.verify import apply_edit, failing_test_ids
from aios_rl.stack.embedded import reader
from contracts import ActRequest, Names, ShellTask

from .test_shell_runner import build, job, policy_service, run_jobs, settings


def run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as ended:
        cli_main(argv)
    return int(ended.value.code or 0)


TEST_CMD = ["{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider"]

OPS = '''
def count_at_least(xs, k):
    """How many of xs are at least k."""
    return sum(1 for x in xs if x {cmp} k)


def words(s):
    """How many words s has."""
    return len(s.split({sep}))


def mean(xs):
    {mean}


def tags(s):
    """The distinct words of s."""
    return {tags}
'''

TESTS = """
from calc.ops import count_at_least, mean, words


def test_count_none():
    assert count_at_least([1, 2], 5) == 0


def test_words():
    assert words("a b c") == 3


def test_mean():
    assert mean([1, 2, 3]) == 2
"""

BOUNDARY = """

def test_count_boundary():
    assert count_at_least([1, 2, 3], 2) == 2
"""

SPACES = """

def test_words_empty():
    assert words("") == 0


def test_words_spaces():
    assert words("a  b") == 2
"""

ONE_PASS = "total = sum(xs)\n    return total / len(xs)"


def ops(
    cmp: str = ">",
    sep: str = '" "',
    mean: str = "return sum(xs) / len(xs)",
    tags: str = "s.split()",
) -> str:
    return OPS.format(cmp=cmp, sep=sep, mean=mean, tags=tags)


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "GIT_AUTHOR_DATE": "2024-01-01T00:00:00",
        "GIT_COMMITTER_DATE": "2024-01-01T00:00:00",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, text=True
    ).stdout


def commit(repo: Path, message: str, files: Mapping[str, str]) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def hash_order_words() -> tuple[list[str], str]:
    """Words whose set iterates from another word under ``PYTHONHASHSEED`` 0 than under 1, and
    the first one under 0: a test expecting it passes in the first run and fails in the
    second (what mining's two runs with different hash seeds must catch)."""
    probe = "import sys; print(next(iter(set(sys.argv[1:]))))"
    for n in range(3, 40):
        words = [f"w{n}x{i}" for i in range(5)]
        firsts = [
            subprocess.run(
                [sys.executable, "-c", probe, *words],
                env={**os.environ, "PYTHONHASHSEED": str(seed)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            for seed in (0, 1)
        ]
        if firsts[0] != firsts[1]:
            return words, firsts[0]
    raise AssertionError("no word set iterates differently under hash seeds 0 and 1")


def build_repo(repo: Path) -> dict[str, str]:
    """The history: a bug an operator can express fixed, docs, a refactor, a bug no operator
    expresses fixed, a flaky "fix". Returns the commits by role."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    shas["initial"] = commit(
        repo,
        "initial",
        {
            "calc/__init__.py": "",
            "calc/ops.py": ops(),
            "tests/test_ops.py": TESTS,
            "README.md": "x",
        },
    )
    shas["fix_boundary"] = commit(
        repo,
        "count_at_least counts values equal to k",
        {"calc/ops.py": ops(cmp=">="), "tests/test_ops.py": TESTS + BOUNDARY},
    )
    shas["docs"] = commit(repo, "docs", {"README.md": "calc: small helpers\n"})
    shas["refactor"] = commit(repo, "mean: one pass", {"calc/ops.py": ops(cmp=">=", mean=ONE_PASS)})
    shas["fix_spaces"] = commit(
        repo,
        "words: empty strings and runs of spaces",
        {
            "calc/ops.py": ops(cmp=">=", sep="", mean=ONE_PASS),
            "tests/test_ops.py": TESTS + BOUNDARY + SPACES,
        },
    )
    words, first = hash_order_words()
    flaky_test = f"""

def test_tags_are_a_set_in_order():
    from calc.ops import tags

    found = tags({" ".join(words)!r})
    assert isinstance(found, set)
    assert next(iter(found)) == {first!r}
"""
    shas["flaky"] = commit(
        repo,
        "tags: distinct words",
        {
            "calc/ops.py": ops(cmp=">=", sep="", mean=ONE_PASS, tags="set(s.split())"),
            "tests/test_ops.py": TESTS + BOUNDARY + SPACES + flaky_test,
        },
    )
    return shas


@pytest.fixture(scope="module")
def sandbox():  # type: ignore[no-untyped-def]
    return policy_executor(SandboxConfig(wall_timeout_s=60))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("history") / "calc"
    return repo, build_repo(repo)


@pytest.fixture(scope="module")
def mined(history: tuple[Path, dict[str, str]], sandbox) -> MineReport:  # type: ignore[no-untyped-def]
    repo, _ = history
    return mine(repo, TEST_CMD, sandbox)


def by_commit(report: MineReport) -> dict[str, Imported]:
    return {g.task.known_fix.commit: g for g in report.tasks if g.task.known_fix is not None}


# -- mining ----------------------------------------------------------------------------------------


def test_mining_keeps_exactly_the_two_real_fixes(
    mined: MineReport, history: tuple[Path, dict[str, str]]
) -> None:
    _, shas = history
    assert mined.commits == 5  # every commit but the root
    assert set(by_commit(mined)) == {shas["fix_boundary"], shas["fix_spaces"]}
    why = {sha: reason for sha, _, reason in mined.rejected}
    assert why[shas["docs"]] == "no Python code change"
    assert "tests pass" in why[shas["refactor"]]
    assert why[shas["flaky"]].startswith("flaky")
    for got in mined.tasks:
        task = got.task
        assert task.phase == 2 and task.source.startswith("mined:calc@")
        assert task.split == split_for(task.known_fix.commit, 0.2)  # type: ignore[union-attr]
        assert task.test_files == ["tests/test_ops.py"]
        assert "calc/ops.py" in task.statement and task.known_fix.commit not in task.statement  # type: ignore[union-attr]


def test_the_task_is_the_tree_before_the_fix_with_the_fixs_tests(
    mined: MineReport, history: tuple[Path, dict[str, str]]
) -> None:
    repo, shas = history
    task = by_commit(mined)[shas["fix_spaces"]].task
    parent = snapshot_commit(repo, f"{shas['fix_spaces']}^").files
    after = snapshot_commit(repo, shas["fix_spaces"]).files
    assert task.files["calc/ops.py"] == parent["calc/ops.py"]  # the code before the fix
    assert task.files["tests/test_ops.py"] == after["tests/test_ops.py"]  # the tests after it
    assert task.failing_tests == [
        "tests/test_ops.py::test_words_empty",
        "tests/test_ops.py::test_words_spaces",
    ]
    assert task.known_fix is not None and task.known_fix.files == {
        "calc/ops.py": after["calc/ops.py"]
    }
    assert task.known_fix.lines == ["calc/ops.py:9"]
    assert task.ground_truth.operator == "known_fix" and task.ground_truth.line == 9


def test_a_candidate_solves_the_bug_an_operator_expresses(
    mined: MineReport, history: tuple[Path, dict[str, str]], sandbox
) -> None:  # type: ignore[no-untyped-def]
    _, shas = history
    boundary = by_commit(mined)[shas["fix_boundary"]]
    assert boundary.solvable and boundary.fix_rank is not None and boundary.fix_rank <= 3
    fixes = [e for e in boundary.task.candidate_edits if e.is_fix]
    assert fixes and all("`x >= k`" in e.label or ">= k" in e.new for e in fixes)
    for edit in fixes:
        result = run_tests_with(apply_edit(boundary.task.files, edit), TEST_CMD, sandbox)
        assert result.exit_code == 0, result.output[-1000:]
    wrong = [e for e in boundary.task.candidate_edits if not e.is_fix]
    assert wrong, "the fix is offered among other edits"
    result = run_tests_with(apply_edit(boundary.task.files, wrong[0]), TEST_CMD, sandbox)
    assert result.exit_code != 0
    spaces = by_commit(mined)[shas["fix_spaces"]]
    assert not spaces.solvable and not any(e.is_fix for e in spaces.task.candidate_edits)
    assert spaces.fix_rank == 1  # the line the fix changes is the most suspicious


def test_a_known_fix_is_never_a_candidate_unless_an_operator_made_it(
    mined: MineReport, history: tuple[Path, dict[str, str]], sandbox
) -> None:  # type: ignore[no-untyped-def]
    _, shas = history
    for sha in (shas["fix_boundary"], shas["fix_spaces"]):
        task = by_commit(mined)[sha].task
        assert task.known_fix is not None
        fixed = {**task.files, **task.known_fix.files}
        if sha == shas["fix_boundary"]:
            # The same tree imported without its fix gets the very same candidates, the fix
            # among them: the fix is not an input of candidate generation.
            blind = build_task(task.files, TEST_CMD, sandbox, name="calc", source="import:calc")
            assert blind.task.candidate_edits == task.candidate_edits
            assert blind.task.known_fix is None and blind.task.ground_truth.operator == "unknown"
        gives_fix = [e for e in task.candidate_edits if apply_edit(task.files, e) == fixed]
        if sha == shas["fix_spaces"]:
            assert gives_fix == []  # no operator expresses it: never offered
        else:
            assert gives_fix and all(e.is_fix for e in gives_fix)  # found on its own


def test_import_rejects_what_is_not_a_task(sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    files = {"calc/__init__.py": "", "calc/ops.py": ops(cmp=">="), "tests/test_ops.py": TESTS}
    with pytest.raises(RejectedTask, match="tests pass"):
        build_task(files, TEST_CMD, sandbox, name="calc", source="import:calc")
    broken = {**files, "tests/test_ops.py": TESTS + BOUNDARY}
    with pytest.raises(RejectedTask, match="fix changes test files"):
        build_task(broken, TEST_CMD, sandbox, name="c", source="i", fix={"tests/test_ops.py": ""})
    buggy = {**files, "calc/ops.py": ops(cmp=">"), "tests/test_ops.py": TESTS + BOUNDARY}
    with pytest.raises(RejectedTask, match="does not make every test pass"):
        build_task(
            buggy, TEST_CMD, sandbox, name="c", source="i", fix={"calc/ops.py": ops(cmp="<")}
        )


# -- through the real runner -----------------------------------------------------------------------


async def test_mined_tasks_run_through_the_real_runner(
    bus: Bus, names: Names, mined: MineReport
) -> None:
    tasks = [g.task for g in mined.tasks]
    await ShellTaskStore(bus).put_all(tasks)
    jobs = [job(t.task_id, i) for i, t in enumerate(tasks)]
    policies = {f"ep-{i}": oracle_policy(t) for i, t in enumerate(tasks)}

    def oracle(req: ActRequest) -> str:
        return policies[req.episode_id](req.observation, req.candidates, req.step)

    runner_svc, _ = build(bus, settings(bus))
    got = await run_jobs(bus, names, jobs, [policy_service(bus, oracle), runner_svc], 120)
    assert {ep.outcome for ep in got.values()} == {"success"}, {
        ep.task_id: (ep.outcome, ep.info) for ep in got.values()
    }
    by_task = {ep.task_id: ep for ep in got.values()}
    for task in tasks:
        actions = [s.action for s in by_task[task.task_id].trajectory]
        if any(e.is_fix for e in task.candidate_edits):
            assert actions[0] in {e.label for e in task.candidate_edits if e.is_fix}
        else:  # the known fix, applied as a free-text command (what the oracle teacher hints)
            assert actions[0] == fix_command(task) and actions[-1] == SUBMIT

    def submit(_req: ActRequest) -> str:
        return SUBMIT

    runner_svc, _ = build(bus, settings(bus))
    again = [job(t.task_id, 100 + i) for i, t in enumerate(tasks)]
    got = await run_jobs(bus, names, again, [policy_service(bus, submit), runner_svc], 120)
    assert {ep.outcome for ep in got.values()} == {"failure"}  # nothing fixed: the tests fail


async def test_real_splits_use_the_imported_tasks_and_are_never_topped_up(
    bus: Bus, mined: MineReport
) -> None:
    from rich.console import Console

    from aios_rl.cli._common import CliError
    from aios_rl.cli.engine import ensure_tasks

    console = Console(quiet=True)
    with pytest.raises(CliError, match="no real-heldout tasks"):
        await ensure_tasks(bus, "real-heldout", 5, console)
    tasks = [msgspec.structs.replace(g.task, split="real") for g in mined.tasks]
    await ShellTaskStore(bus).put_all(tasks)
    ids = await ensure_tasks(bus, "real", 50, console)  # 50 asked, 2 there: none generated
    assert ids == [t.task_id for t in tasks]
    held = msgspec.structs.replace(tasks[0], split="real-heldout")
    await ShellTaskStore(bus).put_all([held])
    assert await ensure_tasks(bus, "real-heldout", 5, console) == [held.task_id]


def test_the_oracle_hints_the_known_fix_as_a_command_when_no_candidate_makes_it(
    mined: MineReport, history: tuple[Path, dict[str, str]]
) -> None:
    from contracts import StepDigest, TeacherRequest
    from services.teacher_oracle.logic import judge

    _, shas = history
    task = by_commit(mined)[shas["fix_spaces"]].task
    command = fix_command(task)
    assert command is not None

    def request(first: str, outcome: str) -> TeacherRequest:
        steps = [
            StepDigest(index=0, observation="o", action=first, candidates=["run the tests"]),
            StepDigest(index=1, observation="o", action=SUBMIT, candidates=[SUBMIT]),
        ]
        return TeacherRequest(
            request_id="r", episode_id="e", environment="shell", task_id=task.task_id,
            task_statement=task.statement, steps=steps, outcome=outcome,
        )  # fmt: skip

    missed = judge(request("run the tests", "failure"), task)
    assert missed.verdict == "incorrect" and [h.better_action for h in missed.hints] == [command]
    solved = judge(request(command, "success"), task)
    assert solved.verdict == "correct" and solved.hints == [] and solved.score == 1.0


# -- the command line ------------------------------------------------------------------------------


def test_shell_import_cli_with_a_fix_patch_stores_the_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tmp_path / "calc"
    buggy = {"calc/__init__.py": "", "calc/ops.py": ops(), "tests/test_ops.py": TESTS + BOUNDARY}
    for rel, text in buggy.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    (tree / "calc" / "__pycache__").mkdir()
    (tree / "calc" / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\x00junk")
    patch = tmp_path / "fix.patch"
    patch.write_text(patch_of(buggy, {**buggy, "calc/ops.py": ops(cmp=">=")}, ["calc/ops.py"]))
    store, out = tmp_path / "store", tmp_path / "out"
    code = run_cli(
        [
            "shell",
            "import",
            str(tree),
            "--test-cmd",
            "python -m pytest -q -p no:cacheprovider",
            "--fix-patch",
            str(patch),
            "--out",
            str(out),
            "--store",
            str(store),
            "--nats-url",
            "nats://127.0.0.1:1",
            "--json",
        ]
    )
    assert code == 0
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["solvable"] is True and doc["split"] == "real" and doc["fix_rank"] is not None
    (task,) = read_dir(out, "real")
    assert task.task_id == doc["task_id"] and set(task.files) == set(buggy)
    assert task.known_fix is not None and "+    return sum(1 for x in xs if x >= k)" in (
        task.known_fix.patch
    )

    async def stored() -> list[str]:
        async with reader(None, store=store) as state:
            return await ShellTaskStore(state.bus).list("real")

    import asyncio

    assert asyncio.run(stored()) == [task.task_id]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--test-cmd", "python -m pytest 'x"], "No closing quotation"),
        (["--test-cmd", "  "], "--test-cmd is empty"),
        (["--test-cmd", "pytest", "--no-store"], "--no-store needs --out"),
        (["--test-cmd", "pytest", "--fix-commit", "HEAD"], "needs PATH to be a git work tree"),
    ],
)
def test_shell_import_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    out = [] if "--no-store" in argv else ["--out", str(tmp_path / "o")]
    code = run_cli(["shell", "import", str(tmp_path), *argv, *out])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and len(err.splitlines()) == 1, err


# -- pure parts ------------------------------------------------------------------------------------


def test_snapshot_dir_ignores_caches_skips_binaries_and_refuses_escaping_symlinks(
    tmp_path: Path,
) -> None:
    root = tmp_path / "proj"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\x00")
    (root / ".venv" / "lib" / "site.py").write_text("y = 2\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00")
    (root / "alias.py").symlink_to("pkg/mod.py")
    snap = snapshot_dir(root)
    assert snap.files == {"alias.py": "x = 1\n", "pkg/mod.py": "x = 1\n"}
    assert "logo.png" in snap.skipped
    (root / "secret.py").symlink_to("/etc/hostname")
    with pytest.raises(SnapshotError, match="symlink out of the tree"):
        snapshot_dir(root)
    (root / "secret.py").unlink()
    with pytest.raises(SnapshotError, match="more than 1 files"):
        snapshot_dir(root, SnapshotLimits(max_files=1))
    with pytest.raises(SnapshotError, match="over the 3-byte limit"):
        snapshot_dir(root, SnapshotLimits(max_file_bytes=3))


def test_snapshot_dir_follows_gitignore_in_a_work_tree(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q")
    (root / ".gitignore").write_text("*.log\nlocal/\n")
    (root / "a.py").write_text("a = 1\n")
    (root / "run.log").write_text("noise\n")
    (root / "local").mkdir()
    (root / "local" / "b.py").write_text("b = 2\n")
    assert set(snapshot_dir(root).files) == {".gitignore", "a.py"}


def test_patches_round_trip_and_changed_lines() -> None:
    before = {"m.py": "a = 1\nb = 2\nc = 3\n", "n.py": "keep\n"}
    after = {"m.py": "a = 1\nb = 20\nc = 3\nd = 4\n", "n.py": "keep\n"}
    patch = patch_of(before, after, ["m.py"])
    assert apply_patch(before, patch) == after
    with pytest.raises(SnapshotError, match="does not apply"):
        apply_patch({"m.py": "other\n", "n.py": "keep\n"}, patch)
    assert changed_lines(before["m.py"], after["m.py"]) == [2, 3, 4]
    assert changed_lines("a\nb\n", "a\n") == [2]


def test_ochiai_ranks_the_line_only_failing_tests_run_first() -> None:
    spec = Spectrum(
        failed={"t1": True, "t2": True, "t3": False},
        lines={
            "t1": frozenset({("m.py", 1), ("m.py", 5)}),
            "t2": frozenset({("m.py", 1), ("m.py", 5), ("m.py", 9)}),
            "t3": frozenset({("m.py", 1), ("m.py", 7)}),
        },
    )
    ranked = ochiai(spec)
    assert [(p, n) for p, n, _ in ranked] == [("m.py", 5), ("m.py", 1), ("m.py", 9)]
    assert ranked[0][2] == pytest.approx(1.0)
    assert ranked[1][2] == pytest.approx(2 / (2 * 3) ** 0.5)
    assert ochiai(Spectrum(failed={"t": False}, lines={"t": frozenset({("m.py", 1)})})) == []


def test_commands_ids_and_splits() -> None:
    assert normalise_command("python -m pytest -q tests") == [
        "{python}",
        "-m",
        "pytest",
        "-q",
        "tests",
    ]
    assert normalise_command("pytest -x") == ["{python}", "-m", "pytest", "-x"]
    assert normalise_command("python3.11 run.py") == ["{python}", "run.py"]
    assert normalise_command("make test") == ["make", "test"]
    assert traceable(["{python}", "-m", "pytest"]) and traceable(["{python}", "run_tests.py"])
    assert traceable(["{python}", "-B", "-S", "run_tests.py"])
    assert not traceable(["make", "test"]) and not traceable(["{python}", "-c", "x"])
    out = "F.\nFAILED tests/test_a.py::TestX::test_y[1-2] - AssertionError: boom\nERROR t.py::t_z\n"
    assert failing_test_ids(out) == ["t.py::t_z", "tests/test_a.py::TestX::test_y[1-2]"]
    assert failure_reasons(out)["tests/test_a.py::TestX::test_y[1-2]"] == "AssertionError: boom"
    assert failing_test_ids("FAILED (failures=1)\n") == []
    source = "def test_a():\n    assert clamp(1)\n\nclass TestB:\n    def test_c(self):\n        obj.size()\n"
    assert pointed_functions({"test_m": source}, ["tests/test_m.py::test_a"]) >= {"clamp"}
    assert "size" in pointed_functions({"test_m": source}, ["tests/test_m.py::TestB::test_c"])
    shares = [split_for(f"{i:040x}", 0.25) for i in range(400)]
    assert 0.15 < shares.count("real-heldout") / 400 < 0.35
    assert split_for("abc", 0.25) == split_for("abc", 0.25) and split_for("abc", 0.0) == "real"
    assert is_test_path("tests/helpers.py") and is_test_path("pkg/test_x.py")
    assert is_test_path("conftest.py") and not is_test_path("pkg/testing_utils.py")
    assert is_test_path("run_tests.py") and not is_test_path("pkg/contest.py")


def test_fix_command_writes_the_fixed_files(tmp_path: Path) -> None:
    files = {"calc/ops.py": ops(), "tests/test_ops.py": TESTS}
    fixed = ops(cmp=">=")
    from contracts import GroundTruth, KnownFix

    task = ShellTask(
        task_id="x",
        family="calc",
        statement="s",
        files=files,
        test_command=TEST_CMD,
        ground_truth=GroundTruth(path="", line=0, operator="known_fix", original="", mutated=""),
        known_fix=KnownFix(patch="", files={"calc/ops.py": fixed}),
    )
    command = fix_command(task)
    assert command is not None
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    result = LocalExecutor().run(["/bin/sh", "-c", command], tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "calc" / "ops.py").read_text() == fixed
    assert fix_command(task, limit=10) is None
