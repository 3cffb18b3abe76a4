"""The JSON Schema files in ``contracts/schema/`` are what the Structs generate now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import contracts
import contracts.schema_gen as schema_gen
from contracts import Episode

FIX = "run `python -m contracts.schema_gen` and commit contracts/schema/"


def drift(rendered: dict[str, str], directory: Path) -> list[str]:
    """What differs between the rendered schema and the files in ``directory``, one line each."""
    on_disk = {p.name: p.read_text() for p in sorted(directory.glob("*.json"))}
    problems = [f"missing file {name}" for name in sorted(rendered.keys() - on_disk.keys())]
    problems += [f"stale file {name}" for name in sorted(on_disk.keys() - rendered.keys())]
    problems += [
        f"{name} differs from its Struct"
        for name in sorted(rendered.keys() & on_disk.keys())
        if rendered[name] != on_disk[name]
    ]
    return problems


def test_schema_files_match_the_structs() -> None:
    problems = drift(schema_gen.render(), schema_gen.SCHEMA_DIR)
    assert not problems, (
        "contracts/schema/ is out of date: " + "; ".join(problems) + f". Fix: {FIX}."
    )


def test_one_schema_file_per_message() -> None:
    rendered = schema_gen.render()
    assert sorted(rendered) == sorted(f"{t.SCHEMA}.json" for t in contracts.MESSAGES)
    for name, text in rendered.items():
        doc = json.loads(text)
        assert doc["title"] == name.removesuffix(".json")
        assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert doc["$ref"].startswith("#/$defs/")
        assert doc["$ref"].removeprefix("#/$defs/") in doc["$defs"]


def test_drift_check_catches_a_changed_struct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Add a field to ``Episode`` (as a variant type under the same schema name): the check fails,
    and it names the file that changed and nothing else."""

    class Episode2(Episode, frozen=True, kw_only=True):
        priority: int = 0

    Episode2.__name__ = "Episode"  # same component name, so only the new field differs
    monkeypatch.setattr(
        schema_gen, "MESSAGES", tuple(Episode2 if t is Episode else t for t in contracts.MESSAGES)
    )
    rendered = schema_gen.render()
    assert "priority" in json.loads(rendered["episode.v1.json"])["$defs"]["Episode"]["properties"]
    assert drift(rendered, schema_gen.SCHEMA_DIR) == ["episode.v1.json differs from its Struct"]


def test_drift_check_catches_missing_and_stale_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = schema_gen.write(tmp_path)
    assert len(written) == len(contracts.MESSAGES)
    assert drift(schema_gen.render(), tmp_path) == []

    (tmp_path / "episode.v1.json").unlink()
    (tmp_path / "episode.v0.json").write_text("{}\n")
    assert drift(schema_gen.render(), tmp_path) == [
        "missing file episode.v1.json",
        "stale file episode.v0.json",
    ]

    # write() repairs both: it removes stale files and writes missing ones.
    schema_gen.write(tmp_path)
    assert drift(schema_gen.render(), tmp_path) == []
