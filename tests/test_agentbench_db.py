"""AgentBench's DB bench as the ``agentbench_db`` environment, against a real MariaDB (Debian's,
installed by ``deploy/setup.sh``): the protocol and the judge (pure), the server's isolation
(one database and user per episode, a statement time limit, nothing left after an episode),
episodes of the project's own tasks in AgentBench's format, the runner service on a real
nats-server, ``aios-rl agentbench verify``, and AgentBench's own dev split when it is present."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from aios_rl.bus import Bus
from aios_rl.envs import registry
from aios_rl.envs.agentbench.db import (
    expected_hash,
    init_statements,
    judge_answer,
    load_db_tasks,
    parse_action,
    table_hash_sql,
)
from aios_rl.envs.agentbench.db_adapter import DbEnv, DbHost, DbRunnerSettings
from aios_rl.envs.agentbench.mariadb import MYSQL_SQL_MODE, MariaDb
from aios_rl.envs.agentbench.verify import reference_turns, verify_db
from contracts import ActRequest, AgentBenchDbTask, DbTable, Names, RolloutJob
from services.runner.main import build as build_runner
from services.runner.main import provision_runner

from .support import agentbench_dev_dir, eventually, play
from .test_realrepo import run_cli
from .test_shell_runner import policy_service, run_jobs

MINI = Path(__file__).parent / "fixtures" / "agentbench" / "dbbench" / "mini.jsonl"
DEV_DIR = agentbench_dev_dir()


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDb]:
    db = MariaDb(statement_timeout_s=2.0)
    db.start()
    try:
        yield db
    finally:
        db.close()


@pytest.fixture(scope="module")
def tasks() -> dict[str, AgentBenchDbTask]:
    return {t.kind: t for t in load_db_tasks(MINI, "dev")}


# -- pure ------------------------------------------------------------------------------------------


def test_actions_are_read_as_agentbench_reads_them() -> None:
    op = parse_action("Think.\nAction: Operation\n```sql\nSELECT *\nFROM t;\n```\nmore")
    assert (op.kind, op.text) == ("operation", "SELECT * FROM t;")
    assert parse_action('Action: Answer\nFinal Answer: ["a"]').text == ' ["a"]'
    assert parse_action("Action: Operation\nno block here") == parse_action("nothing")
    assert parse_action("nothing").kind == "answer" and parse_action("nothing").text == ""


@pytest.mark.parametrize(
    ("answer", "label", "ok"),
    [
        (' ["March 19, 1998"]', ["March 19, 1998"], True),
        (" [2]", ["2"], True),
        (" 2", ["2.0"], True),  # one value each: compared as numbers
        (' ["Cid", "Ann"]', ["Ann", "Cid"], True),  # several: as sets
        (' ["Ann"]', ["Ann", "Cid"], False),
        (" March 19, 1998", ["March 19, 1998"], False),  # the leading space stays, as in AgentBench
        (" __import__('os').system('true')", ["x"], False),  # never evaluated
        (" [[1], [2]]", ["1", "2"], False),
    ],
)
def test_the_judge(answer: str, label: list[str], ok: bool) -> None:
    assert judge_answer(answer, label) is ok


def test_the_fixture_tasks_load_with_content_addresses(tasks: dict[str, AgentBenchDbTask]) -> None:
    assert set(tasks) == {"counting", "ranking", "other", "UPDATE", "INSERT", "DELETE"}
    assert len({t.task_id for t in tasks.values()}) == 6
    with pytest.raises(ValueError, match="needs answer_md5"):
        bad = MINI.read_text().splitlines()[3].replace('"answer_md5"', '"x"')
        tmp = MINI.parent / "bad.jsonl"
        try:
            tmp.write_text(bad + "\n")
            load_db_tasks(tmp)
        finally:
            tmp.unlink()


def test_names_with_backquotes_are_quoted() -> None:
    (create, _), (insert, params) = init_statements(
        DbTable(name="we`ird", columns=["a`b"], rows=[["x"]])
    )
    assert create == "CREATE TABLE `we``ird` (`a``b` TEXT)"
    assert insert == "INSERT INTO `we``ird` (`a``b`) VALUES (%s)" and params == ["x"]


def test_a_percent_sign_in_a_name_is_doubled_only_where_parameters_go() -> None:
    """The driver formats a statement with parameters (``%s``): a ``%`` of a name is written
    ``%%`` there; the values are parameters, never SQL text; a statement without is plain."""
    (create, none), (insert, params) = init_statements(
        DbTable(name="Share %", columns=["Vote %", "b"], rows=[["48%", "%s"]])
    )
    assert create == "CREATE TABLE `Share %` (`Vote %` TEXT,`b` TEXT)" and none == []
    assert insert == "INSERT INTO `Share %%` (`Vote %%`,`b`) VALUES (%s,%s)"
    assert params == ["48%", "%s"]


# -- the server ------------------------------------------------------------------------------------


def test_the_table_hash_in_mariadb_is_agentbenchs(server: MariaDb) -> None:
    table = DbTable(name="T", columns=["a", "b"], rows=[["1", "x"], ["2", "y,z"], ["3", "é"]])
    ep = server.episode(init_statements(table))
    try:
        assert ep.execute(table_hash_sql(table)) == expected_hash(table.rows)
    finally:
        ep.close()


OWNER = """
import asyncio, sys
from pathlib import Path
from aios_rl.envs.agentbench.mariadb import MariaDb

async def main() -> None:
    db = MariaDb(root=Path(sys.argv[1]))
    await asyncio.to_thread(db.start)  # from an executor thread, as the DB host starts it
    await asyncio.to_thread(lambda: None)  # the loop's executor threads may come and go
    print(db.proc.pid, flush=True)
    await asyncio.Event().wait()  # until killed, never closing the server

asyncio.run(main())
"""


def _program(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]


def _state(pid: int) -> str:
    """The process's state letter; ``X`` (dead) once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except FileNotFoundError:
        return "X"


async def test_a_killed_owner_leaves_no_server_behind(tmp_path: Path) -> None:
    """A runner (or test) SIGKILLed with its server open orphans no ``mariadbd``: the server is
    started from a thread that lives as long as it and asks for SIGTERM when its owner dies."""
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OWNER, str(tmp_path / "db"), stdout=asyncio.subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(owner.stdout.readline(), 90)  # type: ignore[union-attr]
        pid = int(line)
        assert _program(pid).endswith(b"mariadbd")
    finally:
        owner.kill()
        await owner.wait()

    async def gone() -> bool | None:
        return True if _state(pid) in "ZX" else None

    try:
        await eventually(gone, within=60, what=f"mariadbd {pid} gone after its owner was killed")
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)  # not left behind by this test either
        raise


def test_an_episode_sees_only_its_own_database_and_leaves_nothing(server: MariaDb) -> None:
    before = server.databases()
    table = DbTable(name="T", columns=["a"], rows=[["secret"]])
    one, two = server.episode(init_statements(table)), server.episode(init_statements(table))
    try:
        assert one.execute("SELECT a FROM T") == "[('secret',)]"
        denied = two.execute(f"SELECT a FROM `{one.name}`.T")
        assert "denied" in denied and "secret" not in denied
        assert one.execute("SELECT LOAD_FILE('/etc/passwd')") == "[(None,)]"  # no FILE privilege
        assert "denied" in one.execute("CREATE USER 'x'@'localhost'")
        assert "denied" in one.execute("SHOW PROCESSLIST") or one.name in one.execute(
            "SHOW PROCESSLIST"
        )
        assert "execution time exceeded" in one.execute("SELECT SLEEP(5)").lower() or (
            "interrupted" in one.execute("SELECT SLEEP(5)").lower()
        )
        long = one.execute("SELECT REPEAT('x', 5000)")
        assert long.endswith("[TRUNCATED]") and len(long) == 800 + len("[TRUNCATED]")
    finally:
        one.close()
        two.close()
    assert server.databases() == before


async def test_a_table_mysql_would_refuse_leaves_the_episode_running(server: MariaDb) -> None:
    """AgentBench's dev split has a table with an empty column name: MySQL and MariaDB both refuse
    it, the episode goes on without the table (as in AgentBench) and says why."""
    table = DbTable(name="T", columns=["", "b"], rows=[["1", "2"]])
    task = AgentBenchDbTask(
        task_id="x", kind="counting", description="How many?", tables=[table], label=["1"]
    )
    env = await episode(
        server,
        task,
        [
            "Action: Operation\n```sql\nSELECT COUNT(*) FROM T\n```",
            "Action: Answer\nFinal Answer: [1]",
        ],
    )
    assert "doesn't exist" in env.turns[3]
    result = env.result()
    assert result.outcome == "success" and "Incorrect column name" in result.info["init_error"]


def db_line(kind: str, description: str, table: DbTable, label: list[str], **extra: str) -> str:
    """One task in AgentBench's ``dbbench`` JSONL format."""
    return json.dumps(
        {
            "description": description,
            "label": label,
            "type": [kind],
            "table": {
                "table_name": table.name,
                "table_info": {
                    "columns": [{"name": c, "type": "TEXT"} for c in table.columns],
                    "rows": table.rows,
                },
            },
            "add_description": f"The name of this table is {table.name}.",
            **extra,
        }
    )


def verify_lines(server: MariaDb, path: Path, lines: list[str]) -> list[tuple[str, str, str]]:
    """The failures of ``verify`` on the tasks ``lines`` (written to ``path``): none expected."""
    path.write_text("\n".join(lines) + "\n")
    checks = verify_db(load_db_tasks(path, "held"), server=server)
    assert len(checks) == len(lines)
    return [(c.source, c.failure, c.detail) for c in checks if not c.passed or c.detail]


def test_percent_signs_in_names_and_values_load_as_data(server: MariaDb, tmp_path: Path) -> None:
    """A table whose name, column names and values hold ``%`` is made and filled as it is (the
    set-up once failed with ``unsupported format character``): answer and modification tasks
    written in AgentBench's format pass ``verify``, and the agent reads the values verbatim."""
    table = DbTable(
        name="Share %",
        columns=["Party", "Vote %", "Note"],
        rows=[["A", "48%", "%s of 100"], ["B", "52 %", "100%%"], ["C", "%", "%(x)s %d"]],
    )
    insert = "INSERT INTO `Share %` (`Party`, `Vote %`, `Note`) VALUES ('D', '0%', '%s')"
    update = "UPDATE `Share %` SET `Note` = '50%' WHERE `Vote %` LIKE '48\\%'"
    lines = [
        db_line("counting", "How many parties are there?", table, ["3"]),
        db_line(
            "INSERT",
            "Add party D with 0%.",
            table,
            [insert],
            answer_md5=expected_hash([*table.rows, ["D", "0%", "%s"]]),
        ),
        db_line(
            "UPDATE",
            "Party A's note is 50%.",
            table,
            [update],
            answer_md5=expected_hash([["A", "48%", "50%"], *table.rows[1:]]),
        ),
    ]
    assert verify_lines(server, tmp_path / "percent.jsonl", lines) == []
    ep = server.episode(init_statements(table))
    try:
        assert ep.init_error == ""
        assert ep.execute("SELECT `Vote %`, `Note` FROM `Share %` ORDER BY `Party`") == (
            "[('48%', '%s of 100'), ('52 %', '100%%'), ('%', '%(x)s %d')]"
        )
    finally:
        ep.close()


def test_a_blank_value_read_as_a_number_is_zero_as_in_mysql(
    server: MariaDb, tmp_path: Path
) -> None:
    """MySQL reads a blank text value as 0 without a warning; MariaDB warns, and strict mode
    makes that an error in an ``UPDATE`` or ``INSERT`` (``1292 Truncated incorrect DECIMAL
    value: ''``). AgentBench's MySQL accepts those statements, so the environment does too;
    what MySQL refuses as well (a value that is not a number) stays refused, nothing changed."""
    table = DbTable(
        name="Results",
        columns=["team", "points"],
        rows=[["Ann", "12"], ["Bob", ""], ["Cid", "3"], ["Dee", "  "], ["Eve", "7 "]],
    )
    top = "UPDATE `Results` SET `team` = 'top' WHERE `points` > 5"
    ep = server.episode(init_statements(table))
    try:
        assert ep.execute("SELECT @@sql_mode") == f"[('{MYSQL_SQL_MODE}',)]"
        with pytest.raises(pymysql.MySQLError, match="Truncated incorrect DECIMAL value: ''"):
            with ep.conn.cursor() as cur:  # MariaDB's own strict mode: the case at hand
                cur.execute(top)
        assert ep.execute(top) == "[]"
        assert ep.execute("SELECT `team` FROM `Results`") == (
            "[('top',), ('Bob',), ('Cid',), ('Dee',), ('top',)]"
        )
        # still strict for what MySQL refuses too: a value that is not a number
        ep.execute("INSERT INTO `Results` VALUES ('Fay', 'n/a')")
        refused = ep.execute("UPDATE `Results` SET `team` = 'low' WHERE `points` < 5")
        assert refused == "(1292, \"Truncated incorrect DECIMAL value: 'n/a'\")"
        assert "low" not in ep.execute("SELECT `team` FROM `Results`")  # rolled back whole
        # the agent's own transaction stays the agent's
        assert ep.execute("START TRANSACTION") == "[]"
        assert ep.execute("UPDATE `Results` SET `points` = `points` + 1 WHERE `team` = 'Bob'")
        assert ep.execute("SELECT `points` FROM `Results` WHERE `team` = 'Bob'") == "[('1',)]"
        assert ep.execute("ROLLBACK") == "[]"
        assert ep.execute("SELECT `points` FROM `Results` WHERE `team` = 'Bob'") == "[('',)]"
        assert ep.execute("SELECT @@sql_mode, @@max_error_count") == f"[('{MYSQL_SQL_MODE}', 64)]"
        # ONLY_FULL_GROUP_BY, as MySQL 8's default
        assert "1140" in ep.execute("SELECT `team`, MAX(`points`) FROM `Results`")
    finally:
        ep.close()
    copy = "INSERT INTO `Results` SELECT CONCAT(`team`, '2'), `points` FROM `Results` WHERE `points` < 5"
    lines = [
        db_line(
            "UPDATE",
            "Teams with more than 5 points are top.",
            table,
            [top],
            answer_md5=expected_hash([["top", "12"], *table.rows[1:4], ["top", "7 "]]),
        ),
        db_line(
            "UPDATE",
            "Bob gets a point.",
            table,
            ["UPDATE `Results` SET `points` = `points` + 1 WHERE `team` = 'Bob'"],
            answer_md5=expected_hash([table.rows[0], ["Bob", "1"], *table.rows[2:]]),
        ),
        db_line(
            "INSERT",
            "Copy the teams with fewer than 5 points.",
            table,
            [copy],
            answer_md5=expected_hash([*table.rows, ["Bob2", ""], ["Cid2", "3"], ["Dee2", "  "]]),
        ),
    ]
    assert verify_lines(server, tmp_path / "blank.jsonl", lines) == []


# -- episodes --------------------------------------------------------------------------------------


async def episode(server: MariaDb, task: AgentBenchDbTask, turns: list[str]) -> DbEnv:
    return await play(DbHost(DbRunnerSettings(nats_url=""), server), task, turns)


async def test_reference_solutions_succeed_and_wrong_ones_fail(
    server: MariaDb, tasks: dict[str, AgentBenchDbTask]
) -> None:
    for task in tasks.values():
        env = await episode(server, task, reference_turns(task))
        assert env.done and env.result().outcome == "success", (task.kind, env.turns[-1])
        assert env.result().reward == 1.0
    wrong = await episode(server, tasks["ranking"], ['Action: Answer\nFinal Answer: ["Bob"]'])
    assert wrong.result().outcome == "failure" and wrong.result().reward == 0.0
    update = tasks["UPDATE"]
    off = "Action: Operation\n```sql\nUPDATE `Players` SET `goals` = '8' WHERE `name` = 'Bob'\n```"
    bad = await episode(server, update, [off, "Action: Answer\nFinal Answer: []"])
    assert (
        bad.result().outcome == "failure" and bad.result().info["table_hash"] != update.answer_md5
    )


async def test_the_agent_sees_replies_and_runs_out_of_rounds(
    server: MariaDb, tasks: dict[str, AgentBenchDbTask]
) -> None:
    look = "Action: Operation\n```sql\nSELECT name FROM Players WHERE country = 'Canada'\n```"
    env = await episode(
        server, tasks["other"], [look, 'Action: Answer\nFinal Answer: ["Ann","Cid"]']
    )
    assert "[('Ann',), ('Cid',)]" in env.observation and env.result().outcome == "success"
    env = await episode(server, tasks["other"], [look] * 8)
    assert env.rounds == 5 and env.steps == 6 and env.result().outcome == "failure"


# -- the runner and the command line ---------------------------------------------------------------


async def test_db_episodes_through_the_runner(
    bus: Bus, names: Names, tasks: dict[str, AgentBenchDbTask]
) -> None:
    spec = registry.get("agentbench_db")
    await provision_runner(bus, spec)  # not a default environment: the runner makes its consumer
    store = registry.task_store(bus, "agentbench_db")
    await store.put_all(list(tasks.values()))
    by_episode = {f"ep-{i}": t for i, t in enumerate(tasks.values())}

    def answer(req: ActRequest) -> str:
        return reference_turns(by_episode[req.episode_id])[req.step]

    runner, _ = build_runner(bus, spec, DbRunnerSettings(nats_url="", namespace=names.namespace))
    jobs = [
        RolloutJob(
            job_id=f"job-{i}", episode_id=ep, environment="agentbench_db", task_id=t.task_id, seed=i
        )
        for i, (ep, t) in enumerate(by_episode.items())
    ]
    got = await run_jobs(
        bus, names, jobs, [policy_service(bus, answer), runner], 120, env="agentbench_db"
    )
    assert {ep.outcome for ep in got.values()} == {"success"}, {
        e.task_id: e.info for e in got.values()
    }
    assert {e.info["kind"] for e in got.values()} == set(tasks)


async def test_hf_student_episodes_through_the_runner(
    bus: Bus, names: Names, tasks: dict[str, AgentBenchDbTask]
) -> None:
    """The hf student (a tiny random model, as its own tests make it) writes every turn: the
    episodes run to the end and are judged (a random model fails them)."""
    from .test_student_hf import text_policy

    await provision_runner(bus, registry.get("agentbench_db"))
    store = registry.task_store(bus, "agentbench_db")
    chosen = [tasks["counting"], tasks["UPDATE"]]
    await store.put_all(chosen)
    seen: list[ActRequest] = []
    write = text_policy(seen)

    runner, _ = build_runner(
        bus,
        registry.get("agentbench_db"),
        DbRunnerSettings(nats_url="", namespace=names.namespace, observation_chars=2500),
    )
    jobs = [
        RolloutJob(
            job_id=f"hf-{i}",
            episode_id=f"hf-ep-{i}",
            environment="agentbench_db",
            task_id=t.task_id,
            seed=i,
        )
        for i, t in enumerate(chosen)
    ]
    got = await run_jobs(
        bus, names, jobs, [policy_service(bus, write), runner], 120, env="agentbench_db"
    )
    assert set(got) == {j.episode_id for j in jobs}
    for ep in got.values():
        assert ep.outcome in ("success", "failure") and ep.trajectory
        assert all(step.candidates == [] for step in ep.trajectory)  # free text only
    assert seen and all(r.candidates == [] for r in seen)
    assert "Players" in seen[0].observation and "Action: Operation" in seen[0].observation


def test_verify_cli_on_the_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dbbench").mkdir()
    (tmp_path / "dbbench" / "dev.jsonl").write_text(MINI.read_text())
    assert run_cli(["agentbench", "verify", "--dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "os" not in doc  # --env all: only the benches whose data is there
    assert doc["db"]["tasks"] == 6 and doc["db"]["passed"] == 6
    broken = [json.loads(line) for line in MINI.read_text().splitlines()]
    broken[3]["answer_md5"] = "[('0000',)]"
    (tmp_path / "dbbench" / "dev.jsonl").write_text("\n".join(map(json.dumps, broken)) + "\n")
    assert run_cli(["agentbench", "verify", "--dir", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    failed = [c for c in doc["db"]["checks"] if not c["passed"]]
    assert [c["failure"] for c in failed] == ["table hash differs"]
    assert run_cli(["agentbench", "verify", "--dir", str(tmp_path / "none")]) == 1
    assert "no such folder" in capsys.readouterr().err
    assert run_cli(["agentbench", "verify", "--env", "db", "--dir", str(tmp_path / "dbbench")]) == 1
    assert "no DB tasks at" in capsys.readouterr().err


def test_import_cli_stores_the_tasks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from aios_rl.stack.embedded import reader

    (tmp_path / "dbbench").mkdir()
    (tmp_path / "dbbench" / "mini.jsonl").write_text(MINI.read_text())
    store = tmp_path / "store"
    argv = ["agentbench", "import", "--dir", str(tmp_path), "--split", "mini"]
    argv += ["--store", str(store), "--nats-url", "nats://127.0.0.1:1"]
    assert run_cli(argv) == 0
    assert "6 agentbench_db tasks in split mini: 6 new" in capsys.readouterr().out

    async def stored() -> list[str]:
        async with reader(None, store=store) as state:
            return await registry.task_store(state.bus, "agentbench_db").list("mini")

    assert sorted(asyncio.run(stored())) == sorted(t.task_id for t in load_db_tasks(MINI))


@pytest.mark.skipif(
    not (DEV_DIR / "dbbench" / "dev.jsonl").is_file(), reason="AgentBench's dev split is not here"
)
def test_agentbench_dev_split_reference_answers_pass(server: MariaDb) -> None:
    tasks = load_db_tasks(DEV_DIR / "dbbench" / "dev.jsonl", "dev")
    checks = verify_db(tasks, server=server)
    failed = [(c.source, c.failure, c.detail) for c in checks if not c.passed]
    assert not failed, failed
