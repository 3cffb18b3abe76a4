"""Phase 1 families (pure): the template files are Python that ``ast`` reads, every marker in them
is filled by its family's ``choose`` for every variant, and rendering is deterministic and
unchanged (a task's id is the hash of its rendered files)."""

from __future__ import annotations

import ast
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aios_rl.envs.shell import families
from aios_rl.envs.shell.families import FAMILIES, MARKER, VARIANTS, fill, render

TEMPLATES = Path(families.__file__).parent
TEMPLATE_FILES = sorted(TEMPLATES.glob("*/*.py"))
CASES = [(name, v) for name in FAMILIES for v in range(VARIANTS)]

RENDERED_SHA256 = "7a5182714f93a0b83294c5d74bb00bb302455530b41c8d6f42b1ce129c7895b5"
"""sha256 of every family's rendered files (:data:`DIGEST_CODE`). Phase 1 task ids, held-out
splits and cached test runs are made from these files: a change here is a change to every task,
so make it only on purpose."""

DIGEST_CODE = """
import hashlib, json
from aios_rl.envs.shell.families import FAMILIES, VARIANTS, render
files = {f"{n}:{v}": render(f, v).files for n, f in FAMILIES.items() for v in range(VARIANTS)}
print(hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest())
"""


def digest_in_subprocess(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", DIGEST_CODE], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_one_folder_per_family_with_its_two_templates() -> None:
    folders = {p.name for p in TEMPLATES.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(FAMILIES)
    for name in folders:
        assert {p.name for p in (TEMPLATES / name).glob("*.py")} == {"module.py", "test_module.py"}


@pytest.mark.parametrize("path", TEMPLATE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_template_parses(path: Path) -> None:
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.mark.parametrize(("name", "variant"), CASES)
def test_every_marker_is_filled(name: str, variant: int) -> None:
    family = FAMILIES[name]
    markers = set(MARKER.findall(family.module)) | set(MARKER.findall(family.tests))
    values = family.choose(random.Random(0), variant)
    assert markers == set(values), f"{name}: markers without a value or values without a marker"
    for key in values:
        # one underscore at a time, so a marker's end (``__``) is never ambiguous
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", key), key
    rendered = render(family, variant)
    assert set(rendered.files) == {rendered.module_path, rendered.test_path}
    for path, text in rendered.files.items():
        assert "__tpl_" not in text, f"{name} variant {variant}: {path} keeps a marker"
        ast.parse(text, filename=path)


def test_a_marker_without_a_value_is_a_key_error() -> None:
    values = {"a": "1", "b_c": "Stack"}
    assert fill("x = __tpl_a__ + __tpl_b_c__Error", values) == "x = 1 + StackError"
    with pytest.raises(KeyError):
        fill("x = __tpl_a__", {})


def test_rendering_is_deterministic_and_unchanged() -> None:
    for name, variant in CASES:
        assert render(FAMILIES[name], variant) == render(FAMILIES[name], variant)
    # across processes and string hash seeds too, and equal to the pinned digest
    assert digest_in_subprocess("1") == digest_in_subprocess("2") == RENDERED_SHA256
