"""The benchmarks' shared command line (``bench/_common.py::bench_args``): ``--quick``,
``--out`` and ``--seeds`` (one seed of a long run, to set beside the committed one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from bench._common import BENCH_DIR, bench_args


@dataclass(frozen=True)
class Seeded:
    seeds: tuple[int, ...]
    epochs: int


@dataclass(frozen=True)
class Unseeded:
    epochs: int


FULL, QUICK = Seeded((0, 1, 2), 8), Seeded((0,), 1)


def test_seeds_replace_the_settings_seeds_and_name_the_results() -> None:
    _, s, out = bench_args("x", "doc", "~1 s", full=FULL, quick=QUICK, argv=["--seeds", "2,0"])
    assert s == Seeded((2, 0), 8)
    assert out == BENCH_DIR / "results" / "x-seeds-2-0.md"
    _, s, out = bench_args("x", "doc", "~1 s", full=FULL, quick=QUICK, argv=["--quick"])
    assert (s, out.name) == (QUICK, "x-quick.md")
    _, s, out = bench_args(
        "x", "doc", "~1 s", full=FULL, quick=QUICK, argv=["--seeds", "1", "--out", "/tmp/r.md"]
    )
    assert (s.seeds, out) == ((1,), Path("/tmp/r.md"))


@pytest.mark.parametrize("bad", ["", "a", "1,,2", "1,1", "-1"])
def test_a_bad_seed_list_is_a_one_line_usage_error(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench_args("x", "doc", "~1 s", full=FULL, quick=QUICK, argv=[f"--seeds={bad}"])
    assert exit_.value.code == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert "error: argument --seeds" in line and bad in line


def test_a_bench_without_seeds_has_no_seeds_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_args("y", "doc", "~1 s", full=Unseeded(3), quick=Unseeded(1), argv=["--seeds", "0"])
    assert "unrecognized arguments: --seeds" in capsys.readouterr().err
