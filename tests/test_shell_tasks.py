"""Shell task generation: mutation operators (pure), generated and real-code tasks verified by
running their tests for real, splits and determinism, and the task store against a real
nats-server."""

from __future__ import annotations

import asyncio
import collections
import json
import re
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus, connect
from aios_rl.envs.shell import mutations
from aios_rl.envs.shell.assemble import failure_reasons
from aios_rl.envs.shell.benchmark import benchmark_generate
from aios_rl.envs.shell.families import FAMILIES, VARIANTS, render
from aios_rl.envs.shell.generate import (
    HELDOUT_PERCENT,
    TEST_COMMAND,
    candidates,
    generate,
    original_runs,
    split_of,
)
from aios_rl.envs.shell.realcode import FAST_MODULES, generate_real, prepare
from aios_rl.envs.shell.store import ShellTaskStore as TaskStore
from aios_rl.envs.shell.store import read_dir, write_dir
from aios_rl.envs.shell.verify import (
    EditError,
    Job,
    RunCache,
    apply_edit,
    check_task,
    default_cache_dir,
    drop_bad_distractors,
    failing_test_ids,
    run_many,
    task_id_of,
)
from aios_rl.state.tasks import CorruptTaskError, UnknownTaskError
from contracts import CandidateEdit, Names, ShellTask
from contracts.subjects import OBJECTS_TASKS

pytestmark = pytest.mark.timeout(300)

SEED = 7

SAMPLE = '''\
"""A sample module."""


class Counter:
    def __init__(self, start=0, step=1):
        self.value = start
        self.step = step

    def bump(self):
        self.value += self.step
        return self.value


def window(items, lo, hi):
    if lo < 0 or hi > len(items):
        raise ValueError("out of range")
    return items[lo:hi]


def total(xs, scale=2):
    acc = 0
    for x in xs:
        if x >= 10 and not x % 2:
            acc = acc + x * scale
    return max(acc, 0)


def pad(text, width):
    return text.ljust(width, ".")


def tail(xs):
    return xs[1:]
'''

EXPECTED = {
    "off_by_one": ("if lo < 0 or hi > len(items):", "if lo <= 0 or hi > len(items):"),
    "flipped_comparison": ("if x >= 10 and not x % 2:", "if x <= 10 and not x % 2:"),
    "wrong_operator": ("acc = acc + x * scale", "acc = acc - x * scale"),
    "swapped_arguments": ('return text.ljust(width, ".")', 'return text.ljust(".", width)'),
    "wrong_constant": ("acc = 0", "acc = 1"),
    "missing_return": ("return max(acc, 0)", "max(acc, 0)"),
    "wrong_variable": ("acc = acc + x * scale", "acc = acc + acc * scale"),
    "inverted_condition": (
        "if lo < 0 or hi > len(items):",
        "if not (lo < 0 or hi > len(items)):",
    ),
    "wrong_slice": ("return items[lo:hi]", "return items[lo:hi + 1]"),
    "wrong_default": ("def total(xs, scale=2):", "def total(xs, scale=3):"),
    "swapped_boolean": ("if lo < 0 or hi > len(items):", "if lo < 0 and hi > len(items):"),
    "wrong_builtin": ("return max(acc, 0)", "return min(acc, 0)"),
    "wrong_attribute": ("self.value += self.step", "self.value += self.value"),
}


# -- pure: mutation operators ----------------------------------------------------------------------


def test_every_operator_has_an_expectation() -> None:
    assert set(EXPECTED) == set(mutations.OPERATORS)
    assert len(mutations.OPERATORS) >= 10


@pytest.mark.parametrize("operator", sorted(EXPECTED))
def test_operator_on_sample_code(operator: str) -> None:
    found = mutations.sites(SAMPLE, [operator])
    assert found and all(s.operator == operator for s in found)
    changes = {}
    for site in found:
        mutant = mutations.apply(SAMPLE, site, "sample.py")
        gt = mutant.ground_truth
        assert (gt.path, gt.operator) == ("sample.py", operator)
        # One location: only the site's line differs, and its snippets are unique and whole lines.
        changed = [
            i + 1
            for i, (a, b) in enumerate(
                zip(SAMPLE.splitlines(), mutant.source.splitlines(), strict=True)
            )
            if a != b
        ]
        assert changed == [site.line] == [gt.line]
        assert SAMPLE.count(gt.original) == 1 and mutant.source.count(gt.mutated) == 1
        assert gt.original.endswith("\n") and gt.mutated.endswith("\n")
        fixed = apply_edit(
            {"sample.py": mutant.source},
            CandidateEdit(label="fix", path="sample.py", old=gt.mutated, new=gt.original),
        )
        assert fixed == {"sample.py": SAMPLE}
        changes[mutations.changed_lines(gt.original, gt.mutated)] = site
    assert EXPECTED[operator] in changes, sorted(changes)


def test_sites_are_deterministic_sorted_and_distinct() -> None:
    first = mutations.sites(SAMPLE)
    assert first == mutations.sites(SAMPLE) == sorted(first)
    keys = [(s.start, s.end, s.replacement) for s in first]
    assert len(keys) == len(set(keys))
    assert mutations.sites(SAMPLE, ["wrong_slice"]) == [
        s for s in first if s.operator == "wrong_slice"
    ]
    with pytest.raises(KeyError, match="unknown mutation operator"):
        mutations.sites(SAMPLE, ["no_such_operator"])


def test_snippets_widen_until_unique() -> None:
    source = "def f(a, b):\n    x = a + 1\n    return x\n\n\ndef g(a, b):\n    x = a + 1\n    return x * 2\n"
    site = next(
        s for s in mutations.sites(source, ["wrong_operator"]) if s.line == 2 and s.original == "+"
    )
    gt = mutations.apply(source, site, "m.py").ground_truth
    assert gt.line == 2
    assert gt.original == "    x = a + 1\n    return x\n"
    assert gt.mutated == "    x = a - 1\n    return x\n"


def test_docstrings_fstrings_and_main_blocks_are_left_alone() -> None:
    source = (
        '"""Doc 1."""\n\n\ndef f(x):\n    """Doc 2."""\n    return f"{x + 1}"\n\n\n'
        'if __name__ == "__main__":\n    print(f(1) + 2)\n'
    )
    found = mutations.sites(source)
    assert all(s.line == 6 and s.operator == "missing_return" for s in found), found


def test_apply_refuses_a_foreign_or_equivalent_site() -> None:
    site = mutations.sites(SAMPLE, ["wrong_constant"])[0]
    with pytest.raises(mutations.MutationError):
        mutations.apply("x = 1\n" + SAMPLE, site, "sample.py")
    noop = mutations.Site(
        start=site.start,
        end=site.end,
        operator="wrong_constant",
        replacement="(" + site.original + ")",
        line=site.line,
        function=site.function,
        original=site.original,
    )
    with pytest.raises(mutations.MutationError, match="changes nothing"):
        mutations.apply(SAMPLE, noop, "sample.py")


@pytest.mark.parametrize("family", ["matrix", "tokenizer", "date_math", "scheduler"])
def test_every_site_of_a_family_round_trips(family: str) -> None:
    rendered = render(FAMILIES[family], 1)
    source = rendered.files[rendered.module_path]
    for site in mutations.sites(source):
        mutant = mutations.apply(source, site, rendered.module_path)
        gt = mutant.ground_truth
        assert mutant.source.count(gt.mutated) == 1
        assert mutant.source.replace(gt.mutated, gt.original) == source


def test_real_module_sites_round_trip() -> None:
    rendered = prepare("textwrap")
    source = rendered.files[rendered.module_path]
    for site in mutations.sites(source)[::3]:
        mutant = mutations.apply(source, site, rendered.module_path)
        gt = mutant.ground_truth
        assert mutant.source.count(gt.mutated) == 1
        assert mutant.source.replace(gt.mutated, gt.original) == source


# -- pure: families, splits, ids --------------------------------------------------------------------


def test_families_and_variants() -> None:
    assert len(FAMILIES) >= 12
    for family in FAMILIES.values():
        texts = {render(family, v).files[render(family, v).module_path] for v in range(VARIANTS)}
        assert len(texts) == VARIANTS, f"{family.name}: variants must differ"
        assert render(family, 0) == render(family, 0)
    with pytest.raises(ValueError):
        render(FAMILIES["stack"], VARIANTS)


def test_split_rule() -> None:
    triples = [(f, op, v) for f in FAMILIES for op in mutations.OPERATORS for v in range(VARIANTS)]
    held = [t for t in triples if split_of(*t) == "heldout"]
    assert abs(len(held) / len(triples) - HELDOUT_PERCENT / 100) < 0.06
    assert all(split_of(*t) == split_of(*t) for t in triples)
    train = {c.triple for c in candidates("train", 0)}
    heldout = {c.triple for c in candidates("heldout", 0)}
    assert train and heldout and not train & heldout
    assert {t[0] for t in heldout} == set(FAMILIES)


def test_failing_ids_and_reasons_parse_unittest_output() -> None:
    output = (
        "======================================================================\n"
        "ERROR: test_c (test_f.T.test_c)\n"
        "----------------------------------------------------------------------\n"
        "Traceback (most recent call last):\n"
        '  File "/x/f.py", line 9, in test_c\n'
        "    raise KeyError('x')\n"
        "KeyError: 'x'\n\n"
        "======================================================================\n"
        "FAIL: test_b (test_f.T.test_b) (i=0)\n"
        "----------------------------------------------------------------------\n"
        "Traceback (most recent call last):\n"
        '  File "/x/f.py", line 4, in test_b\n'
        "    self.assertEqual(i, 5)\n"
        "AssertionError: 0 != 5\n\n"
        "======================================================================\n"
        "FAIL: test_b (test_f.T.test_b) (i=1)\n"
        "----------------------------------------------------------------------\n"
        "AssertionError: 1 != 5\n\n"
        "----------------------------------------------------------------------\n"
        "Ran 2 tests in 0.001s\n\nFAILED (failures=2, errors=1)\n"
    )
    assert failing_test_ids(output) == ["test_f.T.test_b", "test_f.T.test_c"]
    assert failure_reasons(output) == {
        "test_f.T.test_c": "KeyError: 'x'",
        "test_f.T.test_b": "AssertionError: 0 != 5",
    }


def test_task_id_is_a_content_address() -> None:
    files = {"a.py": "x = 1\n", "test_a.py": "import a\n"}
    tid = task_id_of(files, TEST_COMMAND)
    assert re.fullmatch(r"[0-9a-f]{16}", tid)
    assert tid == task_id_of(dict(reversed(files.items())), TEST_COMMAND)
    assert tid != task_id_of({**files, "a.py": "x = 2\n"}, TEST_COMMAND)
    assert tid != task_id_of(files, [*TEST_COMMAND, "-v"])


def test_apply_edit_needs_exactly_one_occurrence() -> None:
    files = {"m.py": "a = 1\na = 1\nb = 2\n"}
    with pytest.raises(EditError, match="2 times"):
        apply_edit(files, CandidateEdit(label="x", path="m.py", old="a = 1\n", new=""))
    with pytest.raises(EditError, match="no file"):
        apply_edit(files, CandidateEdit(label="x", path="n.py", old="b", new="c"))
    assert apply_edit(files, CandidateEdit(label="x", path="m.py", old="b = 2", new="b = 3")) == {
        "m.py": "a = 1\na = 1\nb = 3\n"
    }


# -- generated tasks, run for real ------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated() -> dict[str, list[ShellTask]]:
    """50 tasks of each phase 1 split. Distractors are checked on a sample below (and by
    ``benchmark_generate``), not here: that is 3 more test runs per task."""
    return {
        split: generate(50, SEED, split, check_distractors=False) for split in ("train", "heldout")
    }


def _variant_of(task: ShellTask) -> int:
    """The variant whose files the task's fix gives back (asserting there is one)."""
    fix = next(e for e in task.candidate_edits if e.is_fix)
    restored = apply_edit(task.files, fix)
    for v in range(VARIANTS):
        if render(FAMILIES[task.family], v).files == restored:
            return v
    raise AssertionError(f"task {task.task_id}: the fix does not give back any variant")


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_generated_tasks_are_verified(generated: dict[str, list[ShellTask]], split: str) -> None:
    tasks = generated[split]
    assert len(tasks) == 50 and len({t.task_id for t in tasks}) == 50
    originals = set()
    for task in tasks:
        assert (task.split, task.phase, task.source) == (split, 1, "generated")
        assert task.task_id == task_id_of(task.files, task.test_command)
        assert task.test_command == TEST_COMMAND and task.failing_tests
        assert task.test_files == [p for p in task.files if p.startswith("test_")]
        gt = task.ground_truth
        assert gt.path in task.files and gt.path not in task.test_files
        assert task.files[gt.path].count(gt.mutated) == 1
        edits = task.candidate_edits
        assert sum(e.is_fix for e in edits) == 1 and 2 <= len(edits) <= 4
        assert len({e.label for e in edits}) == len(edits)
        assert all(re.fullmatch(r"\S+\.py:\d+: `.*` -> `.*`", e.label) for e in edits)
        for test_id in task.failing_tests:
            assert test_id in task.statement
        assert f":{gt.line}:" not in task.statement and 'File "' not in task.statement
        variant = _variant_of(task)  # the fix restores the original files exactly
        assert split_of(task.family, gt.operator, variant) == split
        originals.add((task.family, variant))
    # Every original passed its tests (run once per process, by generation); every task
    # fails with exactly the failing tests it records.
    assert all(r.passed for r in original_runs(sorted(originals)).values())
    results = run_many([Job(t.files, t.test_command, 30.0) for t in tasks])
    for task, result in zip(tasks, results, strict=True):
        assert not result.passed and not result.timed_out
        assert failing_test_ids(result.output) == task.failing_tests, task.task_id


def test_splits_share_no_triple(generated: dict[str, list[ShellTask]]) -> None:
    triples = {
        split: {(t.family, t.ground_truth.operator, _variant_of(t)) for t in tasks}
        for split, tasks in generated.items()
    }
    assert not triples["train"] & triples["heldout"]
    for split, tasks in generated.items():
        assert len({t.family for t in tasks}) >= 12, split
        assert len({t.ground_truth.operator for t in tasks}) >= 10, split


def test_generation_is_deterministic_by_seed(generated: dict[str, list[ShellTask]]) -> None:
    again = generate(8, SEED, "train", check_distractors=False)
    assert again == generated["train"][:8]
    other = generate(8, SEED + 1, "train", check_distractors=False)
    assert [t.task_id for t in other] != [t.task_id for t in again]


def test_fix_passes_and_distractors_fail() -> None:
    """With distractors checked (the default), every kept distractor fails the tests."""
    sample = generate(2, SEED, "heldout")
    for task in sample:
        assert check_task(task, timeout=30.0) == [], task.task_id
        assert len(task.candidate_edits) >= 2


def test_check_task_catches_a_wrong_fix_flag(generated: dict[str, list[ShellTask]]) -> None:
    task = generated["train"][0]
    flipped = [
        msgspec.structs.replace(e, is_fix=not e.is_fix) if i < 2 else e
        for i, e in enumerate(sorted(task.candidate_edits, key=lambda e: not e.is_fix))
    ]
    problems = check_task(msgspec.structs.replace(task, candidate_edits=flipped))
    assert any("does not make the tests pass" in p for p in problems), problems
    assert any("makes the tests pass" in p and "distractor" in p for p in problems), problems


# -- real code -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_sample() -> list[ShellTask]:
    """Distractors are checked on one task below rather than at generation (3 runs a task)."""
    return generate_real(10, SEED, modules=FAST_MODULES, check_distractors=False)


def test_real_code_sample_verifies(real_sample: list[ShellTask]) -> None:
    assert len(real_sample) == 10
    assert len({t.family for t in real_sample}) >= 4
    again = generate_real(3, SEED, modules=FAST_MODULES, check_distractors=False)
    assert again == real_sample[:3]  # deterministic by seed, prefix-stable
    for task in real_sample:
        assert (task.phase, task.split) == (2, "real")
        assert task.family in FAST_MODULES
        assert re.fullmatch(rf"stdlib:{task.family}@CPython-3\.11\.\d+", task.source)
        assert set(task.test_files) == {f"test_{task.family}.py", "run_tests.py"}
        pristine = prepare(task.family).files
        fix = next(e for e in task.candidate_edits if e.is_fix)
        assert apply_edit(task.files, fix) == pristine
    results = run_many([Job(t.files, t.test_command, 60.0) for t in real_sample])
    for task, result in zip(real_sample, results, strict=True):
        assert not result.passed and not result.timed_out
        assert failing_test_ids(result.output) == task.failing_tests
    # Distractors that pass or time out are dropped (as generation does by default); then the
    # fix passes and every distractor fails.
    (checked,) = drop_bad_distractors(real_sample[:1], [prepare(real_sample[0].family).timeout])
    assert check_task(checked, timeout=30.0) == [], checked.task_id


def test_real_tests_import_the_task_copy() -> None:
    """textwrap is imported by the unittest machinery before the tests run; bisect's tests
    import it afresh with its C accelerator blocked to reach the pure-Python functions. Both
    must get the task directory's copy: a copy that breaks is what fails."""
    runner = ["{python}", "-B", "-S", "run_tests.py"]
    textwrap, bisect = prepare("textwrap").files, prepare("bisect").files
    marker = "the task's copy was imported"
    # Breaks at import: the copy is what the tests import.
    broken_textwrap = {**textwrap, "textwrap.py": f"raise ImportError({marker!r})\n"}
    # Breaks only the pure-Python bisect_right, which the C accelerator shadows in a normal
    # import: only the tests' fresh import with _bisect blocked reaches it.
    broken_bisect = {
        **bisect,
        "bisect.py": bisect["bisect.py"].replace(
            "def bisect_right(",
            f"def bisect_right(*args, **kwargs):\n    raise RuntimeError({marker!r})\n\n\n"
            "def _pristine_bisect_right(",
            1,
        ),
    }
    assert broken_bisect != bisect
    results = run_many(
        [Job(files, runner, 60.0) for files in (textwrap, bisect, broken_textwrap, broken_bisect)]
    )
    assert [r.passed for r in results] == [True, True, False, False]
    assert marker in results[2].output and marker in results[3].output
    assert any(
        t.startswith("test_bisect.TestBisectPython") for t in failing_test_ids(results[3].output)
    )
    assert not any(
        t.startswith("test_bisect.TestBisectC") for t in failing_test_ids(results[3].output)
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_hundred_real_tasks_verify() -> None:
    # The shared run cache (test runs keyed by the files and command they ran): a warm machine
    # verifies from it; the re-runs below do not use it.
    tasks = generate_real(100, 0, cache=RunCache(default_cache_dir()))
    assert len({t.task_id for t in tasks}) == 100
    families = collections.Counter(t.family for t in tasks)
    assert len(families) >= 10
    # prepare() ran the upstream tests on each pristine copy (it raises unless they pass).
    pristine = {m: prepare(m).files for m in families}
    # generate_real verified all 100 as it made them; three of every family (a module and its
    # bug-making rules) are run again here, independently of its cache.
    sample = [t for m in families for t in [t for t in tasks if t.family == m][:3]]
    results = run_many([Job(t.files, t.test_command, 60.0) for t in sample])
    for task, result in zip(sample, results, strict=True):
        assert not result.passed and not result.timed_out, task.task_id
        assert failing_test_ids(result.output) == task.failing_tests, task.task_id
        fix = next(e for e in task.candidate_edits if e.is_fix)
        assert apply_edit(task.files, fix) == pristine[task.family]


# -- the store ----------------------------------------------------------------------------------------------


async def test_task_store_round_trip(bus: Bus, generated: dict[str, list[ShellTask]]) -> None:
    store = TaskStore(bus)
    tasks = generated["train"][:5] + generated["heldout"][:3]
    first = await store.put_all(tasks)
    assert (first.stored, first.existing) == (8, 0)
    assert first.indexed == {"train": 5, "heldout": 3}
    for task in tasks:
        assert await store.get(task.task_id) == task
    assert await store.list("train") == [t.task_id for t in tasks[:5]]
    assert await store.list("heldout") == [t.task_id for t in tasks[5:]]
    assert await store.list("real") == []
    # Idempotent: a second put stores nothing and indexes nothing; new ids append in order.
    again = await store.put_all(tasks[:2] + generated["train"][5:7])
    assert (again.stored, again.existing, again.indexed) == (2, 2, {"train": 2})
    assert await store.list("train") == [t.task_id for t in generated["train"][:7]]
    with pytest.raises(UnknownTaskError):
        await store.get("0123456789abcdef")
    with pytest.raises(UnknownTaskError):
        await store.get("not a valid id!")


async def test_task_store_refuses_corrupt_tasks(
    bus: Bus, generated: dict[str, list[ShellTask]]
) -> None:
    store = TaskStore(bus)
    task = generated["train"][0]
    obs = await bus.js.object_store(bus.names.bucket(OBJECTS_TASKS))
    await obs.put(Names.object_task("shell", task.task_id), b"{not json")
    with pytest.raises(CorruptTaskError):
        await store.get(task.task_id)
    other = generated["train"][1]
    await obs.put(Names.object_task("shell", task.task_id), msgspec.json.encode(other))
    with pytest.raises(CorruptTaskError, match="does not match"):
        await store.get(task.task_id)
    with pytest.raises(CorruptTaskError, match="content address"):
        await store.put(msgspec.structs.replace(other, task_id=task.task_id))


def test_directory_round_trip(tmp_path: Path, generated: dict[str, list[ShellTask]]) -> None:
    tasks = generated["train"][:3] + generated["heldout"][:2]
    write_dir(tmp_path, tasks[:4])
    write_dir(tmp_path, tasks[3:])  # merges the indexes
    assert read_dir(tmp_path) == [*tasks[3:], *tasks[:3]]  # splits in name order
    assert read_dir(tmp_path, "train") == tasks[:3]
    one = tasks[0]
    task_dir = tmp_path / "train" / one.task_id
    assert (task_dir / "statement.md").read_text().startswith(one.statement)
    for rel, text in one.files.items():
        assert (task_dir / "files" / rel).read_text() == text
    index = json.loads((tmp_path / "index-heldout.json").read_text())
    assert index["task_ids"] == [t.task_id for t in tasks[3:]]


def test_benchmark_generate(tmp_path: Path, nats_url: str, names: Names) -> None:
    lines: list[str] = []
    summary = benchmark_generate(
        2,
        seed=SEED,
        split="heldout",
        out_dir=tmp_path,
        nats_url=nats_url,
        namespace=names.namespace,
        cache_dir=tmp_path / "cache",
        echo=lines.append,
    )
    assert summary.count == 2 and sum(summary.families.values()) == 2
    assert summary.stored is not None and summary.stored.stored == 2
    assert "2 verified heldout tasks" in lines[-1]
    assert [t.task_id for t in read_dir(tmp_path, "heldout")] == summary.task_ids

    async def stored_ids() -> list[str]:
        async with connect(nats_url, name="test", names=names) as b:
            return await TaskStore(b).list("heldout")

    assert asyncio.run(stored_ids()) == summary.task_ids
    # Again, from the run cache: the same tasks, already stored.
    again = benchmark_generate(
        2,
        seed=SEED,
        split="heldout",
        nats_url=nats_url,
        namespace=names.namespace,
        cache_dir=tmp_path / "cache",
        echo=lines.append,
    )
    assert again.task_ids == summary.task_ids
    assert again.stored is not None and (again.stored.stored, again.stored.existing) == (0, 2)


def test_run_cache(tmp_path: Path) -> None:
    cache = RunCache(tmp_path)
    passing = {
        "test_a.py": "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n"
    }
    looping = {"test_b.py": "import unittest\n\nwhile True:\n    pass\n"}
    jobs = [Job(passing, TEST_COMMAND, 30.0), Job(looping, TEST_COMMAND, 0.5)]
    first = run_many(jobs, cache=cache)
    assert first[0].passed and first[1].timed_out
    assert run_many(jobs, cache=cache) == first  # answered from the cache
    assert cache.get(Job(passing, TEST_COMMAND, 30.0)) == first[0]
    # A run that timed out is not an answer for a longer timeout; one that finished reads as
    # timed out for a timeout shorter than it took.
    assert cache.get(Job(looping, TEST_COMMAND, 5.0)) is None
    assert cache.get(Job(passing, TEST_COMMAND, first[0].seconds / 2)).timed_out
    assert cache.get(Job({"other.py": ""}, TEST_COMMAND, 30.0)) is None


def test_parsing_is_safe_from_many_threads_at_once() -> None:
    """Episodes and generation parse task files in worker threads; CPython 3.11's AST conversion
    once failed under concurrent parses, so the shell environment parses through one lock."""
    import ast
    from concurrent.futures import ThreadPoolExecutor

    from aios_rl.envs.shell.pyparse import parse

    source = "\n".join(
        f"def f{i}(x):\n    return [[x + {i}] * 2 for _ in range(3)]" for i in range(200)
    )
    with ThreadPoolExecutor(8) as pool:
        dumps = set(pool.map(lambda _: ast.dump(parse(source)), range(64)))
    assert dumps == {ast.dump(ast.parse(source))}
