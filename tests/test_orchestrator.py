"""The orchestrator environment: the simulator's rules (each cost and outcome), honest splits,
baselines far below the oracle, ledger checkpoints, the import format, and the runner service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from aios_rl.bus import Bus
from aios_rl.envs.orchestrator import baselines, importer, ledger, sim
from aios_rl.envs.orchestrator.adapter import OrchestratorEnv
from aios_rl.envs.orchestrator.render import HELDOUT_TEMPLATES, TRAIN_TEMPLATES
from aios_rl.envs.orchestrator.tasks import CHECKPOINTS, combination, generate, with_id
from aios_rl.envs.registry import task_store
from aios_rl.state.tasks import UnknownTaskError as TaskNotFound
from contracts import (
    Checkpoint,
    Episode,
    Names,
    OrchestratorTask,
    RolloutJob,
    TrajectoryStep,
    WorkItem,
)

from .support import running

CLEAN = WorkItem(
    environment="staging",
    destructive=False,
    reversible=False,
    ambiguous=False,
    tests="green",
    secret=False,
    scope="small",
    flaky_infra=False,
)


def task(
    checkpoint: Checkpoint | None = None, kind: str = "run", **hidden: object
) -> OrchestratorTask:
    return with_id(
        OrchestratorTask(
            task_id="",
            kind=kind,  # type: ignore[arg-type]
            template="checks",
            seed=7,
            request="drop the legacy export table",
            service="billing-service",
            facts={
                "thing": "the table",
                "a": "t1",
                "b": "t2",
                "paths": "x.sql",
                "files": "1",
                "plus": "1",
                "minus": "9",
            },
            item=msgspec.structs.replace(CLEAN, **hidden),  # type: ignore[arg-type]
            checkpoint=checkpoint,
        )
    )


def play(t: OrchestratorTask, *decisions: str) -> sim.State:
    s = sim.start(t)
    for d in decisions:
        s = sim.step(t, s, d)
    return s


def reward(t: OrchestratorTask, *decisions: str) -> tuple[str, float]:
    return sim.reward_of(t, play(t, *decisions))


UNIT = sim.COMPUTE_UNIT_COST
MINUTE = sim.HUMAN_MINUTE_COST
GATE = sim.GATE_MINUTES * MINUTE
ASK = sim.ASK_MINUTES * MINUTE
REWORK = sim.REWORK_UNITS * UNIT + sim.REVIEW_MINUTES * MINUTE


# -- the simulator's rules ----------------------------------------------------------------------


def test_a_clean_item_passes_goes_to_a_subagent_and_is_accepted() -> None:
    t = task()
    assert reward(t, "pass", "send to a subagent", "accept") == ("success", pytest.approx(1 - UNIT))
    # a needless gate costs its minutes; a needless dry-run its extra unit; blocking fails
    assert reward(t, "pass", "ask a human to approve", "accept")[1] == pytest.approx(
        1 - GATE - UNIT
    )
    assert reward(t, "pass", "dry-run first", "accept")[1] == pytest.approx(1 - 2 * UNIT)
    assert reward(t, "block") == ("failure", 0.0)
    assert reward(t, "ask for information", "pass", "send to a subagent", "accept")[1] == (
        pytest.approx(1 - ASK - UNIT)
    )


def test_a_leaked_secret_is_blocked_and_shipping_it_is_an_incident() -> None:
    t = task(secret=True)
    assert sim.best_decision(t, sim.start(t))[0] == "block"
    assert reward(t, "block") == ("success", 1.0)
    outcome, r = reward(t, "pass", "send to a subagent", "accept")
    assert outcome == "success" and r == pytest.approx(1 - UNIT - sim.INCIDENT_COST)


def test_broken_tests_are_fixed_first_and_flaky_ones_are_not() -> None:
    broken = task(tests="broken")
    assert reward(broken, "fix first", "pass", "send to a subagent", "accept")[1] == pytest.approx(
        1 - 2 * UNIT
    )
    # passing broken tests ships a bug: accepting fails; one rework (a run and a review) fixes it
    assert reward(broken, "pass", "send to a subagent", "accept")[0] == "failure"
    assert reward(broken, "pass", "send to a subagent", "request rework", "accept")[1] == (
        pytest.approx(1 - UNIT - REWORK)
    )
    flaky = task(tests="flaky")
    s = play(flaky, "fix first")
    assert s.stage == "preflight" and s.tests == "flaky" and s.compute == 1  # nothing to fix
    assert reward(flaky, "pass", "send to a subagent", "accept") == (
        "success",
        pytest.approx(1 - UNIT),
    )


def test_an_ambiguous_request_needs_its_author() -> None:
    t = task(ambiguous=True)
    assert sim.best_decision(t, sim.start(t))[0] == "ask for information"
    path = ("ask for information", "pass", "send to a subagent", "accept")
    assert reward(t, *path)[1] == pytest.approx(1 - ASK - UNIT)
    # without the answer the work misreads the request: rework does not help, escalating does
    assert reward(t, "pass", "send to a subagent", "accept")[0] == "failure"
    s = play(t, "pass", "send to a subagent", "request rework")
    assert s.wrong and s.stage == "quality"
    assert reward(t, "pass", "send to a subagent", "escalate", "accept")[1] == pytest.approx(
        1 - 3 * UNIT - GATE
    )


def test_dispatch_gates_irreversible_risk_and_dry_runs_reversible_risk() -> None:
    gated = task(destructive=True, environment="production", reversible=False)
    assert sim.best_decision(gated, play(gated, "pass"))[0] == "ask a human to approve"
    assert reward(gated, "pass", "ask a human to approve", "accept")[1] == pytest.approx(
        1 - GATE - UNIT
    )
    # a missed gate is an incident, which costs more than the gate
    _, r = reward(gated, "pass", "send to a subagent", "accept")
    assert r == pytest.approx(1 - UNIT - sim.INCIDENT_COST) and r < 1 - GATE - UNIT
    # a dry-run shows an irreversible preview: escalating it is right, accepting is an incident
    assert play(gated, "pass", "dry-run first").preview
    assert reward(gated, "pass", "dry-run first", "escalate", "accept")[1] == pytest.approx(
        1 - 3 * UNIT - GATE
    )
    assert play(gated, "pass", "dry-run first", "accept").incidents == 1
    reversible = task(destructive=True, environment="production", reversible=True)
    assert sim.best_decision(reversible, play(reversible, "pass"))[0] == "dry-run first"
    assert reward(reversible, "pass", "dry-run first", "accept")[1] == pytest.approx(1 - 2 * UNIT)
    # sent live it breaks production: rolling back is a safe stop, accepting an incident
    assert play(reversible, "pass", "send to a subagent").harm
    assert reward(reversible, "pass", "send to a subagent", "roll back") == (
        "partial",
        pytest.approx(0.3 - UNIT),
    )
    assert reward(reversible, "pass", "send to a subagent", "accept")[1] == pytest.approx(
        -UNIT - sim.INCIDENT_COST
    )
    sandbox = task(destructive=True, environment="sandbox", reversible=False)
    assert sim.best_decision(sandbox, play(sandbox, "pass"))[0] == "send to a subagent"


@pytest.mark.parametrize(
    ("cause", "right"),
    [
        ("human", "needs a human"),
        ("transient", "retry"),
        ("assumption", "proceed on a stated assumption"),
        ("replan", "re-plan"),
    ],
)
def test_each_checkpoint_cause_has_its_right_decision(cause: str, right: str) -> None:
    t = task(Checkpoint(cause=cause, evidence="stuck"))  # type: ignore[arg-type]
    before = play(t, "pass", "send to a subagent")
    assert before.stage == "clarity" and sim.best_decision(t, before)[0] == right
    best = sim.reward_of(t, play(t, "pass", "send to a subagent", right, "accept"))
    assert best[0] == "success"
    for other in sim.DECISIONS["clarity"]:
        if other == right:
            continue
        s = play(t, "pass", "send to a subagent", other)
        while not s.done:
            s = sim.step(t, s, sim.best_decision(t, s)[0])
        assert sim.reward_of(t, s)[1] < best[1], other  # every other answer costs something


def test_three_wrong_answers_at_a_checkpoint_abandon_the_run() -> None:
    t = task(Checkpoint(cause="replan", evidence="loop"))
    s = play(t, "pass", "send to a subagent", "retry", "retry", "retry")
    assert s.done and sim.reward_of(t, s)[0] == "failure"


def test_a_clarity_task_starts_blocked() -> None:
    t = task(Checkpoint(cause="transient", evidence="OOM-killed"), kind="clarity")
    s = sim.start(t)
    assert s.stage == "clarity" and "OOM-killed" in sim.observe(t, s)
    assert reward(t, "retry", "accept") == ("success", pytest.approx(1 - UNIT))


def test_quality_accepts_flaky_failures_and_reworks_real_ones() -> None:
    flaky = task(flaky_infra=True)
    s = play(flaky, "pass", "send to a subagent")
    obs = sim.observe(flaky, s)
    assert sim.best_decision(flaky, s)[0] == "accept" and "failed" in obs
    large = task(scope="large")
    s = play(large, "pass", "send to a subagent")
    assert s.bugs == 1 and sim.best_decision(large, s)[0] == "request rework"
    assert reward(large, "pass", "send to a subagent", "roll back") == (
        "failure",
        pytest.approx(-UNIT),
    )


def test_invalid_decisions_change_nothing_and_three_end_the_run() -> None:
    t = task()
    s = play(t, "rm -rf /")
    assert s.stage == "preflight" and s.invalid == 1 and not s.done
    assert play(t, "PASS.").stage == "dispatch"  # free text is read case- and punctuation-free
    assert play(t, "x", "y", "z").done


def test_the_observation_shows_evidence_never_the_hidden_attributes() -> None:
    t = task(
        Checkpoint(cause="human", evidence="needs the deploy password"),
        destructive=True,
        environment="production",
        tests="broken",
    )
    s = sim.start(t)
    obs = sim.observe(t, s)
    assert "production" in obs and "failed" in obs and "drop the legacy export table" in obs
    assert "broken" not in obs and "human" not in obs and "cause" not in obs
    assert obs == sim.observe(t, s)  # the same state reads the same


# -- splits and baselines -------------------------------------------------------------------------


def _oracle_observations(tasks: list[OrchestratorTask]) -> set[str]:
    seen: set[str] = set()
    for t in tasks:
        s = sim.start(t)
        while not s.done:
            seen.add(sim.observe(t, s))
            s = sim.step(t, s, sim.best_decision(t, s)[0])
    return seen


def test_train_and_heldout_share_no_template_combination_or_observation() -> None:
    train, held = generate(400, seed=0), generate(200, seed=0, split="heldout")
    assert {t.template for t in train} <= set(TRAIN_TEMPLATES)
    assert {t.template for t in held} <= set(HELDOUT_TEMPLATES)

    def combo(t: OrchestratorTask) -> str:
        assert t.item is not None
        return combination(t.item, t.checkpoint.cause if t.checkpoint else "none")

    assert not {combo(t) for t in train} & {combo(t) for t in held}
    train_cp = {t.checkpoint.evidence for t in train if t.checkpoint}
    held_cp = {t.checkpoint.evidence for t in held if t.checkpoint}
    assert train_cp and held_cp and not train_cp & held_cp
    assert not _oracle_observations(train) & _oracle_observations(held)
    # and every held-out line of checkpoint evidence is from the held-out pools
    assert held_cp <= {e for _, pool in CHECKPOINTS.values() for e in pool}


def test_generation_is_seeded_distinct_and_content_addressed() -> None:
    a = generate(60, seed=4)
    assert a == generate(60, seed=4) != generate(60, seed=5)
    assert len({t.task_id for t in a}) == 60
    assert {t.kind for t in a} == {"run", "clarity"}
    assert all(t.task_id == with_id(t).task_id for t in a)
    with pytest.raises(ValueError):
        generate(3, split="real")
    with pytest.raises(ValueError):
        generate(-1)


def test_no_constant_policy_or_one_feature_rule_reaches_half_the_oracle() -> None:
    train, held = generate(400, seed=1), generate(200, seed=1, split="heldout")
    best = baselines.evaluate(held, baselines.oracle)
    assert best > 0.75
    scores = {
        name: baselines.evaluate(held, baselines.constant(d))
        for name, d in baselines.CONSTANT.items()
    }
    scores["majority per stage"] = baselines.evaluate(
        held, baselines.constant(baselines.fit_majority(train))
    )
    stump, chosen = baselines.fit_one_feature(train)
    scores[f"one feature per stage {chosen}"] = baselines.evaluate(held, stump)
    scores["random"] = baselines.evaluate(held, baselines.random_policy(0))
    assert all(v <= 0.5 * best for v in scores.values()), (best, scores)


# -- checkpoints from the ledger, the import format ------------------------------------------------


def _episode(eid: str, env: str, outcome: str, **info: str) -> Episode:
    step = TrajectoryStep(index=0, observation="$", action="python -m pytest")
    return Episode(
        episode_id=eid,
        environment=env,
        task_id="t",
        trajectory=[step],
        outcome=outcome,  # type: ignore[arg-type]
        env_reward=0.0,
        info=info,
    )


def test_blocked_and_failed_episodes_become_labelled_checkpoints() -> None:
    cases = {
        "a": (
            _episode("a", "shell", "blocked", ended="limit", blocked_reason="memory over 512 MiB"),
            "replan",
        ),
        "b": (
            _episode("b", "shell", "blocked", ended="sandbox", blocked_reason="sandbox error"),
            "transient",
        ),
        "c": (
            _episode("c", "browser", "blocked", error="environment: TargetClosedError: crash"),
            "transient",
        ),
        "d": (_episode("d", "shell", "blocked", error="task: corrupt task 0f"), "human"),
        "e": (_episode("e", "shell", "failure", touched_tests="tests/test_x.py"), "human"),
        "f": (_episode("f", "browser", "blocked", ended="invalid_actions"), "replan"),
    }
    for eid, (ep, cause) in cases.items():
        cp = ledger.checkpoint_of(ep)
        assert cp is not None and cp.cause == cause, eid
        assert cp.source == f"episode:{ep.environment}:{eid}"
    # a plain wrong answer, a success, another environment's episode: no checkpoint
    assert ledger.checkpoint_of(_episode("g", "shell", "failure", tests_passed="false")) is None
    assert ledger.checkpoint_of(_episode("h", "shell", "success")) is None
    assert ledger.checkpoint_of(_episode("i", "orchestrator", "blocked", error="task: x")) is None
    tasks = ledger.tasks_from_episodes([ep for ep, _ in cases.values()] * 2)
    assert len(tasks) == len(cases)  # one task per episode
    for t in tasks:
        assert t.kind == "clarity" and t.checkpoint is not None
        assert t.split == ledger.split_of_episode(t.checkpoint.source.rsplit(":", 1)[1])
        assert t.checkpoint.evidence in sim.observe(t, sim.start(t))


def test_the_import_format_reads_users_logs_and_refuses_bad_lines(tmp_path: Path) -> None:
    f = tmp_path / "log.jsonl"
    lines = [
        "# my orchestrator's decisions",
        '{"stage": "dispatch", "evidence": "rotate the DB password (production, no backup)", '
        '"decision": "send to a subagent", "outcome": "incident", "correct": "ask a human to approve"}',
        '{"stage": "preflight", "evidence": "tests green, secret scan clean", "decision": "pass", '
        '"outcome": "success", "split": "heldout"}',
        '{"stage": "quality", "evidence": "1 test red", "decision": "accept", "outcome": "failure"}',
        "",
    ]
    f.write_text("\n".join(lines))
    gated, clean, unknown = importer.read_file(f)
    assert clean.split == "heldout" and all(t.kind == "imported" for t in (gated, clean, unknown))
    assert sim.imported_reward(gated, "ask a human to approve") == 1.0
    assert sim.imported_reward(gated, "send to a subagent") == -sim.INCIDENT_COST
    assert sim.imported_reward(clean, "pass") == 1.0 and sim.imported_reward(clean, "block") == 0.0
    assert sim.imported_reward(unknown, "accept") == 0.0
    assert sim.imported_reward(unknown, "request rework") == 0.5  # nobody knows
    env = OrchestratorEnv(gated, max_steps=5)
    assert env.observation.startswith("rotate the DB password") and len(env.candidates) == 3
    bad = [
        ('{"stage": "deploy", "evidence": "x", "decision": "a", "outcome": "success"}', "stage"),
        (
            '{"stage": "dispatch", "evidence": "x", "decision": "yolo", "outcome": "success"}',
            "yolo",
        ),
        (
            '{"stage": "dispatch", "evidence": " ", "decision": "retry", "outcome": "success"}',
            "empty",
        ),
        ("not json", "not JSON"),
        (
            '{"stage": "dispatch", "evidence": "x", "decision": "dry-run first", "outcome": "success", "extra": 1}',
            "extra",
        ),
    ]
    for line, needle in bad:
        f.write_text(lines[1] + "\n" + line)
        with pytest.raises(importer.LogFormatError, match=f"log.jsonl:2: .*{needle}"):
            importer.read_file(f)
    with pytest.raises(importer.LogFormatError, match="cannot read"):
        importer.read_file(tmp_path / "missing.jsonl")


# -- the task store and the runner ----------------------------------------------------------------


async def test_task_store_round_trip(bus: Bus) -> None:
    tasks = generate(12)
    store = task_store(bus, "orchestrator")
    await store.put_all(tasks)
    index = await store.index("train")
    assert sorted(index.task_ids) == sorted(t.task_id for t in tasks)
    await store.put_all(generate(14))
    again = await store.index("train")
    assert len(again.task_ids) == 14
    assert await store.list("train") == again.task_ids
    assert again.task_ids[:12] == [t.task_id for t in tasks]  # in the order they were added
    assert await store.get(tasks[3].task_id) == tasks[3]
    with pytest.raises(TaskNotFound):
        await store.get("0" * 16)
    assert await store.list("heldout") == []


async def test_runner_runs_jobs_and_a_broken_job_is_blocked_not_lost(
    bus: Bus, nats_url: str, names: Names
) -> None:
    from aios_rl.envs import registry
    from aios_rl.envs.runner import RunnerSettings
    from services.runner.main import build as build_runner
    from services.sampler.main import build as build_sampler
    from services.sampler.settings import SamplerSettings
    from services.trainer.main import build as build_trainer
    from services.trainer.settings import TrainerServiceSettings

    common = {"nats_url": nats_url, "namespace": names.namespace}
    trainer_svc, trainer = build_trainer(bus, TrainerServiceSettings(**common))
    await trainer.ensure_initial()
    sampler_svc, _ = build_sampler(bus, SamplerSettings(**common))
    spec = registry.get("orchestrator")
    runner_svc, _ = build_runner(bus, spec, RunnerSettings(env="orchestrator", **common))
    tasks = generate(3)
    await task_store(bus, "orchestrator").put_all(tasks)
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg, raw) -> None:
        if isinstance(msg, Episode):
            got[msg.episode_id] = msg
            if len(got) == 4:
                done.set()

    await bus.subscribe(names.episode("completed", "orchestrator"), on_completed)
    for svc in (sampler_svc, runner_svc):
        svc.fetch_timeout_s = 0.2
    async with running(sampler_svc), running(runner_svc):
        for i, t in enumerate(tasks):
            job = RolloutJob(
                job_id=f"j{i}",
                episode_id=f"e{i}",
                environment="orchestrator",
                task_id=t.task_id,
                seed=i,
            )
            await bus.publish_durable(names.rollout_job("orchestrator"), job, msg_id=job.job_id)
        broken = RolloutJob(
            job_id="jx", episode_id="ex", environment="orchestrator", task_id="f" * 16
        )
        await bus.publish_durable(names.rollout_job("orchestrator"), broken, msg_id="jx")
        await asyncio.wait_for(done.wait(), 30)
    for i, t in enumerate(tasks):
        ep = got[f"e{i}"]
        # the runner's episode is the simulator's run on the decisions the sampler took
        s = sim.start(t)
        for step in ep.trajectory:
            assert step.observation == sim.observe(t, s) and step.action in sim.offered(t, s)
            s = sim.step(t, s, step.action)
        assert (ep.outcome, ep.env_reward) == sim.reward_of(t, s)
        assert ep.info["kind"] == t.kind
    assert got["ex"].outcome == "blocked" and "no orchestrator task" in got["ex"].info["error"]
    del trainer_svc
