"""A task's test command with a time limit per test: a test still running after ``SECONDS`` is
stopped, counted as failing, and the run goes on with the next test.

Not imported by aios-rl: :mod:`.pertest` hands this file's text to the task's interpreter as
the program of ``-c``, in the sandbox, as
``{python} [flags] -c <this text> SECONDS (-m MODULE | SCRIPT) [ARGS...]``. It then runs the
module or script as ``python -m MODULE`` or ``python SCRIPT`` would (``sys.argv``, ``sys.path[0]``,
``__main__``), after two patches, both armed only while a test runs:

- every pytest session of the process (``-m pytest``, and scripts that call ``pytest.main``)
  gets a plugin that times each test's setup and call together and its teardown apart (a
  SIGALRM timer, the way pytest-timeout's ``signal`` method does); an expired test fails with
  ``Failed: per-test timeout ...`` and no traceback. A test that pytest-timeout itself times
  (its marker, option or ini setting) is left to it;
- ``unittest.TestCase.run`` (``-m unittest``, scripts) is timed the same way, setUp, the test,
  tearDown and cleanups together; an expired test is an ``ERROR`` whose text is one line.

The stop is an exception raised in the test's main thread (a ``BaseException``, so
``except Exception`` in the looping code does not swallow it), repeated every ``SECONDS`` while
the test goes on. It cannot end a test that blocks SIGALRM or sets a SIGALRM timer of its own
(which replaces this one), loops in C code that never returns to the interpreter, or hangs in
another thread or process; nor a hang outside any test (collection, ``setUpClass``). The run's wall-clock limit ends those, and the run is then not
judged. The message has no traceback on purpose: where a loop was interrupted changes from run
to run, and a task's test output must not.
"""

import contextlib
import importlib.machinery
import os
import runpy
import signal
import sys
import time

NOTE = "per-test timeout: the test ran longer than {seconds:g} s and was stopped"


class TestTimeout(BaseException):
    """A unittest test ran past the per-test timeout."""


_in_pytest = [0]
"""Pytest phases running: ``unittest.TestCase.run`` under pytest is timed by the plugin."""


@contextlib.contextmanager
def alarm(delay, every, expire):
    """Call ``expire`` (which raises) in the main thread after ``delay`` seconds, then every
    ``every`` seconds, until the block ends. Nests: a timer armed around this one is suspended
    and resumed with what it had left."""

    def handler(signum, frame):
        expire()

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, handler)
    outer, outer_every = signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-3), every)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:
            left = max(outer - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer_every)


@contextlib.contextmanager
def pytest_phase(item, delay, seconds, expire):
    """One phase of a test under pytest, timed unless pytest-timeout times it."""
    _in_pytest[0] += 1
    try:
        if item.get_closest_marker("timeout") or getattr(item.config, "_env_timeout", None):
            yield
        else:
            with alarm(delay, seconds, expire):
                yield
    finally:
        _in_pytest[0] -= 1


def pytest_plugin(seconds):
    """The pytest plugin (built once pytest is imported)."""
    import pytest

    message = NOTE.format(seconds=seconds)

    def expire():
        pytest.fail(message, pytrace=False)

    class PerTestTimeout:
        def __init__(self):
            self.deadline = 0.0

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_setup(self, item):
            self.deadline = time.monotonic() + seconds
            with pytest_phase(item, seconds, seconds, expire):
                yield

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_call(self, item):
            with pytest_phase(item, self.deadline - time.monotonic(), seconds, expire):
                yield

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_teardown(self, item, nextitem):
            with pytest_phase(item, seconds, seconds, expire):
                yield

    return PerTestTimeout()


def patch_pytest(config_module, seconds):
    """Register the plugin with every pytest plugin manager (one per session: ``-m pytest``,
    ``pytest.main``), whatever entry point made it."""
    manager = config_module.PytestPluginManager
    init = manager.__init__

    def timed_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.register(pytest_plugin(seconds), "aios-per-test-timeout")

    manager.__init__ = timed_init


class PytestConfigFinder:
    """Patches ``_pytest.config`` as it is imported, so a run that does not use pytest does not
    import it."""

    def __init__(self, seconds):
        self.seconds = seconds

    def find_spec(self, name, path=None, target=None):
        if name != "_pytest.config":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        sys.meta_path.remove(self)
        loader, seconds = spec.loader, self.seconds

        class Loader:
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch_pytest(module, seconds)

        spec.loader = Loader()
        return spec


def patch_unittest(seconds):
    import unittest

    message = NOTE.format(seconds=seconds)
    run, describe = unittest.TestCase.run, unittest.TestResult._exc_info_to_string

    def expire():
        raise TestTimeout(message)

    def timed_run(self, result=None):
        if _in_pytest[0]:  # pytest runs this test and times it
            return run(self, result)
        with alarm(seconds, seconds, expire):
            return run(self, result)

    def exc_info_to_string(self, err, test):
        if err[0] is TestTimeout:
            return f"TestTimeout: {err[1]}\n"
        return describe(self, err, test)

    unittest.TestCase.run = timed_run
    unittest.TestResult._exc_info_to_string = exc_info_to_string


def main():
    seconds = float(sys.argv[1])
    rest = sys.argv[2:]
    if "_pytest.config" in sys.modules:
        patch_pytest(sys.modules["_pytest.config"], seconds)
    else:
        sys.meta_path.insert(0, PytestConfigFinder(seconds))
    patch_unittest(seconds)
    if rest[:1] == ["-m"]:
        sys.argv = [rest[1], *rest[2:]]
        if sys.path[:1] == [""]:  # not -I or -P: put first what ``-m`` would
            sys.path[0] = os.getcwd()
        runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(rest)
        if sys.path[:1] == [""]:  # not -I or -P: put first what a script run would
            sys.path[0] = os.path.dirname(os.path.abspath(rest[0]))
        runpy.run_path(rest[0], run_name="__main__")


if __name__ == "__main__":
    main()
