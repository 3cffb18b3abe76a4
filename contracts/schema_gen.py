"""Generate JSON Schema (2020-12) for every contract into ``contracts/schema/``.

Run ``python -m contracts.schema_gen`` after changing a Struct; a test fails while the files and
the Structs disagree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec

from . import MESSAGES

SCHEMA_DIR = Path(__file__).parent / "schema"


def render() -> dict[str, str]:
    """File name -> JSON text, for every message in ``MESSAGES``."""
    out: dict[str, str] = {}
    for t in MESSAGES:
        (root,), components = msgspec.json.schema_components([t], ref_template="#/$defs/{name}")
        doc = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"aios-rl/{t.SCHEMA}.json",
            "title": t.SCHEMA,
            **root,
            "$defs": components,
        }
        out[f"{t.SCHEMA}.json"] = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return out


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    """Write every schema file and remove stale ones; return the names written."""
    directory.mkdir(parents=True, exist_ok=True)
    files = render()
    for stale in directory.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (directory / name).write_text(text)
    return sorted(files)


if __name__ == "__main__":
    names = write(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_DIR)
    print(f"wrote {len(names)} schema files to {SCHEMA_DIR}")
