"""One shell bug-fix episode: reset from a task and a seed, act, evaluate. No NATS here.

An episode works in a task directory of its own (the task's files, materialised at reset and
removed at :meth:`ShellEpisode.close`). Each step offers candidate actions and also accepts a
free-text shell command:

==========================  =================================================================
action                      what it does
==========================  =================================================================
``run the tests``           runs the task's test command in the sandbox (each test limited
                            to the task's ``test_timeout_s``, when it has one); the
                            observation is its output (normalised, truncated) and which
                            tests fail
``show <path>:<a>-<b>``     prints lines ``a`` to ``b`` of a file, numbered (one region around
                            each line a candidate edit touches)
``grep <name>``             every line of the task's files that mentions ``name`` (names the
                            failing tests use that the code defines)
*an edit's label*           applies that candidate edit (``path:line: `old` -> `new```): its
                            old text must occur exactly once in the file as it is now
``undo the last edit``      restores the file the last applied edit changed
``submit``                  ends the episode; it is evaluated
anything else               a shell command (``sh -c``) run in the sandbox in the task
                            directory, when free text is allowed; otherwise invalid
==========================  =================================================================

Commands the policy chooses (the tests, free text) run through the ``Executor`` given at reset:
the runner passes :func:`~.sandbox.policy_executor`, a checked bubblewrap sandbox. ``show``,
``grep`` and edits are done by this process on the task's own files, opened without following
symlinks (the directory is untrusted once a command has run in it).

Evaluation
----------
At ``submit``, at the step limit, or when the episode is blocked, the task is judged on a clean
copy: the task's code files as the agent left them, its test files as they were given, nothing
else (so a ``unittest.py`` planted in the task directory cannot fake a pass). Then:

- ``success``: every test passes and no test file was touched (changed, removed or replaced);
- ``partial``: some of the initially failing tests pass, none that passed fails, no test file
  was touched;
- ``failure``: anything else, including touching a test file;
- ``blocked``: the sandbox failed, a command hit a limit that ended it (timeout, CPU, memory,
  processes, file size), the evaluation run timed out, or ``max_invalid`` invalid actions came
  in a row. An output flood is not blocking: the observation is truncated. A task with a
  per-test timeout (:mod:`.pertest`) runs its tests with it, in ``run the tests`` and in the
  evaluation: a test that loops fails, and the run is judged, not blocked.

Reward (environment reward, in [0, 1]):

- ``success``: ``1 - step_cost * max(0, steps - 2)``, at least ``0.5``: two steps (the fix, then
  submit) is the shortest solution; every step beyond costs ``step_cost``;
- ``partial``: ``0.5 * fixed / initially_failing - step_cost * max(0, steps - 2)``, at least 0;
- ``failure`` and ``blocked``: 0.

Progress (step-level environment reward, not part of the episode's reward): with
``ShellEnvConfig.progress`` on (the default), every step that may change the code (an edit, an
undo, a shell command) is followed by a test run on a clean copy (as the evaluation judges it,
cached by the code's content) and :attr:`ShellEpisode.progress` is the change of the state's
potential: ``1`` when every test passes; ``0.5 * fixed / initially_failing`` when some of the
initially failing tests pass and nothing new fails; ``0`` when the same tests fail; ``-0.5``
when a test that passed fails or the run reports none (a module that no longer imports); ``-1``
when the run hits a limit. Steps that cannot change the code (the tests, ``show``, ``grep``,
``submit``) have progress 0. Potential-based: over an episode the steps' progress adds up to
the final state's potential (the initial one is 0), so it tells the trainer *which* step made
the difference without changing which end is best (Ng et al., 1999). The policy never sees it.

Determinism
-----------
Replaying an action prefix from the same task and seed reproduces the same state exactly: the
files are a function of the actions, and observations are normalised (the task directory's path
becomes ``.``, unittest's run time and memory addresses are masked). The seed decides nothing in
the environment itself (tasks are fixed); it is carried for the policy's sampling.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from aios_rl.errors import AiosError
from contracts import CandidateEdit, Outcome, ShellTask

from .pertest import timed_command
from .pyparse import parse
from .sandbox import ExecResult, Executor, SandboxError
from .verify import command_argv, failing_test_ids

__all__ = [
    "RUN_TESTS",
    "SUBMIT",
    "UNDO",
    "EpisodeResult",
    "ShellEnvConfig",
    "ShellEpisode",
    "UnsafePath",
    "reward_of",
    "run_episode",
]

RUN_TESTS = "run the tests"
SUBMIT = "submit"
UNDO = "undo the last edit"

_READ_LIMIT = 4 << 20
"""Largest file ``show``, ``grep``, edits and evaluation read (bytes)."""


@dataclass(frozen=True)
class ShellEnvConfig:
    """Limits and costs of shell episodes."""

    max_steps: int = 12
    """Actions before the episode is evaluated as if submitted."""
    observation_chars: int = 2400
    """Command output kept in an observation (head and tail, the middle cut)."""
    show_context: int = 4
    """Lines shown either side of an edit's line by ``show``."""
    max_greps: int = 3
    """``grep`` candidates offered."""
    max_invalid: int = 3
    """Invalid actions in a row that block the episode."""
    step_cost: float = 0.02
    """Reward taken per step beyond the shortest solution (two)."""
    allow_free_text: bool = True
    """Run actions that are not candidates as shell commands (else they are invalid)."""
    show_undone: bool = False
    """Name the edits tried and undone (with what the tests said then) in the observation's state
    line, so a policy that searches can tell what it already tried
    (``bench/learning_ablation.py`` measures what it is worth)."""
    offer_undone: bool = True
    """Offer an edit again after it was undone (``False``: an undone edit is not offered again,
    which makes a search over the edits a walk without repeats; an ablation of the same bench)."""
    repeat_reads: bool = True
    """Offer a read (``run the tests``, ``show``, ``grep``) again when the code has not changed
    since it was done (``False``: each read is offered once per state of the code, as its
    answer could not differ: a policy cannot loop on reads, it has to edit, undo or submit)."""
    progress: bool = True
    """Measure each code-changing step's progress (see the module docstring): one cached test
    run on a clean copy after each edit, undo or shell command."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, not {self.max_steps}")
        if self.max_invalid < 1:
            raise ValueError(f"max_invalid must be >= 1, not {self.max_invalid}")
        if not 0 <= self.step_cost <= 0.25:
            raise ValueError(f"step_cost must be in [0, 0.25], not {self.step_cost}")
        if self.observation_chars < 200:
            raise ValueError(f"observation_chars must be >= 200, not {self.observation_chars}")


@dataclass
class EpisodeResult:
    """How an episode ended."""

    outcome: Outcome
    reward: float
    steps: int
    ended: str
    """``submit``, ``step_limit``, ``invalid_actions``, ``sandbox`` or ``limit``."""
    failing_before: list[str]
    failing_after: list[str] = field(default_factory=list)
    tests_passed: bool = False
    touched_tests: list[str] = field(default_factory=list)
    edits_applied: list[str] = field(default_factory=list)
    blocked_reason: str = ""

    def info(self) -> dict[str, str]:
        """The facts worth keeping on the episode (``Episode.info``)."""
        out = {
            "ended": self.ended,
            "steps": str(self.steps),
            "tests_passed": str(self.tests_passed).lower(),
            "failing_before": str(len(self.failing_before)),
            "failing_after": str(len(self.failing_after)),
            "edits_applied": str(len(self.edits_applied)),
        }
        if self.touched_tests:
            out["touched_tests"] = ",".join(self.touched_tests)
        if self.blocked_reason:
            out["blocked_reason"] = self.blocked_reason[:300]
        return out


def reward_of(
    outcome: Outcome, steps: int, *, fixed: int = 0, failing_before: int = 1, step_cost: float
) -> float:
    """The environment reward (see the module docstring)."""
    extra = step_cost * max(0, steps - 2)
    if outcome == "success":
        return round(max(0.5, 1.0 - extra), 6)
    if outcome == "partial":
        share = fixed / max(1, failing_before)
        return round(min(1.0, max(0.0, 0.5 * share - extra)), 6)
    return 0.0


# -- reading and writing an untrusted directory ----------------------------------------------------


class UnsafePath(AiosError, OSError):
    """A path in the task directory is a symlink, not a regular file, too big, or escapes."""


def _parts(rel: str) -> tuple[str, ...]:
    path = PurePosixPath(rel)
    if path.is_absolute() or not path.parts or any(p in ("..", ".") for p in path.parts):
        raise UnsafePath(errno.EINVAL, f"{rel!r} is not a plain relative path")
    return path.parts


@contextlib.contextmanager
def _parent_fd(root: Path, parts: Sequence[str], *, create: bool) -> Iterator[int]:
    """A descriptor of the directory holding ``parts[-1]``, walked without following symlinks."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name in parts[:-1]:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise UnsafePath(exc.errno, f"{name!r} is not a directory") from exc
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def read_text(root: Path, rel: str, *, limit: int = _READ_LIMIT) -> str | None:
    """The text of ``root/rel`` (a regular file, no symlink on the way), ``None`` when it is
    missing. Raises ``UnsafePath`` for a symlink, a non-regular file or one over ``limit``."""
    parts = _parts(rel)
    try:
        with _parent_fd(root, parts, create=False) as dir_fd:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise UnsafePath(exc.errno, f"{rel} cannot be opened: {exc.strerror}") from exc
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafePath(errno.EINVAL, f"{rel} is not a regular file")
                if st.st_size > limit:
                    raise UnsafePath(errno.EFBIG, f"{rel} is larger than {limit} bytes")
                with os.fdopen(fd, "rb", closefd=False) as f:
                    data = f.read(limit + 1)
            finally:
                os.close(fd)
    except UnsafePath as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    return data.decode("utf-8", "replace")


def write_text(root: Path, rel: str, text: str) -> None:
    """Write ``root/rel``, replacing whatever entry has that name (a symlink or a FIFO is
    removed, never followed). Raises ``UnsafePath`` when a directory on the way is not one."""
    parts = _parts(rel)
    with _parent_fd(root, parts, create=True) as dir_fd:
        name = parts[-1]
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise UnsafePath(errno.EISDIR, f"{rel} is a directory")
            os.unlink(name, dir_fd=dir_fd)
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd
        )
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))


def materialise(root: Path, files: dict[str, str]) -> None:
    for rel, text in sorted(files.items()):
        write_text(root, rel, text)


# -- observations ----------------------------------------------------------------------------------

_RAN = re.compile(r"^(Ran \d+ tests?) in [0-9.]+s$", re.MULTILINE)
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def normalise(output: str, workdir: Path) -> str:
    """Command output with what differs run to run masked: the task directory's path, unittest's
    run time, memory addresses."""
    out = output.replace(str(workdir) + "/", "./").replace(str(workdir), ".")
    out = _RAN.sub(r"\1", out)
    return _ADDRESS.sub("0x…", out)


def clip(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its head and tail, the middle replaced by a note."""
    if len(text) <= limit:
        return text
    head = (limit * 2) // 3
    tail = limit - head - 40
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


def summary_of(task: ShellTask, limit: int = 600) -> str:
    """One line of what the task is: the code to fix and the failing tests with their reasons
    (the statement's ``- <test id>: <reason>`` lines), without the statement's boilerplate."""
    code = ", ".join(p for p in task.files if p not in task.test_files)
    failures = [line[2:].strip() for line in task.statement.splitlines() if line.startswith("- ")]
    listed = "; ".join(failures) or ", ".join(task.failing_tests)
    return clip(f"task: fix {code}; failing: {listed}", limit)


def _defined_names(files: dict[str, str], code_paths: Sequence[str]) -> set[str]:
    names: set[str] = set()
    for path in code_paths:
        try:
            tree = parse(files[path])
        except (SyntaxError, ValueError, KeyError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
    return names


def _grep_names(task: ShellTask, limit: int) -> list[str]:
    from .assemble import pointed_functions

    code = [p for p in task.files if p not in task.test_files and p.endswith(".py")]
    tests = {PurePosixPath(p).stem: task.files[p] for p in task.test_files if p.endswith(".py")}
    try:
        pointed = pointed_functions(tests, task.failing_tests)
    except SyntaxError:
        pointed = set()
    return sorted(pointed & _defined_names(task.files, code))[:limit]


def _show_regions(task: ShellTask, context: int) -> list[tuple[str, int, int]]:
    regions: list[tuple[str, int, int]] = []
    for edit in task.candidate_edits:
        line = _edit_line(edit)
        region = (edit.path, max(1, line - context), line + context)
        if line and region not in regions:
            regions.append(region)
    return sorted(regions)


def _edit_line(edit: CandidateEdit) -> int:
    m = re.match(r"^[^:]+:(\d+):", edit.label)
    return int(m.group(1)) if m else 0


# -- the episode -----------------------------------------------------------------------------------


class ShellEpisode:
    """One episode of ``task`` (see the module docstring). Use as a context manager, or call
    :meth:`close`: it removes the task directory."""

    def __init__(
        self,
        task: ShellTask,
        executor: Executor,
        *,
        config: ShellEnvConfig | None = None,
        seed: int = 0,
        max_steps: int | None = None,
        work_root: Path | None = None,
        progress_cache: dict[str, float] | None = None,
    ) -> None:
        """``progress_cache``: potentials by the code's content, shared by the episodes of a
        host (a dict; a test run is done once per distinct state of a task's code)."""
        self.task = task
        self.executor = executor
        self.config = config or ShellEnvConfig()
        self.seed = seed
        self.max_steps = max_steps or self.config.max_steps
        self.workdir = Path(tempfile.mkdtemp(prefix="aios-shell-ep-", dir=work_root))
        self.steps = 0
        self.invalid_streak = 0
        self.applied: list[tuple[str, str, str]] = []
        """(label, path, text before) of each applied edit, oldest first."""
        self.undone_labels: set[str] = set()
        self.undone: dict[str, str] = {}
        """Short label (``path:line``) of each edit undone -> what the tests said then."""
        self.result: EpisodeResult | None = None
        self.progress = 0.0
        """The last step's progress (see the module docstring)."""
        self._reads: set[str] = set()
        """Reads done since the code last changed (``repeat_reads``)."""
        self._potential = 0.0
        self._progress_cache = progress_cache if progress_cache is not None else {}
        self._code_paths = [p for p in task.files if p not in task.test_files]
        self._greps = _grep_names(task, self.config.max_greps)
        self._regions = _show_regions(task, self.config.show_context)
        self._edits = {e.label: e for e in task.candidate_edits}
        try:
            materialise(self.workdir, dict(task.files))
        except BaseException:
            self.close()  # a task that cannot be laid out leaves no directory behind
            raise
        self.last_action = ""
        self.last_output = ""
        self.tests_state = "not run"
        self._summary = summary_of(task)
        self.observation = self._observe()

    # -- lifecycle ----------------------------------------------------------------------------------
    def close(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ShellEpisode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def done(self) -> bool:
        return self.result is not None

    # -- what the policy sees -----------------------------------------------------------------------
    @property
    def candidates(self) -> list[str]:
        """The actions offered now (empty once the episode is done)."""
        if self.done:
            return []
        applied = {label for label, _, _ in self.applied}
        reads = [RUN_TESTS]
        reads += [f"show {path}:{a}-{b}" for path, a, b in self._regions]
        reads += [f"grep {name}" for name in self._greps]
        out = reads if self.config.repeat_reads else [r for r in reads if r not in self._reads]
        if not self.config.offer_undone:
            applied |= {e.label for e in self.task.candidate_edits if e.label in self.undone_labels}
        out += [e.label for e in self.task.candidate_edits if e.label not in applied]
        if self.applied:
            out.append(UNDO)
        out.append(SUBMIT)
        return out

    def _observe(self) -> str:
        """The first observation is the whole statement; later ones a one-line task summary,
        the state (edits applied, what the tests said since the last change) and the last
        action's output. Short on purpose: a student that pools its input should see the state
        change, not drown it in the statement."""
        if not self.last_action:
            return f"{self.task.statement}\n\n[step 1 of {self.max_steps}; no action yet]"
        applied = (
            ", ".join(label.split(": ", 1)[0] for label, _, _ in self.applied)
            if self.applied
            else "none"
        )
        undone = ""
        if self.config.show_undone and self.undone:
            undone = "; edits undone: " + ", ".join(
                f"{label} (tests: {tests})" for label, tests in self.undone.items()
            )
        return (
            f"{self._summary}\n"
            f"[step {self.steps + 1} of {self.max_steps}; edits applied: {applied}{undone}; "
            f"tests: {self.tests_state}]\n"
            f"$ {self.last_action}\n{self.last_output}"
        )

    # -- acting -------------------------------------------------------------------------------------
    def step(self, action: str) -> str:
        """Take ``action``; returns the new observation. The episode may end (``done``): at
        ``submit``, the step limit, too many invalid actions or a blocking command."""
        if self.done:
            raise RuntimeError("the episode is over")
        self.steps += 1
        self.last_action = action.strip()[:500]
        self.progress = 0.0
        try:
            did = self._act(action.strip())
            if did == "read":
                self._reads.add(action.strip())
            elif did == "change":
                self._reads.clear()
                if self.config.progress and self.result is None:
                    potential = self._potential_now()
                    self.progress = round(potential - self._potential, 6)
                    self._potential = potential
        except SandboxError as exc:
            self._end_blocked("sandbox", f"sandbox error: {exc}")
        if not self.done and self.steps >= self.max_steps:
            self._evaluate("step_limit")
        self.observation = self._observe()
        return self.observation

    def _act(self, action: str) -> str | None:
        """Do ``action``; returns what it was: ``"read"`` (the tests, ``show``, ``grep``: the
        code cannot have changed), ``"change"`` (an edit, an undo, a shell command: it may
        have), ``None`` (``submit``, an invalid action)."""
        if "\x00" in action:  # no path, pattern or command holds one (a model can write it)
            return self._invalid("a NUL character cannot be part of an action")
        if action == SUBMIT:
            self.invalid_streak = 0
            self._evaluate("submit")
            self.last_output = "submitted"
            return None
        if action == RUN_TESTS:
            self.invalid_streak = 0
            self.last_output = self._run_tests()
            return "read"
        if action in self._edits and action in self.candidates:
            self.invalid_streak = 0
            self.last_output = self._apply(self._edits[action])
            self.tests_state = "not run since the last change"
            return "change"
        if action == UNDO and self.applied:
            self.invalid_streak = 0
            self.last_output = self._undo()
            self.tests_state = "not run since the last change"
            return "change"
        shown = self._show(action)
        if shown is not None:
            self.invalid_streak = 0
            self.last_output = shown
            return "read"
        grepped = self._grep(action)
        if grepped is not None:
            self.invalid_streak = 0
            self.last_output = grepped
            return "read"
        if action and self.config.allow_free_text and action not in self._edits:
            self.invalid_streak = 0
            self.last_output = self._shell(action)
            self.tests_state = "not run since the last command"
            return "change"
        return self._invalid()

    def _invalid(self, why: str = "") -> None:
        """Count an invalid action (``why``: what was wrong with it, for the observation);
        ``max_invalid`` in a row end the episode."""
        self.invalid_streak += 1
        self.last_output = (
            f"invalid action{f': {why}' if why else ''} ({self.invalid_streak} in a row; "
            f"{self.config.max_invalid} end the episode)"
        )
        if self.invalid_streak >= self.config.max_invalid:
            self._end_blocked("invalid_actions", f"{self.invalid_streak} invalid actions in a row")
        return None

    def _exec(self, argv: list[str], workdir: Path) -> ExecResult:
        """Run ``argv`` through the executor (its config holds the wall-clock limit)."""
        return self.executor.run(argv, workdir)

    def _limit_hit(self, result: ExecResult) -> bool:
        """A limit ended the command (not an output flood): the episode is blocked."""
        if result.blocked_reason and result.killed_by != "output_limit":
            self._end_blocked("limit", result.blocked_reason)
            return True
        return False

    def _test_argv(self) -> list[str]:
        """The task's test command, with its per-test timeout."""
        return command_argv(timed_command(self.task.test_command, self.task.test_timeout_s))

    def _run_tests(self) -> str:
        result = self._exec(self._test_argv(), self.workdir)
        output = clip(normalise(result.output, self.workdir), self.config.observation_chars)
        if self._limit_hit(result):
            return output + f"\n[blocked: {result.blocked_reason}]"
        if result.exit_code == 0:
            self.tests_state = "all pass"
            return output + "\n[tests: all pass]"
        failing = failing_test_ids(result.output)
        summary = f"{len(failing)} failing" if failing else f"exit status {result.exit_code}"
        self.tests_state = summary
        return output + f"\n[tests: {summary}]"

    def _shell(self, command: str) -> str:
        result = self._exec(["/bin/sh", "-c", command], self.workdir)
        output = clip(normalise(result.output, self.workdir), self.config.observation_chars)
        if self._limit_hit(result):
            return output + f"\n[blocked: {result.blocked_reason}]"
        note = "\n[output truncated]" if result.truncated else ""
        return f"{output}{note}\n[exit status {result.exit_code}]"

    def _apply(self, edit: CandidateEdit) -> str:
        try:
            text = read_text(self.workdir, edit.path)
        except UnsafePath as exc:
            return f"edit not applied: {exc.strerror or exc}"
        if text is None:
            return f"edit not applied: {edit.path} does not exist"
        count = text.count(edit.old)
        if count != 1:
            return f"edit not applied: its text occurs {count} times in {edit.path}"
        try:
            write_text(self.workdir, edit.path, text.replace(edit.old, edit.new, 1))
        except (UnsafePath, OSError) as exc:
            return f"edit not applied: {exc}"
        self.applied.append((edit.label, edit.path, text))
        return f"applied: {edit.label}"

    def _undo(self) -> str:
        label, path, before = self.applied.pop()
        self.undone[label.split(": ", 1)[0]] = self.tests_state
        self.undone_labels.add(label)
        try:
            write_text(self.workdir, path, before)
        except (UnsafePath, OSError) as exc:
            return f"undo failed: {exc}"
        return f"undone: {label}"

    def _show(self, action: str) -> str | None:
        m = re.fullmatch(r"show (\S+):(\d+)-(\d+)", action)
        if m is None:
            return None
        path, a, b = m.group(1), int(m.group(2)), int(m.group(3))
        if path not in self.task.files or not 1 <= a <= b:
            return None
        try:
            text = read_text(self.workdir, path)
        except UnsafePath as exc:
            return f"cannot show {path}: {exc.strerror or exc}"
        if text is None:
            return f"{path} does not exist"
        lines = text.splitlines()[a - 1 : min(b, a + 199)]
        body = "\n".join(f"{a + i:5d}  {line}" for i, line in enumerate(lines))
        return clip(body, self.config.observation_chars)

    def _grep(self, action: str) -> str | None:
        m = re.fullmatch(r"grep (\w+)", action)
        if m is None:
            return None
        word = re.compile(rf"\b{re.escape(m.group(1))}\b")
        hits: list[str] = []
        for path in sorted(self.task.files):
            try:
                text = read_text(self.workdir, path) or ""
            except UnsafePath:
                continue
            hits += [
                f"{path}:{n}: {line.strip()}"
                for n, line in enumerate(text.splitlines(), 1)
                if word.search(line)
            ]
        return clip("\n".join(hits) or "(no match)", self.config.observation_chars)

    # -- ending -------------------------------------------------------------------------------------
    def _end_blocked(self, ended: str, reason: str) -> None:
        self.result = EpisodeResult(
            outcome="blocked",
            reward=0.0,
            steps=self.steps,
            ended=ended,
            failing_before=list(self.task.failing_tests),
            edits_applied=[label for label, _, _ in self.applied],
            blocked_reason=reason,
        )

    def _clean_copy(self) -> tuple[dict[str, str], list[str]]:
        """The files a judgement runs on (the code as the agent left it, the tests as given)
        and the test files the agent touched."""
        touched: list[str] = []
        clean: dict[str, str] = {}
        for path in self.task.test_files:
            try:
                now = read_text(self.workdir, path)
            except UnsafePath:
                now = None
            if now != self.task.files.get(path):
                touched.append(path)
            clean[path] = self.task.files[path]
        for path in self._code_paths:
            try:
                now = read_text(self.workdir, path)
            except UnsafePath:
                now = None
            if now is not None:
                clean[path] = now
        return clean, touched

    def _judge(self, clean: dict[str, str]) -> ExecResult:
        """The task's tests run on ``clean``, laid out in a directory of their own."""
        with tempfile.TemporaryDirectory(prefix="aios-shell-eval-") as tmp:
            root = Path(tmp)
            materialise(root, clean)
            return self._exec(self._test_argv(), root)

    def _potential_now(self) -> float:
        """The potential of the code as it is now (see the module docstring), cached by its
        content."""
        clean, _ = self._clean_copy()
        digest = hashlib.sha256(self.task.task_id.encode())
        for path in sorted(clean):
            digest.update(f"\0{path}\0{len(clean[path])}\0".encode() + clean[path].encode())
        key = digest.hexdigest()
        if key in self._progress_cache:
            return self._progress_cache[key]
        result = self._judge(clean)
        before = set(self.task.failing_tests)
        if result.blocked_reason and result.killed_by != "output_limit":
            potential = -1.0
        elif result.exit_code == 0:
            potential = 1.0
        else:
            after = set(failing_test_ids(result.output))
            if not after or after - before:
                potential = -0.5
            elif after < before:
                potential = round(0.5 * len(before - after) / len(before), 6)
            else:
                potential = 0.0
        self._progress_cache[key] = potential
        return potential

    def _evaluate(self, ended: str) -> None:
        """Judge the task on a clean copy (see the module docstring)."""
        clean, touched = self._clean_copy()
        before = sorted(self.task.failing_tests)
        result = self._judge(clean)
        applied = [label for label, _, _ in self.applied]
        if result.blocked_reason and result.killed_by != "output_limit":
            self._end_blocked("limit", f"evaluation: {result.blocked_reason}")
            return
        passed = result.exit_code == 0
        after = [] if passed else failing_test_ids(result.output)
        if passed and not touched:
            outcome: Outcome = "success"
        elif (
            not touched
            and not passed
            and after
            and set(after) < set(before)  # fewer fail, and nothing new fails
        ):
            outcome = "partial"
        else:
            outcome = "failure"
        fixed = len(set(before) - set(after))
        self.result = EpisodeResult(
            outcome=outcome,
            reward=reward_of(
                outcome,
                self.steps,
                fixed=fixed,
                failing_before=len(before),
                step_cost=self.config.step_cost,
            ),
            steps=self.steps,
            ended=ended,
            failing_before=before,
            failing_after=after,
            tests_passed=passed,
            touched_tests=touched,
            edits_applied=applied,
        )


def run_episode(
    task: ShellTask,
    executor: Executor,
    policy: Callable[[str, list[str], int], str],
    *,
    config: ShellEnvConfig | None = None,
    seed: int = 0,
    prefix: Sequence[str] = (),
    max_steps: int | None = None,
) -> tuple[EpisodeResult, list[tuple[str, list[str], str]]]:
    """Run a whole episode in this process: ``prefix`` replayed, then ``policy(observation,
    candidates, step)`` until the end. Returns the result and the (observation, candidates,
    action) of every step."""
    trajectory: list[tuple[str, list[str], str]] = []
    with ShellEpisode(task, executor, config=config, seed=seed, max_steps=max_steps) as ep:
        while not ep.done:
            obs, cands = ep.observation, ep.candidates
            i = len(trajectory)
            action = prefix[i] if i < len(prefix) else policy(obs, cands, i)
            trajectory.append((obs, cands, action))
            ep.step(action)
        assert ep.result is not None
        return ep.result, trajectory
