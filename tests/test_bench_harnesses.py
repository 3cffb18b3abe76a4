"""The robustness harnesses of ``bench/`` in small: they must keep passing, not only when
someone runs the benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_fuzz_quick_every_poison_message_is_dead_lettered_and_nothing_dies(
    tmp_path: Path,
) -> None:
    out = tmp_path / "fuzz.md"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "fuzz.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert out.exists(), done.stdout + done.stderr
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["sent"] > 0 and res["dead_lettered"] == res["sent"], res["not_dead_lettered"]
    assert res["requests"] > 0 and res["no_reply"] == [], res["no_reply"]
    assert res["exited"] == [] and res["honest_episode"] == "compared"
    assert res["huge_reward"].startswith("dead-lettered")
    assert done.returncode == 0, done.stdout[-2000:]
