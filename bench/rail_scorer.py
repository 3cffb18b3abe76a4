"""RAIL scorer benchmark, offline: refit RAIL's scorer on the traces a run recorded, under other
scorer settings, and measure how well each would have predicted the gains it was about to see.
No training run: the traces are the ones ``bench/rail.py --traces DIR`` wrote (one
``RailTrace`` a line, ``<arm>-s<seed>.jsonl``), replayed in the order their controller saw them.

For every trace file and every candidate, ``aios_rl.rail.replay.replay`` walks the traces: the
scorer fitted so far predicts each trace before it is learned from (out of sample), and refits on
the controller's schedule with the candidate's settings. The candidates:

``no decay``
    The controller's settings with the scorer fitted by plain Adam (``RailSettings.weight_decay``
    0, RAIL's default until this bench and ``bench/rail.py`` showed weight decay doing better;
    results files written before call it ``default``): the baseline every ratio is taken against.
``decay <w>``
    The same with the scorer's weight decay (AdamW's); ``decay 1 (default)`` is RAIL's default.
``steps <n>``
    Fewer full-batch steps per refit (an earlier stop), without weight decay.
``prior mean``
    No scorer: the recency-weighted mean of the gains seen so far (what predicting from nothing
    of the context gives; a scorer that does not beat it has learned nothing usable).

Measured per candidate, pooled over the files (and per file in the JSON): mean absolute error,
sign agreement (the promotion rule's), calibration slope (realized on predicted: 1 calibrated,
near 0 overconfident), Spearman's rank correlation, the spread of the predictions against that
of the realized gains, and the top-quarter lift (mean realized gain of the quarter predicted
highest minus the mean): whether following the scorer's ranking picks better branches.

Run from the repo root, after a run that wrote traces:

    .venv/bin/python bench/rail.py --env orchestrator --reward-only --scale --traces /tmp/traces
    .venv/bin/python bench/rail_scorer.py /tmp/traces
    .venv/bin/python bench/rail_scorer.py /tmp/traces --quick   # the rail arm's files only
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # run as a script: `bench` importable

import msgspec
import torch
from rich.console import Console
from rich.table import Table

from aios_rl.rail.replay import Quality, prior_mean, quality, replay
from bench import _common
from contracts import RailSettings, RailTrace

BASELINE = "no decay"
CANDIDATES: dict[str, RailSettings | None] = {
    "no decay": RailSettings(weight_decay=0.0),
    "decay 0.01": RailSettings(weight_decay=0.01),
    "decay 0.1": RailSettings(weight_decay=0.1),
    "decay 1 (default)": RailSettings(),
    "decay 3": RailSettings(weight_decay=3.0),
    "decay 10": RailSettings(weight_decay=10.0),
    "steps 50": RailSettings(weight_decay=0.0, fit_steps=50),
    "steps 20": RailSettings(weight_decay=0.0, fit_steps=20),
    "decay 1, steps 50": RailSettings(fit_steps=50),
    "prior mean": None,
}
"""Name -> the scorer settings replayed (``None``: the prior mean, no scorer). The baseline is
plain Adam, RAIL's scorer before weight decay 1 became its default (results files written
before that call it ``default``)."""
METRICS = (
    ("mae", "mean absolute error", "1e-3 gain", 1000.0, False),
    ("agreement", "sign agreement", "%", 100.0, True),
)
"""The rows with a ratio (name, words, unit, scale, higher is better); slope, rank correlation
and lift are signed, so the table and the notes give them without one."""


def load(path: Path) -> list[RailTrace]:
    """A trace file: one ``RailTrace`` (JSON) a line."""
    decoder = msgspec.json.Decoder(RailTrace)
    return [decoder.decode(line) for line in path.read_bytes().splitlines() if line.strip()]


def files_of(folder: Path, quick: bool) -> list[Path]:
    """The trace files of ``folder`` (``--quick``: the ``rail`` arm's only). Raises
    ``SystemExit`` with one line when there are none."""
    if not folder.is_dir():
        raise SystemExit(f"not a folder of traces: {folder}")
    files = sorted(folder.glob("rail-s*.jsonl" if quick else "*.jsonl"))
    if not files:
        raise SystemExit(f"no trace files (*.jsonl) in {folder}: run bench/rail.py --traces first")
    return files


def measure(files: Sequence[Path], log: Callable[[str], None]) -> dict:
    """Per file and candidate, the out-of-sample (predicted, realized) pairs and their quality;
    pooled per candidate."""
    torch.set_num_threads(1)
    per_file: dict[str, dict] = {}
    pooled: dict[str, list[tuple[float, float]]] = {name: [] for name in CANDIDATES}
    for path in files:
        traces = load(path)
        seed = int(path.stem.rsplit("-s", 1)[1]) if "-s" in path.stem else 0
        row: dict = {"traces": len(traces)}
        for name, settings in CANDIDATES.items():
            pairs = (
                prior_mean(traces, RailSettings())
                if settings is None
                else replay(traces, settings, seed=seed)
            )
            pooled[name] += pairs
            row[name] = asdict(quality(pairs)) if pairs else None
        per_file[path.stem] = row
        log(f"{path.name}: {len(traces)} traces replayed under {len(CANDIDATES)} candidates")
    return {
        "files": per_file,
        "pooled": {name: asdict(quality(p)) for name, p in pooled.items() if p},
    }


def rows_of(res: dict) -> list[_common.Row]:
    base = res["pooled"][BASELINE]
    return [
        _common.Row(f"{name}: {words}", unit, q[key] * k, base[key] * k, higher_is_better=higher)
        for name, q in res["pooled"].items()
        if name != BASELINE
        for key, words, unit, k, higher in METRICS
    ]


def print_table(res: dict, console: Console) -> None:
    table = Table(title="RAIL's scorer replayed on recorded traces, out of sample, pooled")
    table.add_column("candidate")
    for _, title, _ in COLUMNS:
        table.add_column(title, justify="right")
    for name, q in res["pooled"].items():
        table.add_row(name, *(fmt.format(q[key]) for key, _, fmt in COLUMNS))
    console.print(table)


COLUMNS = (
    ("n", "n", "{:d}"),
    ("mae", "MAE", "{:.4f}"),
    ("agreement", "agreement", "{:.3f}"),
    ("slope", "slope", "{:+.3f}"),
    ("rank", "rank corr.", "{:+.3f}"),
    ("spread", "spread", "{:.4f}"),
    ("realized_spread", "realized spread", "{:.4f}"),
    ("top_lift", "top-quarter lift", "{:+.4f}"),
)


def markdown_pooled(res: dict) -> str:
    """Every measure of every candidate, pooled over the files, as a markdown table."""
    head = "| candidate | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [
        "## Every measure, pooled over the files",
        "",
        head,
        "|---" + "|---:" * len(COLUMNS) + "|",
    ]
    for name, q in res["pooled"].items():
        cells = " | ".join(fmt.format(q[key]) for key, _, fmt in COLUMNS)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def notes_of(res: dict, files: Sequence[Path]) -> list[str]:
    pooled = {k: Quality(**v) for k, v in res["pooled"].items()}
    best = min(pooled, key=lambda k: pooled[k].mae)
    lift = max(pooled, key=lambda k: pooled[k].top_lift)
    base, prior = pooled[BASELINE], pooled.get("prior mean")
    notes = [
        f"Traces: {sum(r['traces'] for r in res['files'].values())} in {len(files)} file(s) "
        f"({', '.join(p.name for p in files)}), each replayed in the order its controller saw "
        "it; every prediction is out of sample (the scorer was fitted only on earlier traces).",
        f"Lowest MAE: {best} ({pooled[best].mae:.4f} against no decay's {base.mae:.4f}). "
        f"Highest top-quarter lift: {lift} ({pooled[lift].top_lift:+.4f} against "
        f"{base.top_lift:+.4f}).",
        f"The scorer without weight decay spreads its predictions {base.spread:.4f} (standard deviation) where "
        f"the realized gains spread {base.realized_spread:.4f}; its calibration slope is "
        f"{base.slope:+.3f} (1: calibrated).",
    ]
    if prior is not None:
        beat = [k for k, q in pooled.items() if k != "prior mean" and q.mae < prior.mae]
        notes.append(
            f"The prior mean (no scorer) has MAE {prior.mae:.4f}: "
            + (
                f"beaten by {', '.join(beat)}."
                if beat
                else "no scorer setting beats it: the scorer's reading of the context does not "
                "predict the gain better than its average."
            )
        )
    notes.append(
        "Ratios: candidate / no decay for sign agreement, no decay / candidate for MAE: above 1, "
        "the candidate did better. Calibration slope, rank correlation and top-quarter lift are "
        "signed: see the table below and the JSON (per file too)."
    )
    return notes


def changed(candidate: RailSettings | None) -> dict | str:
    """What a candidate changes in the default settings (the settings line names only that)."""
    if candidate is None:
        return "prior mean"
    default, ours = msgspec.to_builtins(RailSettings()), msgspec.to_builtins(candidate)
    return {k: v for k, v in ours.items() if v != default[k]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("traces", type=Path, help="a folder of trace files from bench/rail.py")
    args, _, out = _common.bench_args(
        "rail_scorer", __doc__, "the rail arm's files", full=None, quick=None, argv=argv,
        parents=[own],
    )  # fmt: skip
    files = files_of(args.traces, args.quick)
    console = Console()
    res, machine, elapsed = _common.run(lambda log: _measure(files, log), ["torch"], console)
    print_table(res, console)
    rows = rows_of(res)
    _common.print_rows(
        "rail_scorer: each candidate vs plain Adam (no decay)", rows, "candidate", BASELINE, console
    )
    settings = {
        "traces": str(args.traces),
        "files": [p.name for p in files],
        "default": msgspec.to_builtins(RailSettings()),
        "candidates": {k: changed(v) for k, v in CANDIDATES.items()},
    }
    _common.report(
        console,
        out,
        title="RAIL's scorer refitted offline on recorded traces, under other settings",
        rows=rows,
        ours="candidate",
        baseline=BASELINE,
        machine=machine,
        settings=settings,
        notes=notes_of(res, files),
        elapsed_s=elapsed,
    )
    with out.open("a") as md:
        md.write("\n" + markdown_pooled(res))
    json_path = out.with_suffix(".json")
    payload = json.loads(json_path.read_text())
    payload["results"] = res
    json_path.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


async def _measure(files: Sequence[Path], log: Callable[[str], None]) -> dict:
    return measure(files, log)


if __name__ == "__main__":
    raise SystemExit(main())
