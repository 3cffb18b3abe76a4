"""The robustness harnesses of ``bench/`` in small: they must keep passing, not only when
someone runs the benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_bench(script: str, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``bench/<script> argv...`` from the repo root, its output captured."""
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


@pytest.mark.slow
def test_fuzz_quick_every_poison_message_is_dead_lettered_and_nothing_dies(
    tmp_path: Path,
) -> None:
    out = tmp_path / "fuzz.md"
    done = run_bench("fuzz.py", "--quick", "--out", str(out))
    assert out.exists(), done.stdout + done.stderr
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["sent"] > 0 and res["dead_lettered"] == res["sent"], res["not_dead_lettered"]
    assert res["requests"] > 0 and res["no_reply"] == [], res["no_reply"]
    assert res["no_reply_expected"] > 0, "no endpoint taking a request was found"
    assert res["no_reply_dead_lettered"] == res["no_reply_expected"], res["no_reply_missing"]
    assert res["exited_after_no_reply"] == [] and res["exited"] == []
    assert res["honest_episode"] == "compared"
    assert res["huge_reward"].startswith("dead-lettered")
    assert done.returncode == 0, done.stdout[-2000:]


@pytest.mark.slow
def test_chaos_quick_kills_the_server_and_the_campaign_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "chaos.md"
    done = run_bench("chaos.py", "--quick", "--out", str(out), timeout=900)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads(out.with_suffix(".json").read_text())
    victims = {k["victim"] for k in res["kills"]}
    assert {"nats-server", "campaign"} <= victims, res["kills"]
    assert res["state"] == "finished", res
    assert res["scheduled"] > 0 and res["received"] == res["scheduled"] and res["lost"] == 0
    assert res["duplicated"] == 0 and res["compared_messages"] == res["scheduled"]
    assert done.returncode == 0, done.stdout[-2000:]


@pytest.mark.slow
def test_strategies_quick_trains_every_arm_on_its_rollout_budget(tmp_path: Path) -> None:
    # On the orchestrator from reward alone (the rail test below runs shell with the oracle).
    out = tmp_path / "strategies.md"
    argv = ["--quick", "--env", "orchestrator", "--reward-only", "--out", str(out)]
    done = run_bench("strategies.py", *argv)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, done.stdout[-2000:]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r["name"]: r for r in json.loads(out.with_suffix(".json").read_text())["rows"]}
    spent = {
        arm: rows[f"{arm}: rollouts consumed per seed"]
        for arm in ("uniform-4", "entropy", "dapo-filter")
    }
    uniform_8 = spent["entropy"]["baseline"]
    assert uniform_8 > 0
    assert spent["entropy"]["ours"] == uniform_8  # branching spends the same M = 8 per task
    assert spent["uniform-4"]["ours"] * 2 == uniform_8
    assert spent["dapo-filter"]["ours"] >= spent["uniform-4"]["ours"]  # plus resampled tasks
    for arm in spent:
        assert f"{arm}: held-out success after training, pooled" in rows
    settings = json.loads(out.with_suffix(".json").read_text())["settings"]
    assert (settings["env"], settings["reward_only"]) == ("orchestrator", True)


@pytest.mark.slow
def test_rail_quick_trains_every_arm_and_no_rail_arm_spends_more_than_uniform_8(
    tmp_path: Path,
) -> None:
    out, traces = tmp_path / "rail.md", tmp_path / "traces"
    done = run_bench("rail.py", "--quick", "--out", str(out), "--traces", str(traces))
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, done.stdout[-2000:]
    for png in (
        out.with_suffix(".png"),
        out.with_name("rail_mae.png"),
        out.with_name("rail_calibration.png"),
    ):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads(out.with_suffix(".json").read_text())
    rows = {r["name"]: r for r in res["rows"]}
    uniform_8 = rows["rail: rollouts consumed per seed"]["baseline"]
    assert uniform_8 > 0
    assert rows["uniform-4: rollouts consumed per seed"]["ours"] * 2 == uniform_8
    rail_arms = (
        "rail",
        "rail-budget-only",
        "rail-frozen",
        "rail-no-hindsight",
        "rail-unregularized",
    )
    for arm in rail_arms:
        assert 0 < rows[f"{arm}: rollouts consumed per seed"]["ours"] <= uniform_8
        assert f"{arm}: held-out success after training, pooled" in rows
    assert "dapo-filter: held-out success after training, pooled" in rows
    assert res["summary"]["arms"]["dapo-filter"]["rollouts"] > 0
    # The variance allocator spends exactly uniform-8's rollouts, in other places.
    assert rows["variance: rollouts consumed per seed"]["ours"] == uniform_8
    assert len(res["targets"]) == 3 and all(isinstance(t["met"], bool) for t in res["targets"])
    summary = res["summary"]
    assert set(summary["traces_per_controller"]) == set(rail_arms)
    assert all(n > 0 for n in summary["traces_per_controller"].values())
    for key in ("rail_minus_uniform8_ci", "regime_minus_budget_only_ci", "rail_minus_variance_ci"):
        value, low, high = summary[key]
        assert low <= value <= high
    assert summary["rollout_share"] == pytest.approx(
        rows["rail: rollouts consumed per seed"]["ours"] / uniform_8
    )
    assert summary["arms"]["variance"]["steps_sampled"] > 0
    for name in rail_arms:  # every out-of-sample prediction is in one calibration bin
        fitted = sum(run["arms"][name]["rail"]["fitted_traces"] for run in res["runs"].values())
        assert sum(b["n"] for b in summary["calibration"][name]) == fitted
    for run in res["runs"].values():
        for arm in rail_arms:
            rail = run["arms"][arm]["rail"]
            assert 0 < rail["traces"] <= rail["decisions"]
            assert rail["actions_state"] == rail["actions_env"]  # every decision counted once
            assert rail["state"]["live_traces"] == rail["own"]["live"]
    assert not out.with_suffix(".partial.json").exists()  # the finished run is in rail.json
    # --resume keeps what earlier runs measured and runs only the rest (uniform-4 here); given
    # twice, the arms of both files (uniform-8 from the first, rail from the second).
    earlier = {"settings": res["settings"], "runs": json.loads(json.dumps(res["runs"]))}
    for run in earlier["runs"].values():
        del run["arms"]["uniform-4"]
    second = json.loads(json.dumps(earlier))
    for run, other in zip(earlier["runs"].values(), second["runs"].values(), strict=True):
        del run["arms"]["rail"]
        other["arms"] = {"rail": other["arms"]["rail"]}
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    (tmp_path / "second.json").write_text(json.dumps(second))
    again = tmp_path / "resumed.md"
    done = run_bench(
        "rail.py",
        "--quick",
        "--arms",
        "uniform-8,uniform-4,rail",
        "--resume",
        str(tmp_path / "earlier.json"),
        "--resume",
        str(tmp_path / "second.json"),
        "--out",
        str(again),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    resumed = json.loads(again.with_suffix(".json").read_text())
    for seed, run in resumed["runs"].items():
        assert set(run["arms"]) == {"uniform-8", "uniform-4", "rail"}
        assert run["before"] == res["runs"][seed]["before"]
        for arm in ("uniform-8", "rail"):  # kept as measured, not run again
            assert run["arms"][arm] == res["runs"][seed]["arms"][arm]
        assert run["arms"]["uniform-4"]["rollouts"] * 2 == run["arms"]["uniform-8"]["rollouts"]
    assert any(n.startswith("Resumed from") and "rail (from" in n for n in resumed["notes"])
    # Every controller's traces, in the order it saw them, and the scorer replayed on them.
    for seed, run in res["runs"].items():
        for arm in rail_arms:
            lines = (traces / f"{arm}-s{seed}.jsonl").read_text().splitlines()
            assert len(lines) == run["arms"][arm]["rail"]["traces"]
    scored = tmp_path / "rail_scorer.md"
    done = run_bench("rail_scorer.py", str(traces), "--out", str(scored))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    replayed = json.loads(scored.with_suffix(".json").read_text())["results"]
    assert set(replayed["files"]) == {f"{arm}-s{seed}" for arm in rail_arms for seed in res["runs"]}
    pooled = replayed["pooled"]
    assert pooled["no decay"]["n"] > 0 and len({q["n"] for q in pooled.values()}) == 1


@pytest.mark.slow
def test_phase_de_quick_trains_every_student_on_the_same_budget_and_scores_all_three(
    tmp_path: Path,
) -> None:
    out = tmp_path / "phase_de.md"
    done = run_bench("phase_de.py", "--quick", "--out", str(out))
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, done.stdout[-2000:]
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads(out.with_suffix(".json").read_text())
    envs = ("shell", "browser", "orchestrator")
    budget = res["settings"]["training_episodes_per_student"]
    assert budget > 0
    for run in res["runs"].values():
        assert set(run) == {
            "untrained",
            "mixed",
            "mixed-env-normalize",
            *(f"{e}-only" for e in envs),
        }
        for name, student in run.items():
            for env in envs:  # every student on every environment's held-out tasks
                assert len(student["success"][env]) == len(res["heldout"][env]) > 0
            if name == "untrained":
                continue
            assert sum(student["trained"].values()) == budget  # the same budget for everyone
            # The comparison gate judged every epoch (reference runs are not training episodes).
            assert len(student["gate"]) == res["settings"]["epochs"]
            if name.startswith("mixed"):
                assert all(student["trained"][env] > 0 for env in envs)
            else:
                assert student["trained"] == {e: budget * (f"{e}-only" == name) for e in envs}
    assert "Phase D/E answer" in res["notes"][0]
    for table in (
        "success",
        "reward",
        "transfer",
        "mixed_minus_specialist",
        "env_normalize_minus_mixed",
    ):
        assert table in res["tables"]
    for run in res["runs"].values():  # the same tasks as the mixed student, other updates
        assert run["mixed-env-normalize"]["trained"] == run["mixed"]["trained"]


def _quick(
    bench: str, tmp_path: Path, *extra: str, timeout: int = 600, exit_zero: bool = True
) -> dict:
    """Run ``bench/<bench>.py --quick`` into ``tmp_path``; its JSON results. ``exit_zero``:
    the bench must exit 0 (a bench whose exit status is a timing target's verdict passes
    ``False``: targets live in the benchmarks, not in tests)."""
    out = tmp_path / f"{bench}.md"
    done = run_bench(f"{bench}.py", "--quick", *extra, "--out", str(out), timeout=timeout)
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0 or not exit_zero, done.stdout[-2000:]
    return json.loads(out.with_suffix(".json").read_text())


@pytest.mark.slow
def test_reload_quick_moves_the_pointer_under_load_and_loses_no_request(tmp_path: Path) -> None:
    res = _quick("reload", tmp_path, exit_zero=False)  # its exit status is the p99 target
    assert res["idle_s"] and res["loaded_s"]  # every move timed until every replica served it
    assert all(0 < s < 30 for s in res["idle_s"] + res["loaded_s"])
    assert res["requests"] > 0 and res["failed"] == 0 and res["stale"] == 0, res["errors"]


@pytest.mark.slow
def test_pipeline_quick_times_the_stack_and_one_process_and_every_stage(tmp_path: Path) -> None:
    res = _quick("pipeline", tmp_path)
    rows = {r["name"]: r for r in res["rows"]}
    throughput = [r for name, r in rows.items() if name.startswith("episodes/s")]
    assert throughput and all(r["ours"] > 0 and r["baseline"] > 0 for r in throughput)
    stages = res["stages"]
    # every span timed (a stamp that went missing would drop its span from the table)
    assert "end to end (job published -> compared seen)" in stages and len(stages) == 7
    assert all(s["episodes"] > 0 and s["p99_ms"] >= s["p50_ms"] >= 0 for s in stages.values())


@pytest.mark.slow
def test_learning_ablation_quick_trains_each_variant_against_the_baseline(tmp_path: Path) -> None:
    res = _quick("learning_ablation", tmp_path, "--variants", "obs-undone")
    names = [r["name"].split(":")[0] for r in res["rows"]]
    assert names == ["baseline", "obs-undone"]
    base = res["rows"][0]
    assert all(r["baseline"] == base["ours"] for r in res["rows"])  # one baseline, same run
    assert all(0.0 <= r["ours"] <= 1.0 for r in res["rows"])
