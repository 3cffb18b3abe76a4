"""The shell episode: actions, outcome rule, reward, prefix replay and what an untrusted task
directory cannot do to the host. Commands run in the real sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from aios_rl.envs.shell.episode import (
    RUN_TESTS,
    SUBMIT,
    UNDO,
    ShellEnvConfig,
    ShellEpisode,
    UnsafePath,
    read_text,
    reward_of,
    run_episode,
    write_text,
)
from aios_rl.envs.shell.generate import generate
from aios_rl.envs.shell.policies import oracle_policy, random_policy
from aios_rl.envs.shell.sandbox import Sandbox, SandboxConfig
from aios_rl.envs.shell.verify import RunCache, default_cache_dir, task_id_of
from contracts import CandidateEdit, GroundTruth, ShellTask

CALC = """\
def add(a, b):
    return b - a


def mul(a, b):
    return a ** b


def sub(a, b):
    return a - b
"""

TEST_CALC = """\
import unittest

from calc import add, mul, sub


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)

    def test_sub(self):
        self.assertEqual(sub(5, 3), 2)
"""

FIX_ADD = "calc.py:2: `return b - a` -> `return a + b`"
FIX_MUL = "calc.py:6: `return a ** b` -> `return a * b`"
BREAK_SUB = "calc.py:10: `return a - b` -> `return a + b`"


def calc_task() -> ShellTask:
    """Two bugs (add, mul) and an edit that breaks the passing ``sub``: every outcome is
    reachable."""
    files = {"calc.py": CALC, "test_calc.py": TEST_CALC}
    command = ["{python}", "-B", "-S", "-m", "unittest", "-q"]
    return ShellTask(
        task_id=task_id_of(files, command),
        family="calc",
        statement="calc.py: add and mul are wrong; test_calc.py tests them.",
        files=files,
        test_command=command,
        test_files=["test_calc.py"],
        failing_tests=["test_calc.CalcTest.test_add", "test_calc.CalcTest.test_mul"],
        candidate_edits=[
            CandidateEdit(
                label=FIX_ADD, path="calc.py", old="return b - a", new="return a + b", is_fix=True
            ),
            CandidateEdit(label=FIX_MUL, path="calc.py", old="return a ** b", new="return a * b"),
            CandidateEdit(label=BREAK_SUB, path="calc.py", old="return a - b", new="return a + b"),
        ],
        ground_truth=GroundTruth(
            path="calc.py",
            line=2,
            operator="swapped_arguments",
            original="    return a + b\n",
            mutated="    return b - a\n",
        ),
    )


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(SandboxConfig(wall_timeout_s=5.0, cpu_seconds=5))
    box.check()
    return box


def play(task: ShellTask, sandbox: Sandbox, actions: list[str], **kw: object):
    result, trajectory = run_episode(
        task,
        sandbox,
        lambda *_: SUBMIT,
        prefix=actions,
        **kw,  # type: ignore[arg-type]
    )
    return result, trajectory


def test_reward_rule() -> None:
    assert reward_of("success", 2, step_cost=0.02) == 1.0
    assert reward_of("success", 5, step_cost=0.02) == pytest.approx(0.94)
    assert reward_of("success", 100, step_cost=0.02) == 0.5
    assert reward_of("partial", 2, fixed=1, failing_before=2, step_cost=0.02) == 0.25
    assert reward_of("partial", 30, fixed=1, failing_before=2, step_cost=0.02) == 0.0
    assert reward_of("failure", 2, step_cost=0.02) == 0.0
    assert reward_of("blocked", 2, step_cost=0.02) == 0.0


def test_both_fixes_succeed(sandbox: Sandbox) -> None:
    result, trajectory = play(calc_task(), sandbox, [FIX_ADD, FIX_MUL, SUBMIT])
    assert (result.outcome, result.ended, result.tests_passed) == ("success", "submit", True)
    assert result.reward == pytest.approx(0.98)
    assert result.edits_applied == [FIX_ADD, FIX_MUL]
    assert len(trajectory) == 3
    # An applied edit is no longer offered; undo is.
    assert FIX_ADD not in trajectory[1][1] and UNDO in trajectory[1][1]


def test_one_fix_is_partial(sandbox: Sandbox) -> None:
    result, _ = play(calc_task(), sandbox, [FIX_ADD, SUBMIT])
    assert result.outcome == "partial"
    assert result.failing_after == ["test_calc.CalcTest.test_mul"]
    assert result.reward == pytest.approx(0.25)


def test_breaking_a_passing_test_is_failure(sandbox: Sandbox) -> None:
    result, _ = play(calc_task(), sandbox, [FIX_ADD, BREAK_SUB, SUBMIT])
    assert result.outcome == "failure" and result.reward == 0.0
    assert "test_calc.CalcTest.test_sub" in result.failing_after


def test_undo_restores_the_file(sandbox: Sandbox) -> None:
    result, trajectory = play(
        calc_task(), sandbox, [BREAK_SUB, UNDO, FIX_ADD, FIX_MUL, RUN_TESTS, SUBMIT]
    )
    assert result.outcome == "success"
    assert result.edits_applied == [FIX_ADD, FIX_MUL]
    assert "[tests: all pass]" in trajectory[5][0]
    assert BREAK_SUB in trajectory[2][1]  # offered again after the undo


def test_the_observation_can_name_the_edits_undone(sandbox: Sandbox) -> None:
    actions = [BREAK_SUB, RUN_TESTS, UNDO, FIX_ADD, UNDO, SUBMIT]
    _, shown = play(calc_task(), sandbox, actions, config=ShellEnvConfig(show_undone=True))
    assert "edits undone" not in shown[2][0]
    assert "edits undone: calc.py:10 (tests: 3 failing);" in shown[3][0]
    assert (
        "edits undone: calc.py:10 (tests: 3 failing), "
        "calc.py:2 (tests: not run since the last change);" in shown[5][0]
    )
    _, plain = play(calc_task(), sandbox, actions)
    assert all("edits undone" not in obs for obs, _, _ in plain)


def test_an_undone_edit_can_be_withheld(sandbox: Sandbox) -> None:
    actions = [BREAK_SUB, UNDO, SUBMIT]
    _, shown = play(calc_task(), sandbox, actions, config=ShellEnvConfig(offer_undone=False))
    assert BREAK_SUB not in shown[2][1] and FIX_ADD in shown[2][1]
    _, plain = play(calc_task(), sandbox, actions)
    assert BREAK_SUB in plain[2][1]


def progress_of(task: ShellTask, sandbox: Sandbox, actions: list[str], **kw: object) -> list:
    """Each step's progress, stepping an episode by hand."""
    with ShellEpisode(task, sandbox, **kw) as ep:  # type: ignore[arg-type]
        out = []
        for action in actions:
            ep.step(action)
            out.append(ep.progress)
        return out


def test_progress_is_the_change_of_the_tests_state(sandbox: Sandbox) -> None:
    # add fixed: 1 of 2 failing passes (0.5 * 1/2); mul fixed too: all pass (1.0); sub broken:
    # a passing test fails (-0.5); the tests, show and submit change nothing.
    steps = [RUN_TESTS, FIX_ADD, FIX_MUL, BREAK_SUB, UNDO, SUBMIT]
    assert progress_of(calc_task(), sandbox, steps) == [0.0, 0.25, 0.75, -1.5, 1.5, 0.0]
    # Potential-based: the steps' progress adds up to the final state's potential.
    assert sum(progress_of(calc_task(), sandbox, [BREAK_SUB, FIX_ADD, UNDO, UNDO])) == 0.0


def test_progress_counts_free_text_that_changes_the_code(sandbox: Sandbox) -> None:
    fix = "sed -i 's/return b - a/return a + b/' calc.py"
    assert progress_of(calc_task(), sandbox, [fix, "cat calc.py"]) == [0.25, 0.0]


def test_progress_runs_the_tests_once_per_state_and_can_be_off(sandbox: Sandbox) -> None:
    cache: dict[str, float] = {}
    progress_of(calc_task(), sandbox, [FIX_ADD, UNDO, FIX_ADD], progress_cache=cache)
    assert sorted(cache.values()) == [0.0, 0.25]  # two states of the code, each run once
    off = ShellEnvConfig(progress=False)
    assert progress_of(calc_task(), sandbox, [FIX_ADD, FIX_MUL], config=off) == [0.0, 0.0]


def test_a_read_is_offered_once_per_state_of_the_code_when_asked(sandbox: Sandbox) -> None:
    once = ShellEnvConfig(repeat_reads=False)
    with ShellEpisode(calc_task(), sandbox, config=once) as ep:
        show = next(c for c in ep.candidates if c.startswith("show "))
        for action in (RUN_TESTS, show):
            ep.step(action)
        assert RUN_TESTS not in ep.candidates and show not in ep.candidates
        assert FIX_ADD in ep.candidates and SUBMIT in ep.candidates
        ep.step(FIX_ADD)  # the code changed: every read is worth doing again
        assert RUN_TESTS in ep.candidates and show in ep.candidates
    with ShellEpisode(calc_task(), sandbox) as ep:  # the default offers reads again
        ep.step(RUN_TESTS)
        assert RUN_TESTS in ep.candidates


def test_run_the_tests_reports_the_failures(sandbox: Sandbox) -> None:
    _, trajectory = play(calc_task(), sandbox, [RUN_TESTS, SUBMIT])
    seen = trajectory[1][0]
    assert "[tests: 2 failing]" in seen and "Ran 3 tests" in seen
    assert "FAIL: test_add" in seen


def test_free_text_commands_run_in_the_task_directory(sandbox: Sandbox) -> None:
    fix = "sed -i 's/return b - a/return a + b/; s/return a \\*\\* b/return a * b/' calc.py"
    result, trajectory = play(calc_task(), sandbox, [fix, "cat calc.py", SUBMIT])
    assert "return a * b" in trajectory[2][0] and "[exit status 0]" in trajectory[2][0]
    assert result.outcome == "success"


def test_touching_a_test_file_voids_success(sandbox: Sandbox) -> None:
    result, _ = play(
        calc_task(), sandbox, [FIX_ADD, FIX_MUL, "echo '# mine' >> test_calc.py", SUBMIT]
    )
    assert result.outcome == "failure" and result.touched_tests == ["test_calc.py"]


def test_a_planted_unittest_fools_run_the_tests_not_the_evaluation(sandbox: Sandbox) -> None:
    plant = (
        "mkdir unittest && touch unittest/__init__.py"
        " && echo 'raise SystemExit(0)' > unittest/__main__.py"
    )
    result, trajectory = play(calc_task(), sandbox, [plant, RUN_TESTS, SUBMIT])
    assert "[tests: all pass]" in trajectory[2][0]  # the agent's own run is fooled
    assert result.outcome == "failure"  # the clean copy is not


def test_symlinks_planted_in_the_task_are_never_followed(sandbox: Sandbox, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("return b - a\n")
    task = calc_task()
    with ShellEpisode(task, sandbox) as ep:
        ep.step(f"rm calc.py && ln -s {victim} calc.py")
        assert (ep.workdir / "calc.py").is_symlink()
        ep.step(FIX_ADD)
        assert "edit not applied" in ep.observation
        ep.step("show calc.py:1-3")
        ep.step(SUBMIT)
        assert ep.result is not None and ep.result.outcome == "failure"
    assert victim.read_text() == "return b - a\n"


def test_untrusted_reads_and_writes(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    root = tmp_path / "task"
    root.mkdir()
    (root / "link.py").symlink_to(outside)
    os.mkfifo(root / "pipe.py")
    with pytest.raises(UnsafePath):
        read_text(root, "link.py")
    with pytest.raises(UnsafePath):
        read_text(root, "pipe.py")  # would block forever if opened blocking
    with pytest.raises(UnsafePath):
        read_text(root, "../outside.txt")
    assert read_text(root, "missing.py") is None
    write_text(root, "link.py", "mine")  # replaces the link, never writes through it
    assert outside.read_text() == "secret" and read_text(root, "link.py") == "mine"
    (root / "sub").symlink_to(tmp_path)
    with pytest.raises(UnsafePath):
        write_text(root, "sub/outside.txt", "x")
    assert outside.read_text() == "secret"


def test_invalid_actions_in_a_row_block(sandbox: Sandbox) -> None:
    config = ShellEnvConfig(allow_free_text=False, max_invalid=3)
    result, trajectory = play(
        calc_task(), sandbox, ["rm -rf /", "nonsense", RUN_TESTS, "a", "b", "c"], config=config
    )
    assert (result.outcome, result.ended) == ("blocked", "invalid_actions")
    assert len(trajectory) == 6  # the valid action in between reset the streak
    assert "invalid action (2 in a row" in trajectory[2][0]


def test_an_action_with_a_nul_character_is_invalid_not_a_crash(sandbox: Sandbox) -> None:
    """A model can write a NUL: as a command, a path to show or a pattern to grep it is an
    invalid action (no process, path or regex takes one), never an exception."""
    config = ShellEnvConfig(max_invalid=3)
    actions = ["echo a\x00b", "show calc\x00.py", "grep -n a\x00 calc.py"]
    result, trajectory = play(calc_task(), sandbox, actions, config=config)
    assert (result.outcome, result.ended) == ("blocked", "invalid_actions")
    assert "invalid action: a NUL character" in trajectory[1][0]


def test_a_command_over_its_time_limit_blocks() -> None:
    quick = Sandbox(SandboxConfig(wall_timeout_s=1.0, cpu_seconds=2))
    result, _ = play(calc_task(), quick, ["while :; do :; done"])
    assert (result.outcome, result.ended) == ("blocked", "limit")
    assert result.blocked_reason


def test_an_output_flood_is_truncated_not_blocking(sandbox: Sandbox) -> None:
    config = ShellEnvConfig(observation_chars=500)
    result, trajectory = play(
        calc_task(),
        sandbox,
        ["yes flood | head -c 3000000", FIX_ADD, FIX_MUL, SUBMIT],
        config=config,
    )
    flood = trajectory[1][0].split("$ yes flood")[1]
    assert "characters cut" in flood and len(flood) < 700
    assert result.outcome == "success"


def test_the_step_limit_evaluates(sandbox: Sandbox) -> None:
    result, trajectory = play(calc_task(), sandbox, [FIX_ADD, FIX_MUL], max_steps=2)
    assert (result.outcome, result.ended, len(trajectory)) == ("success", "step_limit", 2)


def test_close_removes_the_task_directory(sandbox: Sandbox) -> None:
    ep = ShellEpisode(calc_task(), sandbox)
    ep.step("mkdir -p deep/er && touch deep/er/x")
    workdir = ep.workdir
    assert workdir.is_dir()
    ep.close()
    assert not workdir.exists()


@pytest.fixture(scope="module")
def generated() -> list[ShellTask]:
    return generate(12, 3, "train", cache=RunCache(default_cache_dir()))


def test_prefix_replay_reproduces_the_state(generated: list[ShellTask], sandbox: Sandbox) -> None:
    ran_tests = 0
    for i, task in enumerate(generated[:6]):
        first, trajectory = run_episode(task, sandbox, random_policy(100 + i))
        taken = [a for _, _, a in trajectory]
        ran_tests += taken.count(RUN_TESTS)
        again, replayed = run_episode(task, sandbox, lambda *_: SUBMIT, prefix=taken)
        assert replayed == trajectory, f"task {task.task_id}: the replay differs"
        assert (again.outcome, again.reward) == (first.outcome, first.reward)
        cut = len(taken) // 2
        if cut:
            _, branch = run_episode(task, sandbox, lambda *_: SUBMIT, prefix=taken[:cut])
            assert branch[:cut] == trajectory[:cut]
            assert branch[cut][:2] == trajectory[cut][:2]  # same observation, same candidates
    assert ran_tests  # test output (timings, paths) was part of what had to match


def test_oracle_solves_and_random_mostly_does_not(
    generated: list[ShellTask], sandbox: Sandbox
) -> None:
    oracle = [run_episode(t, sandbox, oracle_policy(t))[0] for t in generated]
    assert all(r.outcome == "success" and r.reward == 1.0 for r in oracle)
    rand = [run_episode(t, sandbox, random_policy(i))[0] for i, t in enumerate(generated)]
    assert sum(r.outcome == "success" for r in rand) <= len(generated) // 2


def test_real_code_tasks_run_in_the_sandbox(sandbox: Sandbox) -> None:
    """Phase 2: stdlib modules with an injected bug, checked by their upstream tests."""
    real = generate(3, 0, "real", cache=RunCache(default_cache_dir()))
    for task in real:
        assert task.phase == 2 and task.source.startswith("stdlib:")
        result, _ = run_episode(task, sandbox, oracle_policy(task))
        assert result.outcome == "success", (task.family, result)
        result, _ = play(task, sandbox, [SUBMIT])
        assert result.outcome == "failure" and result.failing_after == sorted(task.failing_tests)


def test_a_task_that_cannot_be_laid_out_leaves_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    task = calc_task()
    bad = msgspec.structs.replace(task, files={**task.files, "../escape.py": "x = 1\n"})
    with pytest.raises(UnsafePath):
        ShellEpisode(bad, sandbox, work_root=tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert not (tmp_path.parent / "escape.py").exists()
