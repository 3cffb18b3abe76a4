"""The benchmarks' shared command line (``bench/_common.py::bench_args``): ``--quick``,
``--out`` and ``--seeds`` (one seed of a long run, to set beside the committed one)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import msgspec
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


@pytest.mark.parametrize(
    ("bench", "option"),
    [
        ("learning_rl", "--variants"),
        ("learning_rl", "--env"),
        ("learning", "--student"),
        ("chaos", "--cluster"),
        ("sampler", "--backend"),
        ("rail", "--scale"),
        ("rail", "--reward-only"),
        ("strategies", "--reward-only"),
    ],
)
def test_a_benchs_own_options_are_in_its_help(
    bench: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib

    module = importlib.import_module(f"bench.{bench}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert option in shown and "--quick" in shown, shown


def test_an_lm_run_of_one_environment_keeps_the_others_measured_before(tmp_path: Path) -> None:
    from bench.learning import LM_FULL, _earlier_lm_runs

    runs = {"0": {"before": [0.0], "after": [1.0], "reward_before": [0.1], "reward_after": [0.4]}}
    settings = {
        "seeds": [0], "epochs": 1, "tasks_per_epoch": 2, "group_size": 2, "train_tasks": 8,
        "heldout_tasks": 3, "learning_rate": 5e-4, "workers": 2,
    }  # fmt: skip
    path = tmp_path / "learning_lm.json"
    path.write_text(
        json.dumps(
            {
                "date": "2026-12-04T11:27:11+00:00",
                "command": "bench/learning.py --student lm --env orchestrator",
                "settings": {"orchestrator": settings},
                "orchestrator": {"settings": settings},
                "runs": {"orchestrator": runs, "browser": runs},
            }
        )
    )
    assert _earlier_lm_runs(path, ("orchestrator",)) == {}, "a re-run replaces its own results"
    kept = _earlier_lm_runs(path, ("shell",))
    assert list(kept) == ["orchestrator"], "only environments --student lm trains are kept"
    got, s, when = kept["orchestrator"]
    assert got == runs and s.seeds == (0,) and s.epochs == 1
    assert type(s) is type(LM_FULL["orchestrator"])
    assert "2026-12-04T11:27:11" in when and "--env orchestrator" in when
    assert _earlier_lm_runs(tmp_path / "absent.json", ("shell",)) == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--levers"], "--levers runs on shell or browser-sites"),
        (["--env", "orchestrator", "--levers"], "--levers runs on shell or browser-sites"),
        (["--env", "browser-sites", "--sweep"], "--sweep runs on shell: add --env shell"),
        (
            ["--env", "browser-sites", "--levers", "--variants", "rl/no-repeat-reads"],
            "--variants: unknown rl/no-repeat-reads; choose from rl, rl+typed-progress",
        ),
        (["--env", "shell", "--levers", "--sweep"], "--sweep and --levers are two runs"),
        (["--env", "shell", "--levers", "--variants", "rl,nope"], "--variants: unknown nope;"),
        (["--combine", "--env", "shell"], "--combine takes no other argument"),
    ],
)
def test_learning_rl_refuses_a_run_it_cannot_make_in_one_line(
    argv: list[str], message: str
) -> None:
    from bench.learning_rl import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def _variant(before: float, after: float, low: float) -> dict:
    return {
        "success_before": before,
        "success_after": after,
        "wilson_before": [before, before - 0.05, before + 0.05],
        "wilson_after": [after, after - 0.05, after + 0.05],
        "paired_difference": after - before,
        "paired_ci_low": low,
        "paired_ci_high": low + 0.1,
        "pairs": 36,
        "rollbacks": 1,
        "epochs_judged": 15,
        "reward_before": before,
        "reward_after": after,
    }


def test_learning_rl_combine_keeps_each_variants_latest_run_and_the_goal_per_environment() -> None:
    from bench.learning_rl import combine

    old = {
        "date": "2026-01-01",
        "shell": {"rl": _variant(0.1, 0.2, 0.05), "grpo": _variant(0.1, 0.1, -0.1)},
    }
    new = {
        "date": "2026-02-01",
        "machine": {"code": "abc123"},
        "shell": {"rl": _variant(0.1, 0.3, 0.12)},
    }
    mw = {"date": "2026-01-15", "browser-miniwob": {"rl": _variant(0.3, 0.2, -0.2)}}
    sites = {"date": "2026-01-16", "browser-sites": {"grpo": _variant(0.0, 0.1, 0.02)}}
    md, payload = combine({"b.json": new, "a.json": old, "m.json": mw, "s.json": sites})
    assert payload["shell"]["rl"]["source"] == "b.json, code abc123"  # the later run, its commit
    assert payload["shell"]["grpo"]["source"] == "a.json"  # kept: no later run of it
    assert payload["shell"]["rl_only_paired_ci_low"] == 0.12
    assert payload["browser-miniwob"]["rl_only_paired_ci_low"] == -0.2
    assert "orchestrator" not in payload
    # Met when any row that learns from reward alone is above 0; every such row is named.
    assert "- shell: met (`grpo` -0.100, `rl` +0.120)\n" in md
    assert payload["shell"]["reward_only_best"] == {"variant": "rl", "paired_ci_low": 0.12}
    assert "- browser-miniwob: **not met** (`rl` -0.200)\n" in md
    assert "- orchestrator: not measured yet" in md
    # The browser's own recipe is GRPO alone: its row says so (shell's does not).
    assert "- browser-sites: met (`grpo` +0.020); browser episodes learn by GRPO alone" in md
    assert md.count("browser episodes learn by GRPO alone by default") == 1
    assert "| shell | rl+oracle-distill | (not measured yet) |" in md
    # The curriculum rows belong to site flows alone and are not listed until measured.
    assert "easy-flows" not in md
    assert "| 0.100 -> 0.300 |" in md  # the mean held-out reward, partial credit included
    assert "gave no hint" not in md  # no per-update record: nothing is claimed


def test_learning_rl_combine_counts_a_curriculum_row_as_reward_only_on_site_flows() -> None:
    from bench.learning_rl import combine

    sites = {
        "date": "2026-01-16",
        "browser-sites": {
            "grpo": _variant(0.0, 0.0, 0.0),
            "rl+oracle-distill": _variant(0.0, 0.3, 0.2),  # a teacher's: not reward alone
            "grpo+easy-flows": _variant(0.0, 0.1, 0.03),
        },
        "shell": {"grpo+easy-flows": _variant(0.0, 0.5, 0.4)},  # not a shell variant: ignored
    }
    md, payload = combine({"s.json": sites})
    assert payload["browser-sites"]["reward_only_best"] == {
        "variant": "grpo+easy-flows",
        "paired_ci_low": 0.03,
    }
    assert "- browser-sites: met (`grpo` +0.000, `grpo+easy-flows` +0.030)" in md
    assert (
        "| browser-sites | `grpo+easy-flows` | environment reward only, GRPO alone, trained" in md
    )
    assert "shell" not in payload


def test_learning_rl_combine_says_which_teacher_rows_got_no_hint() -> None:
    from bench.learning_rl import combine

    def runs(*shares: float) -> dict:
        return {"0": {"updates": [{"hinted_share": x} for x in shares]}}

    payload = {
        "date": "2026-01-01",
        "shell": {"rl+oracle-distill": _variant(0.1, 0.3, 0.1)},
        "browser-miniwob": {
            "rl+oracle-distill": _variant(0.2, 0.4, 0.1),
            "rl": _variant(0.2, 0.4, 0.1),
        },
        "runs": {
            "shell": {"rl+oracle-distill": runs(0.0, 0.4)},
            "browser-miniwob": {"rl+oracle-distill": runs(0.0, 0.0), "rl": runs(0.0)},
        },
    }
    md, _ = combine({"x.json": payload})
    assert "gave no hint in any update of `rl+oracle-distill` on browser-miniwob " in md
    assert "on shell" not in md  # its teacher hinted: a teacher's signal was there


def test_reward_only_strategy_runs_learn_from_reward_and_keep_their_own_results() -> None:
    import argparse

    from bench.strategies import ARMS, QUICK, arm_spec, signal_of, with_signal

    s, out = with_signal(
        argparse.Namespace(reward_only=True, out=None), QUICK, Path("bench/results/rail.md")
    )
    assert s.reward_only and out == Path("bench/results/rail-reward-only.md")
    given, there = with_signal(
        argparse.Namespace(reward_only=True, out=Path("x.md")), QUICK, Path("x.md")
    )
    assert there == Path("x.md") and given.reward_only
    # Another environment: its own results, and the recipe measured to learn from reward there.
    web, path = with_signal(
        argparse.Namespace(reward_only=True, out=None, env="browser-miniwob"),
        QUICK,
        Path("bench/results/rail.md"),
    )
    assert path == Path("bench/results/rail-browser-miniwob-reward-only.md")
    trainer = arm_spec(ARMS[0], 0, web).trainer
    assert (trainer.distill_coef, trainer.self_imitation) == (0, False)  # GRPO alone
    assert "GRPO alone" in signal_of(web) and "self-imitation" in signal_of(s)
    orch, _ = with_signal(
        argparse.Namespace(reward_only=False, out=None, env="orchestrator"), QUICK, Path("r.md")
    )
    assert (orch.env, orch.learning_rate, orch.reward_only) == ("orchestrator", 1e-3, False)
    assert arm_spec(ARMS[0], 0, orch).environments == {"orchestrator": 1.0}
    assert arm_spec(ARMS[0], 0, web).environments == {"browser": 1.0}
    trainer = arm_spec(ARMS[0], 0, s).trainer
    assert (trainer.distill_coef, trainer.self_imitation, trainer.progress_coef) == (0, True, 1)
    assert arm_spec(ARMS[0], 0, QUICK).trainer.distill_coef == 0.5  # the oracle's, by default


def test_rail_families_are_each_environments_own_task_kinds() -> None:
    from aios_rl.envs.browser.flows import generate as sites
    from aios_rl.envs.orchestrator import generate as orchestrator
    from bench.rail import family_of

    (site,) = sites(1, 0, "train")
    (run,) = orchestrator(1, seed=0, split="train")
    assert family_of(site) == site.flow and family_of(run) == run.template != ""
    with pytest.raises(TypeError, match="not a task"):
        family_of("shell/x")  # type: ignore[arg-type]


def test_gain_calibration_bins_by_prediction() -> None:
    from bench.rail import calibration

    pairs = [(0.4, 0.0), (0.1, 0.1), (0.3, 0.2), (0.2, 0.3), (-0.1, 0.0), (0.0, -0.2)]
    bins = calibration(pairs, bins=3)  # by predicted: (-0.1, 0.0), (0.1, 0.2), (0.3, 0.4)
    assert [b["n"] for b in bins] == [2, 2, 2]
    assert [round(b["predicted"], 3) for b in bins] == [-0.05, 0.15, 0.35]
    assert [round(b["realized"], 3) for b in bins] == [-0.1, 0.2, 0.1]
    assert calibration([]) == [] and len(calibration([(0.1, 0.2)], bins=5)) == 1


def test_rail_refuses_scale_with_quick_in_one_line() -> None:
    from bench.rail import main

    with pytest.raises(SystemExit) as exc:
        main(["--scale", "--quick"])
    assert str(exc.value) == "--scale and --quick are two runs: choose one"


def test_rail_scorer_refuses_a_folder_without_traces_in_one_line(tmp_path: Path) -> None:
    from bench.rail_scorer import main

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nowhere")])
    assert str(exc.value) == f"not a folder of traces: {tmp_path / 'nowhere'}"
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path)])
    assert "no trace files (*.jsonl)" in str(exc.value) and "\n" not in str(exc.value)


def test_rail_is_rails_default_and_rail_unregularized_drops_weight_decay_and_nothing_else() -> None:
    from bench.rail import ARMS, FULL, UNREGULARIZED_DECAY, arm_label, rail_settings
    from contracts import RailSettings

    arm = {a.name: a for a in ARMS}
    rail, plain = rail_settings(arm["rail"], FULL), rail_settings(arm["rail-unregularized"], FULL)
    assert rail == RailSettings() and rail.weight_decay > 0 == UNREGULARIZED_DECAY
    assert msgspec.structs.replace(rail, weight_decay=UNREGULARIZED_DECAY) == plain
    assert arm_label(arm["rail"], FULL).endswith("scorer weight decay 1")
    assert arm_label(arm["rail-unregularized"], FULL).endswith("scorer weight decay 0")


def test_rail_arms_option_keeps_arms_order_and_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.rail import ARMS, arm_list, main

    assert [a.name for a in arm_list("rail, uniform-8")] == ["uniform-8", "rail"]
    assert "dapo-filter" in {a.name for a in ARMS}
    for bad, said in (
        ("uniform-8,ralf", "unknown arm(s) ralf"),
        ("rail,variance", "uniform-8 is the baseline every ratio needs"),
    ):
        with pytest.raises(SystemExit):
            main(["--arms", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert said in err[-1], err


def _fake_run(after: list[float], rollouts: float, rail: bool = False) -> dict:
    from bench.strategies import COUNTS

    run = {k: 0.0 for k in COUNTS} | {"rollouts": rollouts, "mid": after, "after": after}
    if rail:
        own = {"live": 2, "errors_online": [0.1, 0.1], "errors_frozen": [0.2, 0.2]}
        run["rail"] = {"traces": 10, "predicted_realized": [[0.1, 0.0]], "own": own}
    return run


def test_rail_summary_of_a_subset_names_what_it_could_not_measure() -> None:
    from bench.rail import summary, targets, unregularized_note

    res = {
        "0": {
            "before": [0.0] * 4,
            "arms": {
                "uniform-8": _fake_run([0.0, 1.0, 0.0, 1.0], 64.0),
                "rail": _fake_run([1.0, 1.0, 0.0, 1.0], 32.0, rail=True),
            },
        }
    }
    named = summary(res)
    assert set(named["arms"]) == {"uniform-8", "rail"}
    assert named["rollout_share"] == 0.5 and named["online_over_frozen_mae"] == 0.5
    assert named["rail_minus_uniform8_ci"][0] == 0.25
    assert named["regime_minus_budget_only_ci"] is None
    assert named["unregularized_rollout_share"] is None
    assert named["traces_per_controller"] == {"rail": 10}
    assert unregularized_note(named) == "rail-unregularized: not in this run (--arms)."
    # With rail but not rail-budget-only: targets 1 and 2 are measured, 3 is not.
    (_, met1, why1), (_, met2, why2), (_, met3, why3) = targets(res)
    assert not met1 and "50.0% of the rollouts" in why1
    assert met2 and "+50% below" in why2
    assert not met3 and "not measured" in why3
    # A baseline that learned nothing has nothing to match: rail at its 0 % on a quarter of
    # the rollouts is not target 1 met.
    flat = {
        "0": {
            "before": [0.0] * 4,
            "arms": {
                "uniform-8": _fake_run([0.0] * 4, 64.0),
                "rail": _fake_run([0.0] * 4, 16.0, rail=True),
            },
        }
    }
    (_, met1, why1), *_ = targets(flat)
    assert not met1 and "learned nothing" in why1 and "25.0% of the rollouts" in why1
    # Without rail, no target is measured.
    del res["0"]["arms"]["rail"]
    assert all(not met and "not measured" in why for _, met, why in targets(res))


def test_rail_scorer_settings_line_names_only_what_a_candidate_changes() -> None:
    from bench.rail_scorer import CANDIDATES, changed

    assert changed(CANDIDATES["decay 1 (default)"]) == {}
    assert changed(CANDIDATES["no decay"]) == {"weight_decay": 0.0}
    assert changed(CANDIDATES["steps 50"]) == {"weight_decay": 0.0, "fit_steps": 50}
    assert changed(CANDIDATES["decay 1, steps 50"]) == {"fit_steps": 50}
    assert changed(None) == "prior mean"


def test_rail_resume_keeps_only_a_run_of_the_same_settings() -> None:
    from bench.rail import ARMS, QUICK, kept_note, resumable, settings_of

    settings = settings_of(QUICK, ARMS)
    runs = {"0": {"before": [0.0, 1.0], "arms": {"uniform-8": _fake_run([1.0, 1.0], 16.0)}}}
    payload = json.loads(json.dumps({"settings": settings, "runs": runs}))
    assert resumable(payload, settings) == runs
    # Other arms are fine (each arm is its own run); other settings are not.
    assert resumable(payload, settings_of(QUICK, ARMS[:2])) == runs
    other = json.loads(json.dumps({**payload, "settings": {**settings, "epochs": 9}}))
    with pytest.raises(ValueError, match="epochs 9 there, 2 here"):
        resumable(other, settings)
    more = {**payload, "runs": {**runs, "7": runs["0"]}}
    with pytest.raises(ValueError, match=r"seed\(s\) 7"):
        resumable(more, settings)
    with pytest.raises(ValueError, match=r"not a bench/rail\.py results file"):
        resumable({"rows": []}, settings)
    note = kept_note(runs, ARMS, "x.json")
    assert note is not None and "seed 0: uniform-8" in note
    # An arm measured another way is refused: rail before weight decay became RAIL's default
    # (its label then named no weight decay), here or in a subset of arms.
    before = [
        label.replace(", scorer weight decay 1", "") if label.startswith("rail:") else label
        for label in settings["arms"]
    ]
    old = json.loads(json.dumps({**payload, "settings": {**settings, "arms": before}}))
    for ours in (
        settings,
        settings_of(QUICK, [a for a in ARMS if a.name in ("uniform-8", "rail")]),
    ):
        with pytest.raises(ValueError, match=r"arm\(s\) rail measured with other settings"):
            resumable(old, ours)
    without_rail = [a for a in ARMS if a.name != "rail"]  # its other arms are still the same
    assert resumable(old, settings_of(QUICK, without_rail)) == runs


def test_rail_resume_of_several_files_keeps_the_arms_of_all_and_names_each_file() -> None:
    from bench.rail import ARMS, kept_note, merged_runs

    first = {"0": {"before": [0.0, 1.0], "arms": {"uniform-8": _fake_run([1.0, 1.0], 16.0)}}}
    second = {
        "0": {
            "before": [0.0, 1.0],
            "arms": {"uniform-8": _fake_run([0.0, 0.0], 16.0), "rail": _fake_run([1.0, 0.0], 8.0)},
        }
    }
    runs, origins = merged_runs([("a.json", first), ("b.json", second)])
    assert runs["0"]["before"] == [0.0, 1.0]
    assert runs["0"]["arms"] == {
        "uniform-8": first["0"]["arms"]["uniform-8"],
        "rail": second["0"]["arms"]["rail"],
    }
    assert origins == {"0": {"uniform-8": "a.json", "rail": "b.json"}}
    note = kept_note(runs, ARMS, "a.json and b.json", origins)
    assert note is not None and "uniform-8 (from a.json), rail (from b.json)" in note
    # One file: no per-arm names.
    alone, one = merged_runs([("a.json", first)])
    assert "(from" not in (kept_note(alone, ARMS, "a.json", one) or "(from")
    # Untrained scores that differ mean the files are not one setting's runs.
    other = {"0": {"before": [1.0, 1.0], "arms": {}}}
    with pytest.raises(ValueError, match=r"b\.json: seed 0's untrained held-out scores differ"):
        merged_runs([("a.json", first), ("b.json", other)])


def test_rail_resume_of_a_missing_or_broken_file_is_a_one_line_error(tmp_path: Path) -> None:
    from bench.rail import main

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path in (tmp_path / "missing.json", broken):
        with pytest.raises(SystemExit) as e:
            main(["--quick", "--resume", str(path)])
        assert str(e.value).startswith(f"--resume {path}: ") and "\n" not in str(e.value)


def test_rail_student_lm_refuses_what_it_cannot_run_in_one_line() -> None:
    from bench.rail import main

    for argv, said in (
        (["--student", "lm", "--reward-only", "--scale"], "drop --scale"),
        (["--student", "lm", "--env", "orchestrator"], "add --reward-only"),
        (["--student", "lm", "--reward-only", "--env", "browser-miniwob"], "not browser-miniwob"),
        (["--reward-only", "--env", "agentbench_db"], "only --student lm acts on it"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert said in str(e.value) and "\n" not in str(e.value)
    with pytest.MonkeyPatch.context() as mp:  # AgentBench's data is not where it is looked for
        mp.setenv("AGENTBENCH_DIR", "/nonexistent")
        argv, said = (
            ["--student", "lm", "--reward-only", "--env", "agentbench_db"],
            "AGENTBENCH_DIR",
        )
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert said in str(e.value) and "\n" not in str(e.value)


def test_rail_lm_arms_learn_with_the_lm_recipe_at_its_own_learning_rate() -> None:
    import argparse

    from bench._kernel import LM_TRAINER
    from bench.rail import ARMS, LM, arm_spec
    from bench.strategies import signal_of, with_signal

    args = argparse.Namespace(env="orchestrator", reward_only=True, out=None)
    s, out = with_signal(args, LM, Path("bench/results/rail-lm.md"))
    assert out == Path("bench/results/rail-lm-orchestrator-reward-only.md")
    assert (s.student, s.learning_rate) == ("lm", 5e-4)  # not the tiny student's orchestrator 1e-3
    trainer = arm_spec(ARMS[0], 0, s).trainer
    assert {k: getattr(trainer, k) for k in LM_TRAINER} == LM_TRAINER
    assert not trainer.self_imitation and "GRPO alone" in signal_of(s)


def test_rail_subset_does_not_overwrite_a_run_of_other_arms(tmp_path: Path) -> None:
    from bench.rail import ARMS, QUICK, arm_list, other_arms, settings_of

    out = tmp_path / "rail-arms-2.md"
    assert other_arms(out, arm_list("uniform-8,rail")) is None  # nothing there yet
    run = {"settings": settings_of(QUICK, arm_list("uniform-8,dapo-filter"))}
    out.with_suffix(".json").write_text(json.dumps(run))
    assert other_arms(out, arm_list("uniform-8,rail")) == "uniform-8, dapo-filter"
    assert other_arms(out, arm_list("dapo-filter,uniform-8")) is None  # a re-run of the same
    assert other_arms(out, ARMS) is not None


def test_learning_rl_minilm_lever_trains_the_minilm_student() -> None:
    from aios_rl.student.minilm import MiniLMStudent
    from bench.learning_rl import SITE_LEVERS, VARIANTS, student_of

    assert student_of(VARIANTS["rl"]) is None  # the default tiny student
    make = student_of(SITE_LEVERS["rl+minilm"])
    assert make is not None and isinstance(make(0), MiniLMStudent)


def test_rail_resume_reads_a_results_file_older_than_a_settings_field() -> None:
    from bench.rail import ARMS, QUICK, resumable, settings_of

    settings = settings_of(QUICK, ARMS)
    older = {k: v for k, v in settings.items() if k != "student"}  # made before --student
    runs = {"0": {"before": [0.0], "arms": {}}}
    assert resumable(json.loads(json.dumps({"settings": older, "runs": runs})), settings) == runs
    lm = {**older, "student": "lm"}
    with pytest.raises(ValueError, match="student 'lm' there, 'tiny' here"):
        resumable(json.loads(json.dumps({"settings": lm, "runs": runs})), settings)


def test_agentbench_db_splits_are_disjoint_seeded_and_labelled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The lm student's AgentBench DB runs: the dev split cut in a train and a held-out part
    that share no task, the same on every call, each task labelled with its part."""
    from bench._kernel import agentbench_db_splits, env_splits

    mini = Path(__file__).parent / "fixtures" / "agentbench"
    monkeypatch.setenv("AGENTBENCH_DIR", str(tmp_path))
    (tmp_path / "dbbench").mkdir()
    lines = (mini / "dbbench" / "mini.jsonl").read_text().splitlines()
    (tmp_path / "dbbench" / "dev.jsonl").write_text("\n".join(lines) + "\n")
    n = len(lines)
    said: list[str] = []
    train, held = agentbench_db_splits(n - 2, 2, said.append)
    assert len(train) == n - 2 and len(held) == 2 and said
    assert not {t.task_id for t in train} & {t.task_id for t in held}
    assert {t.split for t in train} == {"train"} and {t.split for t in held} == {"heldout"}
    again = agentbench_db_splits(n - 2, 2, said.append)
    assert [t.task_id for t in again[1]] == [t.task_id for t in held]
    with pytest.raises(ValueError, match="fewer than"):
        agentbench_db_splits(n, 1, said.append)
    monkeypatch.setenv("AGENTBENCH_DIR", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="AGENTBENCH_DIR"):
        asyncio.run(env_splits("agentbench_db", 1, 1, said.append))


def test_rail_epochs_option_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.rail import main

    for bad, said in (("0", "must be at least 1, not 0"), ("x", "'x' is not a whole number")):
        with pytest.raises(SystemExit):
            main(["--epochs", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert said in err[-1], err
