"""The teacher backends on a real nats-server: the oracle (ground truth from the Object Store),
``teacher-<cli>`` running small executables on PATH that print the recorded output formats, and
``teacher-openai`` against a local HTTP server."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from aios_rl.bus import Bus, NoResponders, RemoteError
from aios_rl.envs.orchestrator import baselines, importer, sim
from aios_rl.envs.orchestrator.tasks import with_id
from aios_rl.envs.registry import task_store
from aios_rl.teachers import RAW_INLINE_CHARS
from contracts import (
    Checkpoint,
    Names,
    OrchestratorTask,
    StepDigest,
    TeacherRequest,
    TeacherSignal,
    WorkItem,
)
from contracts.subjects import OBJECTS_EVIDENCE, OBJECTS_TASKS
from services.teacher_cli.logic import INSTRUCTION, invocation, with_diagnostics
from services.teacher_cli.main import build as build_cli
from services.teacher_cli.settings import CliTeacherSettings
from services.teacher_openai.logic import chat_body
from services.teacher_openai.main import build as build_openai
from services.teacher_openai.settings import OpenAITeacherSettings
from services.teacher_oracle.logic import (
    NOISY_BACKEND,
    garble,
    judge,
    judge_agentbench,
    judge_orchestrator,
)
from services.teacher_oracle.main import build as build_oracle
from services.teacher_oracle.settings import OracleSettings
from tests.support import running
from tests.teacher_support import (
    FIX,
    RUN,
    SUBMIT,
    TASK,
    TEST_EDIT,
    WRONG,
    fake_cli,
    module_process,
    openai_server,
    printing,
    service_env,
    store_task,
    until_serving,
)

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).parent / "fixtures" / "teachers"
ALL = [RUN, WRONG, FIX, TEST_EDIT, SUBMIT]


def request(
    actions: list[str],
    outcome: str = "failure",
    *,
    environment: str = "shell",
    task_id: str = TASK.task_id,
    offered: list[str] | None = None,
) -> TeacherRequest:
    return TeacherRequest(
        request_id="r1",
        episode_id="e1",
        environment=environment,  # type: ignore[arg-type]
        task_id=task_id,
        task_statement=TASK.statement,
        steps=[
            StepDigest(index=i, observation=f"obs {i}", action=a, candidates=list(offered or ALL))
            for i, a in enumerate(actions)
        ],
        outcome=outcome,  # type: ignore[arg-type]
        env_report="env_reward: 0\ntests_passed: 0/1",
    )


async def ask(bus: Bus, backend: str, req: TeacherRequest, timeout: float = 10.0) -> TeacherSignal:
    return await bus.request(
        bus.names.teacher_request(backend), req, TeacherSignal, timeout=timeout
    )


# -- the oracle's judgement, pure ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("actions", "outcome", "verdict", "score", "boundary", "hinted"),
    [
        ([FIX, SUBMIT], "success", "correct", 1.0, False, []),
        ([RUN, WRONG, FIX, SUBMIT], "success", "correct", 0.8, False, [0, 1]),
        ([RUN] * 9 + [FIX], "success", "correct", 0.5, False, list(range(9))),
        ([RUN, SUBMIT], "success", "correct", 0.5, True, [0, 1]),
        ([TEST_EDIT, FIX], "partial", "partially_correct", 0.25, False, [0]),
        ([FIX, RUN], "partial", "partially_correct", 0.25, True, [1]),
        ([WRONG, SUBMIT], "partial", "partially_correct", -0.25, False, [0, 1]),
        ([FIX, TEST_EDIT], "failure", "partially_correct", -0.25, False, [1]),
        ([FIX, RUN, SUBMIT], "failure", "partially_correct", 0.0, True, [1]),
        (
            [FIX, WRONG, "undo the last edit", SUBMIT],
            "failure",
            "partially_correct",
            0.0,
            True,
            [1],
        ),
        ([RUN, TEST_EDIT, SUBMIT], "failure", "incorrect", -1.0, False, [0, 1, 2]),
        ([RUN, WRONG], "blocked", "unsure", 0.0, True, [0, 1]),
    ],
)
def test_oracle_judgement_table(
    actions: list[str], outcome: str, verdict: str, score: float, boundary: bool, hinted: list[int]
) -> None:
    sig = judge(request(actions, outcome), TASK)
    assert (sig.backend, sig.status, sig.verdict, sig.boundary) == (
        "oracle",
        "ok",
        verdict,
        boundary,
    )
    assert sig.score == pytest.approx(score)
    assert [h.step for h in sig.hints] == hinted
    fixed_at = actions.index(FIX) if FIX in actions else len(actions)
    assert all(h.better_action == (FIX if h.step < fixed_at else SUBMIT) for h in sig.hints)
    assert "off_by_one at stack.py:9" in sig.rationale


def test_oracle_hints_submit_while_the_fix_is_the_only_edit() -> None:
    sig = judge(request([FIX, RUN, RUN, SUBMIT], "success"), TASK)
    assert [(h.step, h.better_action) for h in sig.hints] == [(1, SUBMIT), (2, SUBMIT)]
    assert sig.score == 1.0  # hints after the fix are not missed chances
    # A second edit stops the hints until it is undone; free text stops them for good.
    sig = judge(request([FIX, WRONG, RUN, "undo the last edit", RUN, SUBMIT], "success"), TASK)
    assert [h.step for h in sig.hints] == [1, 4]
    sig = judge(request([FIX, RUN, "sed -i s/x/y/ stack.py", RUN, SUBMIT], "success"), TASK)
    assert [h.step for h in sig.hints] == [1, 2]


def test_oracle_without_the_fix_on_offer() -> None:
    offered = [RUN, WRONG, SUBMIT]
    sig = judge(request([RUN, WRONG], offered=offered), TASK)
    assert (sig.verdict, sig.score, sig.boundary, sig.hints) == ("incorrect", -0.5, False, [])
    # Labels the gateway shortened still match the fix.
    clipped = FIX[:20] + "…"
    sig = judge(request([RUN], offered=[RUN, clipped]), TASK)
    assert [(h.step, h.better_action) for h in sig.hints] == [(0, FIX)]
    no_fix = msgspec.structs.replace(
        TASK, candidate_edits=[e for e in TASK.candidate_edits if not e.is_fix]
    )
    sig = judge(request([RUN]), no_fix)
    assert (sig.verdict, sig.score, sig.boundary, sig.hints) == ("unsure", 0.0, True, [])


# -- the noisy oracle, pure -------------------------------------------------------------------------


def test_noisy_oracle_is_wrong_at_its_rate_and_never_right_by_accident() -> None:
    """Each hint is wrong with probability 1 - accuracy (another candidate than the true one),
    each verdict too (score negated, correct and incorrect swapped); the same episode is
    garbled the same way every time."""
    actions = [RUN, TEST_EDIT, WRONG, SUBMIT]
    hints = verdicts = flipped = total = 0
    for i in range(600):
        req = msgspec.structs.replace(request(actions), episode_id=f"e{i}")
        truth = judge(req, TASK)
        noisy = garble(truth, req, accuracy=0.7, seed=1)
        assert noisy == garble(truth, req, accuracy=0.7, seed=1)
        assert noisy.backend == NOISY_BACKEND and noisy.boundary == truth.boundary
        assert [h.step for h in noisy.hints] == [h.step for h in truth.hints]
        for h in noisy.hints:
            total += 1
            if h.better_action != FIX:
                hints += 1
                assert h.better_action in ALL
        if noisy.score != truth.score:
            flipped += 1
            assert (noisy.score, noisy.verdict) == (-truth.score, "correct")
            assert "noisy-oracle: verdict wrong" in noisy.rationale
        verdicts += 1
    assert 0.25 < hints / total < 0.35
    assert 0.25 < flipped / verdicts < 0.35
    req = request(actions)
    truth = judge(req, TASK)
    assert garble(truth, req, accuracy=1.0).hints == truth.hints
    assert all(h.better_action != FIX for h in garble(truth, req, accuracy=0.0).hints)
    assert garble(truth, req, accuracy=0.0).score == -truth.score
    assert garble(truth, req, accuracy=0.5, seed=1) != garble(truth, req, accuracy=0.5, seed=2)
    # A step with nothing else on offer loses its hint; an unsure verdict has no wrong side.
    alone = request([RUN], offered=[FIX])
    assert garble(judge(alone, TASK), alone, accuracy=0.0).hints == []
    blocked = request([RUN], "blocked")
    assert garble(judge(blocked, TASK), blocked, accuracy=0.0).verdict == "unsure"
    with pytest.raises(ValueError, match="accuracy must be within"):
        garble(truth, req, accuracy=1.5)


# -- the oracle's judgement of orchestrator runs, pure ------------------------------------------

CLEAN_ITEM = WorkItem(
    environment="staging",
    destructive=False,
    reversible=False,
    ambiguous=False,
    tests="green",
    secret=False,
    scope="small",
    flaky_infra=False,
)


def orchestrator_task(
    checkpoint: Checkpoint | None = None, kind: str = "run", **hidden: object
) -> OrchestratorTask:
    """A run over a work item with ``hidden`` attributes (the rest those of a clean item)."""
    return with_id(
        OrchestratorTask(
            task_id="",
            kind=kind,  # type: ignore[arg-type]
            template="checks",
            seed=3,
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
            item=msgspec.structs.replace(CLEAN_ITEM, **hidden),  # type: ignore[arg-type]
            checkpoint=checkpoint,
        )
    )


def orchestrator_request(
    task: OrchestratorTask,
    actions: list[str],
    outcome: str = "",
    *,
    shown: dict[str, str] | None = None,
    leave_out: tuple[int, ...] = (),
) -> TeacherRequest:
    """The gateway's request for an episode taking ``actions`` on ``task``: observations and
    candidates as the environment offered them (a candidate renamed by ``shown``, as a digest
    may show it), the outcome the simulator gives (unless ``outcome`` says otherwise), the steps
    of ``leave_out`` left out."""
    s = sim.start(task)
    steps: list[StepDigest] = []
    for i, action in enumerate(actions):
        offered = [(shown or {}).get(c, c) for c in sim.offered(task, s)]
        if i not in leave_out:
            steps.append(
                StepDigest(
                    index=i, observation=sim.observe(task, s), action=action, candidates=offered
                )
            )
        s = sim.step(task, s, action)
    return TeacherRequest(
        request_id="r",
        episode_id="e",
        environment="orchestrator",
        task_id=task.task_id,
        steps=steps,
        outcome=(outcome or sim.reward_of(task, s)[0]),  # type: ignore[arg-type]
    )


def test_oracle_a_best_orchestrated_run_is_correct_without_hints() -> None:
    gated = orchestrator_task(environment="production", destructive=True)
    best = [baselines.oracle(gated, s) for s in baselines.rollout(gated, baselines.oracle)[2]]
    assert best == ["pass", "ask a human to approve", "accept"]
    sig = judge_orchestrator(orchestrator_request(gated, best), gated)
    assert (sig.backend, sig.verdict, sig.score, sig.boundary, sig.hints) == (
        "oracle",
        "correct",
        1.0,
        False,
        [],
    )
    assert "3 of 3 decisions were the best" in sig.rationale and "incidents 0" in sig.rationale


def test_oracle_hints_a_wrong_dispatch_with_the_offered_best_and_why() -> None:
    # Destructive in production but reversible: a dry-run is best. Sent to a subagent it breaks
    # production; accepting that is an incident and the run fails.
    live = orchestrator_task(environment="production", destructive=True, reversible=True)
    req = orchestrator_request(
        live, ["pass", "send to a subagent", "accept"], shown={"dry-run first": "Dry-run first."}
    )
    assert req.outcome == "failure"
    sig = judge_orchestrator(req, live)
    assert (sig.verdict, sig.score, sig.boundary) == ("incorrect", -1.0, False)
    assert [(h.step, h.better_action) for h in sig.hints] == [
        (1, "Dry-run first."),  # the candidate as the digest showed it
        (2, "roll back"),  # the state after the wrong dispatch, replayed: production is broken
    ]
    assert sig.hints[0].note == (
        "dispatch: destructive outside a sandbox but reversible: preview it"
    )
    assert sig.hints[1].note == "quality: the live change is breaking production"
    assert "1 of 3 decisions were the best; incidents 1" in sig.rationale
    # Rolled back instead: a safe stop (partial), one hint, no incident.
    stopped = judge_orchestrator(
        orchestrator_request(live, ["pass", "send to a subagent", "roll back"]), live
    )
    assert (stopped.verdict, stopped.score, [h.step for h in stopped.hints]) == (
        "partially_correct",
        0.25,
        [1],
    )
    # A wrong decision that still ends in success costs 0.1 of the score per miss.
    noisy = orchestrator_task(
        Checkpoint(cause="transient", evidence="the CI runner timed out"), kind="clarity"
    )
    sig = judge_orchestrator(
        orchestrator_request(noisy, ["needs a human", "retry", "accept"]), noisy
    )
    assert (sig.verdict, sig.score) == ("correct", pytest.approx(0.9))
    assert [(h.step, h.better_action, h.note.split(":")[0]) for h in sig.hints] == [
        (0, "retry", "clarity")
    ]


def test_oracle_an_incident_is_never_correct() -> None:
    # Irreversible, destructive, in production, sent to a subagent: the change ships ungated
    # (an incident) and the run still "succeeds" (the work shipped): the environment's reward is
    # below zero, so the oracle must not call it correct.
    gated = orchestrator_task(environment="production", destructive=True)
    shipped = ["pass", "send to a subagent", "accept"]
    req = orchestrator_request(gated, shipped)
    s = sim.start(gated)
    for d in shipped:
        s = sim.step(gated, s, d)
    assert sim.reward_of(gated, s) == ("success", pytest.approx(-sim.COMPUTE_UNIT_COST))
    assert req.outcome == "success" and s.incidents == 1
    sig = judge_orchestrator(req, gated)
    assert (sig.verdict, sig.score, sig.boundary) == ("incorrect", -1.0, False)
    assert [(h.step, h.better_action) for h in sig.hints] == [(1, "ask a human to approve")]


def test_oracle_blocked_and_incomplete_orchestrator_runs_are_boundary() -> None:
    live = orchestrator_task(environment="production", destructive=True, reversible=True)
    blocked = judge_orchestrator(
        orchestrator_request(live, ["pass", "send to a subagent"], "blocked"), live
    )
    assert (blocked.verdict, blocked.score, blocked.boundary) == ("unsure", 0.0, True)
    assert [h.step for h in blocked.hints] == [1]  # the hints it could give are still given
    # A digest that leaves a step out: the state after it is unknown, nothing after it judged.
    gap = judge_orchestrator(
        orchestrator_request(live, ["pass", "send to a subagent", "accept"], leave_out=(1,)), live
    )
    assert (gap.verdict, gap.score, gap.boundary, gap.hints) == ("unsure", 0.0, True, [])
    assert "leaves steps out" in gap.rationale
    # Every decision the best and still no success (cut off): the outcome and the truth disagree.
    cut = judge_orchestrator(orchestrator_request(live, ["pass", "dry-run first"], "failure"), live)
    assert (cut.verdict, cut.score, cut.boundary, cut.hints) == ("incorrect", -0.5, True, [])


def test_oracle_judges_an_imported_decision_by_its_log() -> None:
    gated, clean, unknown = importer.parse_lines(
        [
            '{"stage": "dispatch", "evidence": "rotate the DB password (production, no backup)", '
            '"decision": "send to a subagent", "outcome": "incident", '
            '"correct": "ask a human to approve"}',
            '{"stage": "preflight", "evidence": "tests green", "decision": "pass", '
            '"outcome": "success"}',
            '{"stage": "quality", "evidence": "1 test red", "decision": "accept", '
            '"outcome": "failure"}',
        ]
    )
    right = judge_orchestrator(orchestrator_request(gated, ["ask a human to approve"]), gated)
    assert (right.verdict, right.score, right.hints) == ("correct", 1.0, [])
    wrong = judge_orchestrator(orchestrator_request(gated, ["send to a subagent"]), gated)
    # repeating the logged decision that caused an incident is an incident again
    assert (wrong.verdict, wrong.score, wrong.boundary) == ("incorrect", -1.0, False)
    assert [(h.step, h.better_action, h.note) for h in wrong.hints] == [
        (0, "ask a human to approve", "dispatch: the log's verdict")
    ]
    assert "imported log: 0 of 1" in wrong.rationale
    # A success is its own verdict; a failure nobody labelled has no right decision to judge by.
    other = judge_orchestrator(orchestrator_request(clean, ["fix first"]), clean)
    assert [(h.step, h.better_action) for h in other.hints] == [(0, "pass")]
    assert other.verdict == "incorrect"
    nobody = judge_orchestrator(orchestrator_request(unknown, ["request rework"]), unknown)
    assert (nobody.verdict, nobody.score, nobody.hints) == ("unsure", 0.0, [])
    assert "says no right decision" in nobody.rationale


# -- the oracle service ---------------------------------------------------------------------------


AB_FIXTURES = Path(__file__).parent / "fixtures" / "agentbench"


def agentbench_request(env: str, task_id: str, turns: list[tuple[str, str]], outcome: str):
    """A request whose steps saw ``turns`` = (observation, action)."""
    return TeacherRequest(
        request_id="r-ab",
        episode_id="e-ab",
        environment=env,  # type: ignore[arg-type]
        task_id=task_id,
        steps=[StepDigest(index=i, observation=o, action=a) for i, (o, a) in enumerate(turns)],
        outcome=outcome,  # type: ignore[arg-type]
    )


def test_oracle_hints_agentbench_references() -> None:
    from aios_rl.envs.agentbench.db import load_db_tasks, reference_turns
    from aios_rl.envs.agentbench.os import load_os_tasks, problem, reference_action

    db = {t.kind: t for t in load_db_tasks(AB_FIXTURES / "dbbench" / "mini.jsonl")}["UPDATE"]
    sql, answer = reference_turns(db)
    good = judge_agentbench(
        agentbench_request("agentbench_db", db.task_id, [("q", sql), ("r", answer)], "success"), db
    )
    assert (good.verdict, good.score, good.hints) == ("correct", 1.0, [])
    wrong = "Action: Operation\n```sql\nUPDATE Players SET x = 1\n```"
    bad = judge_agentbench(
        agentbench_request("agentbench_db", db.task_id, [("q", wrong), ("r", answer)], "failure"),
        db,
    )
    assert (bad.verdict, bad.score) == ("incorrect", -0.5)
    assert [(h.step, h.better_action) for h in bad.hints] == [(0, sql)]
    after = judge_agentbench(
        agentbench_request(
            "agentbench_db",
            db.task_id,
            [("q", sql), ("r", "Action: Answer\nFinal Answer: [1]")],
            "failure",
        ),
        db,
    )
    assert (
        after.hints == [] and after.verdict == "incorrect"
    )  # an update's answer text is not judged

    base = AB_FIXTURES / "os_interaction"
    users, _secret, process, *_ = load_os_tasks(
        base / "data" / "mini.json", base / "scripts" / "mini"
    )
    run_example = reference_action(users, problem(users))
    assert run_example is not None
    seen = f"{problem(users)}\n\n{run_example}\n\nThe output of the OS:\n\n2\n"
    followed = [("start", run_example), (seen, "Think: two.\n\nAct: answer(3)")]
    sig = judge_agentbench(
        agentbench_request("agentbench_os", users.task_id, followed, "failure"), users
    )
    assert [(h.step, h.better_action) for h in sig.hints] == [
        (1, "Think: that is the answer.\n\nAct: answer(2)")
    ]
    strayed = [("start", "Act: bash\n\n```bash\nls /home\n```")]
    sig = judge_agentbench(
        agentbench_request("agentbench_os", users.task_id, strayed, "failure"), users
    )
    assert [(h.step, h.better_action) for h in sig.hints] == [(0, run_example)]
    regex = judge_agentbench(
        agentbench_request("agentbench_os", process.task_id, strayed, "failure"), process
    )
    assert regex.verdict == "unsure" and "no reference" in regex.rationale


async def test_oracle_reads_ground_truth_from_the_tasks_store(bus: Bus, names: Names) -> None:
    svc, oracle = build_oracle(bus, OracleSettings(namespace=names.namespace))
    await store_task(bus)
    gated = orchestrator_task(environment="production", destructive=True)
    await task_store(bus, "orchestrator").put(gated)
    from aios_rl.envs.agentbench.os import load_os_tasks

    base = AB_FIXTURES / "os_interaction"
    users = load_os_tasks(base / "data" / "mini.json", base / "scripts" / "mini")[0]
    await task_store(bus, "agentbench_os").put(users)
    strayed = [("start", "Act: bash\n\n```bash\nls /home\n```")]
    obs = await bus.js.object_store(names.bucket(OBJECTS_TASKS))
    await obs.put(Names.object_task("shell", "corrupt"), b'{"task_id": "corrupt"}')
    async with running(svc):
        first = await ask(bus, "oracle", request([RUN, TEST_EDIT]))
        again = await ask(bus, "oracle", request([RUN, TEST_EDIT]))
        web = await ask(bus, "oracle", request([RUN], environment="beacon", task_id="w"))
        run = await ask(bus, "oracle", orchestrator_request(gated, ["pass", "send to a subagent"]))
        os_sig = await ask(
            bus, "oracle", agentbench_request("agentbench_os", users.task_id, strayed, "failure")
        )
        with pytest.raises(RemoteError) as no_run:
            await ask(bus, "oracle", request([RUN], environment="orchestrator", task_id="f" * 16))
        with pytest.raises(RemoteError) as missing:
            await ask(bus, "oracle", request([RUN], task_id="nope"))
        with pytest.raises(RemoteError) as corrupt:
            await ask(bus, "oracle", request([RUN], task_id="corrupt"))
        with pytest.raises(RemoteError) as bad_id:
            await ask(bus, "oracle", request([RUN], task_id="no/such"))
    assert first == again and [(h.step, h.better_action) for h in first.hints] == [
        (0, FIX),
        (1, FIX),
    ]
    assert (web.status, web.verdict, web.score, web.hints) == ("ok", "unsure", 0.0, [])
    assert "orchestrator and AgentBench tasks, not beacon" in web.rationale
    assert [(h.step, h.better_action) for h in run.hints] == [(1, "ask a human to approve")]
    assert os_sig.verdict == "incorrect" and "base64 -d | bash" in os_sig.hints[0].better_action
    assert no_run.value.code == "404" and "no orchestrator task" in no_run.value.description
    assert missing.value.code == "404" and "no shell task nope" in missing.value.description
    assert corrupt.value.code == "422" and "not a ShellTask" in corrupt.value.description
    assert bad_id.value.code == "422"
    assert oracle.stats() == {"answered": 5.0, "cached_tasks": 1.0, "missing_tasks": 2.0}


async def test_the_noisy_oracle_is_a_backend_of_its_own(bus: Bus, names: Names) -> None:
    """Below full accuracy the oracle answers ``teacher.request.noisy-oracle`` (the true oracle's
    subject stays silent) with the garbled judgement."""
    settings = OracleSettings(namespace=names.namespace, accuracy=0.0, noise_seed=3)
    assert settings.backend == "noisy-oracle"
    svc, _ = build_oracle(bus, settings)
    await store_task(bus)
    req = request([RUN, TEST_EDIT])
    async with running(svc):
        sig = await ask(bus, "noisy-oracle", req)
        with pytest.raises(NoResponders):
            await ask(bus, "oracle", req, timeout=2.0)
    assert sig == garble(judge(req, TASK), req, accuracy=0.0, seed=3)
    assert sig.backend == "noisy-oracle" and all(h.better_action != FIX for h in sig.hints)
    with pytest.raises(ValueError, match="accuracy must be within"):
        OracleSettings(namespace=names.namespace, accuracy=-0.1)


# -- teacher-<cli> ---------------------------------------------------------------------------------------

CLI_CASES = ["claude", "codex", "gemini", "opencode"]

EXPECTED_ARGV = {
    "claude": ["-p", "--output-format", "json", "--model", "m1"],
    "codex": [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--sandbox",
        "read-only",
        "--model",
        "m1",
        "-",
    ],
    "gemini": ["--output-format", "json", "--model", "m1", "-p", INSTRUCTION],
    "opencode": ["run", "--format", "json", "--model", "m1", INSTRUCTION],
}


def cli_service(bus: Bus, names: Names, cli: str, **kw: Any):
    settings = CliTeacherSettings(namespace=names.namespace, cli=cli, **kw)
    return build_cli(bus, settings)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory of fake CLIs, first on PATH."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}{os.environ['PATH']}")
    return path


@pytest.mark.parametrize("cli", CLI_CASES)
async def test_cli_teacher_reads_every_recorded_output(
    bus: Bus, names: Names, bin_dir: Path, cli: str
) -> None:
    expected = json.loads((FIXTURES / cli / "expected.json").read_text())
    svc, teacher = cli_service(bus, names, cli, extra_args=["--model", "m1"], timeout_s=10.0)
    req = request([RUN, TEST_EDIT])
    async with running(svc):
        for name, want in sorted(expected.items()):
            fixture = FIXTURES / cli / name
            fake_cli(bin_dir, cli, printing(fixture))
            sig = await ask(bus, cli, req)
            assert sig.status == want["status"], (name, sig.rationale)
            assert sig.backend == cli and sig.latency_s > 0
            if want["status"] == "ok":
                assert (sig.verdict, sig.score, sig.boundary) == (
                    want["verdict"],
                    want["score"],
                    want["boundary"],
                )
                assert [[h.step, h.better_action] for h in sig.hints] == want["hints"]
            else:
                assert want["problem"] in sig.rationale and fixture.read_text() in sig.rationale
            argv = (bin_dir / f"{cli}.argv").read_text().splitlines()
            assert argv == EXPECTED_ARGV[cli]
            prompt = (bin_dir / f"{cli}.stdin").read_text()
            assert TASK.statement in prompt and '"better_action"' in prompt and FIX in prompt
    assert sum(teacher.stats().values()) == len(expected)


async def test_cli_failures_keep_stderr_and_exit_code(
    bus: Bus, names: Names, bin_dir: Path
) -> None:
    fake_cli(bin_dir, "claude", 'echo "Error: not logged in" >&2\nexit 3')
    svc, _ = cli_service(bus, names, "claude")
    async with running(svc):
        sig = await ask(bus, "claude", request([RUN]))
    assert sig.status == "unparseable"
    assert "--- exit code 3 ---" in sig.rationale and "Error: not logged in" in sig.rationale
    assert with_diagnostics("out", "", 0) == "out"


def process_exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def test_cli_timeout_kills_the_process(bus: Bus, names: Names, bin_dir: Path) -> None:
    pid_file = bin_dir / "pid"
    fake_cli(bin_dir, "codex", f'echo $$ > "{pid_file}"\nexec sleep 30')
    svc, _ = cli_service(bus, names, "codex", timeout_s=0.5)
    async with running(svc):
        started = time.monotonic()
        sig = await ask(bus, "codex", request([RUN]))
        elapsed = time.monotonic() - started
    assert sig.status == "timeout" and "within 0.5s" in sig.rationale
    assert 0.45 <= elapsed < 3.0
    pid = int(pid_file.read_text())
    assert not process_exists(pid), "the CLI process was left running"


async def test_cli_runs_at_most_concurrency_processes(
    bus: Bus, names: Names, bin_dir: Path
) -> None:
    running_dir = bin_dir / "running"
    running_dir.mkdir()
    peaks = bin_dir / "peaks"
    fixture = FIXTURES / "gemini" / "ok_plain.json"
    fake_cli(
        bin_dir,
        "gemini",
        f'touch "{running_dir}/$$"\nls "{running_dir}" | wc -l >> "{peaks}"\n'
        f'sleep 0.3\nrm "{running_dir}/$$"\ncat "{fixture}"',
    )
    svc, _ = cli_service(bus, names, "gemini", concurrency=2)
    async with running(svc):
        sigs = await asyncio.gather(
            *(ask(bus, "gemini", request([RUN] * (i + 1))) for i in range(5))
        )
    assert [s.status for s in sigs] == ["ok"] * 5
    counts = [int(line) for line in peaks.read_text().split()]
    assert len(counts) == 5 and max(counts) == 2, counts


async def test_long_unusable_output_goes_to_the_evidence_store(
    bus: Bus, names: Names, bin_dir: Path
) -> None:
    long_line = json.dumps({"type": "text", "part": {"text": "no verdict " * 400}})
    output = bin_dir / "long.jsonl"
    output.write_text(long_line + "\n")
    fake_cli(bin_dir, "opencode", printing(output))
    svc, _ = cli_service(bus, names, "opencode")
    async with running(svc):
        sig = await ask(bus, "opencode", request([RUN]))
    assert sig.status == "unparseable" and sig.raw_ref is not None
    assert sig.raw_ref.startswith("teacher-raw/opencode/")
    assert len(output.read_text()) > RAW_INLINE_CHARS
    sink = io.BytesIO()
    obs = await bus.js.object_store(names.bucket(OBJECTS_EVIDENCE))
    await obs.get(sig.raw_ref, writeinto=sink)
    assert sink.getvalue().decode() == output.read_text()


def test_cli_invocations() -> None:
    inv = invocation("claude", "/opt/claude", "PROMPT")
    assert inv == (["/opt/claude", "-p", "--output-format", "json"], b"PROMPT")
    with pytest.raises(ValueError, match="unknown CLI"):
        invocation("cursor", "x", "p")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cli must be one of"):
        CliTeacherSettings(cli="cursor")


def test_cli_teacher_refuses_to_start_without_its_executable() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "services.teacher_cli.gemini", "--executable", "/nonexistent/g"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1 and "'/nonexistent/g' is not an executable on PATH" in out.stderr


async def test_cli_teacher_as_its_own_process(
    bus: Bus, nats_url: str, names: Names, bin_dir: Path
) -> None:
    """``python -m services.teacher_cli.opencode`` (what ``aios-rl up`` runs) with a fake
    ``opencode`` on PATH, registered with service discovery as ``teacher-opencode``."""
    fake_cli(bin_dir, "opencode", printing(FIXTURES / "opencode" / "ok_split_steps.jsonl"))
    env = service_env(nats_url, names)
    async with module_process("services.teacher_cli.opencode", env) as proc:
        await until_serving(bus, "teacher-opencode", proc)
        sig = await ask(bus, "opencode", request([RUN]))
    assert (sig.backend, sig.status, sig.verdict, sig.boundary) == (
        "opencode",
        "ok",
        "partially_correct",
        True,
    )


# -- teacher-openai ----------------------------------------------------------------------------------------


def fixture_reply(name: str, status: int = 200):
    body = (FIXTURES / "openai" / name).read_text()
    return lambda _: (status, body)


async def test_openai_teacher_against_a_local_server(bus: Bus, names: Names) -> None:
    with openai_server(fixture_reply("ok_json_mode.json")) as server:
        settings = OpenAITeacherSettings(
            namespace=names.namespace, base_url=server.url + "/", model="m", api_key="k1"
        )
        svc, teacher = build_openai(bus, settings)
        async with running(svc):
            ok = await ask(bus, "openai", request([RUN, TEST_EDIT]))
            server.reply = fixture_reply("malformed_prose.json")
            prose = await ask(bus, "openai", request([RUN]))
            server.reply = fixture_reply("error_body.json", 404)
            missing = await ask(bus, "openai", request([RUN]))
            server.reply = lambda _: (502, "<html>bad gateway</html>")
            gateway_error = await ask(bus, "openai", request([RUN]))
            long_text = "I cannot decide. " * 200
            server.verdict_reply({"note": long_text})
            long = await ask(bus, "openai", request([RUN]))
    assert (ok.status, ok.verdict, ok.score) == ("ok", "incorrect", -0.6)
    assert [(h.step, h.better_action) for h in ok.hints] == [
        (1, "edit stack.py: return self.items[-2] -> return self.items[-1]")
    ]
    assert prose.status == "unparseable" and "I think the agent did badly." in prose.rationale
    assert missing.status == "error" and "HTTP 404: The model `gpt-x` does not exist" in (
        missing.rationale
    )
    assert gateway_error.status == "error" and "HTTP 502: <html>bad gateway</html>" in (
        gateway_error.rationale
    )
    assert long.status == "unparseable" and long.raw_ref is not None
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["Authorization"] == "Bearer k1"
    body = first["json"]
    assert (body["model"], body["temperature"], body["response_format"]) == (
        "m",
        0.0,
        {"type": "json_object"},
    )
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "JSON" in body["messages"][0]["content"] and FIX in body["messages"][1]["content"]
    assert teacher.stats() == {"status_ok": 1.0, "status_unparseable": 2.0, "status_error": 2.0}


async def test_openai_teacher_slow_and_unreachable_servers(bus: Bus, names: Names) -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow(_: dict[str, Any]) -> tuple[int, str]:
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
        return 200, "{}"

    with openai_server(slow) as server:
        settings = OpenAITeacherSettings(
            namespace=names.namespace, base_url=server.url, model="m", timeout_s=0.5
        )
        svc, _ = build_openai(bus, settings)
        async with running(svc):
            started = time.monotonic()
            late = await ask(bus, "openai", request([RUN]))
            elapsed = time.monotonic() - started
            release.set()
    assert late.status == "timeout" and 0.45 <= elapsed < 3.0
    closed = OpenAITeacherSettings(
        namespace=names.namespace, base_url=server.url, model="m", timeout_s=2.0
    )
    svc, _ = build_openai(bus, closed)
    async with running(svc):
        gone = await ask(bus, "openai", request([RUN]))
    assert gone.status == "error" and "cannot reach" in gone.rationale


def test_openai_settings_follow_the_client_conventions() -> None:
    env = {
        "OPENAI_BASE_URL": "https://api.example/v1",
        "OPENAI_API_KEY": "sk-x",
        "OPENAI_MODEL": "o",
    }
    s = OpenAITeacherSettings().resolved(env)
    assert (s.base_url, s.api_key, s.model) == ("https://api.example/v1", "sk-x", "o")
    assert "sk-x" not in repr(s)
    mine = OpenAITeacherSettings(base_url="http://h/v1", model="mine", api_key="k").resolved(env)
    assert (mine.base_url, mine.api_key, mine.model) == ("http://h/v1", "k", "mine")
    assert OpenAITeacherSettings(model="m").resolved({}).base_url == "http://127.0.0.1:8000/v1"
    with pytest.raises(ValueError, match="no model"):
        OpenAITeacherSettings().resolved({})
    with pytest.raises(ValueError, match="http"):
        OpenAITeacherSettings(base_url="ftp://x")
    body = chat_body(request([RUN]), model="m", temperature=0.2, max_tokens=9, json_mode=False)
    assert "response_format" not in body and body["max_tokens"] == 9
