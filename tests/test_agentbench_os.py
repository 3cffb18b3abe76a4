"""AgentBench's OS bench, the pure parts: its task format as AgentBench reads it, the Think/Act
protocol, the output cut, the match and check judges (the checks run for real with bash and
python in a scratch folder), the reference policy and the terminal's text. The machine and the
environment: tests/test_agentbench_osenv.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aios_rl.envs.agentbench.machine import clean_terminal
from aios_rl.envs.agentbench.os import (
    EMPTY_OUTPUT,
    example_command,
    judge_check,
    judge_match,
    load_os_tasks,
    parse_os_action,
    problem,
    reference_action,
    script_argv,
    shown_output,
)
from contracts import OsMatch, OsScript

from .support import agentbench_dev_dir

FIXTURE = Path(__file__).parent / "fixtures" / "agentbench" / "os_interaction"
DEV = agentbench_dev_dir()


def test_actions_are_read_as_agentbench_reads_them() -> None:
    bash = parse_os_action("Think: count them.\n\nAct: bash\n\n```bash\nls /etc\n```\n")
    assert (bash.kind, bash.content) == ("bash", "ls /etc")
    two = parse_os_action("Act: bash\n```bash\necho a\n```\nthen\n```bash\necho b\n```")
    assert two.content == "echo a\n\necho b"
    assert parse_os_action("Think: done.\n\nAct: answer(220)").content == "220"
    assert parse_os_action("Act: answer(f(x))").content == "f(x)"  # first ( to last )
    assert parse_os_action("Act: finish") == parse_os_action("Act: Finish now")
    assert parse_os_action("Act: finish").content is None
    # the last action that parses counts: an answer without parentheses is passed over
    assert parse_os_action("Act: bash\n```bash\nls\n```\nAct: answer 3").kind == "bash"
    assert parse_os_action("I think the answer is 3").kind == "invalid"


def test_output_is_cut_and_marked() -> None:
    assert shown_output("") == EMPTY_OUTPUT
    assert shown_output("hi") == "The output of the OS:\n\nhi"
    long = shown_output("x" * 801)
    assert long.endswith("[truncated because the output is too long]")
    assert long.count("x") == 780


def test_match() -> None:
    assert judge_match(" 3\n", OsMatch(answer="3"))
    assert not judge_match(" 3", OsMatch(answer="3", strip=False))
    assert judge_match("pid 4242", OsMatch(regex=r"\b4242$"))
    assert not judge_match(None, OsMatch(answer="3"))


def run_local(tmp: Path):  # type: ignore[no-untyped-def]
    def run(script: OsScript, params: list[str]) -> tuple[int, str]:
        done = subprocess.run(
            script_argv(script, params), cwd=tmp, capture_output=True, text=True, timeout=30
        )
        return done.returncode, done.stdout

    return run


def test_check_scripts_get_the_answer_then_each_earlier_output(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1\n")
    (tmp_path / "b").write_text("2\n")
    example = OsScript(code="ls | wc -l")
    integer = OsScript(
        language="python",
        code="from sys import argv\nexit(0 if int(argv[1]) == int(argv[2]) else 1)",
    )
    run = run_local(tmp_path)
    assert judge_check("2", [None, integer], example, run)  # null: the example's output
    assert not judge_check("3", [None, integer], example, run)
    assert not judge_check("2", [None, integer], None, run)  # null and no example
    seen = OsScript(code='test "$1" = ready')
    assert judge_check("ready", [seen], None, run) and not judge_check(None, [seen], None, run)
    with pytest.raises(ValueError, match="c scripts are not supported"):
        script_argv(OsScript(language="c", code="int main(){}"), [])


def test_the_projects_tasks_load_in_agentbench_format(tmp_path: Path) -> None:
    tasks = load_os_tasks(FIXTURE / "data" / "mini.json", FIXTURE / "scripts" / "mini")
    users, secret, process, created, shared = tasks
    assert users.init[0].code.startswith("useradd -m alice") and users.check[0] is None
    assert users.check[1] is not None and "int(argv[1])" in users.check[1].code
    assert users.example is not None and users.example.code == "ls /home | wc -l"
    assert secret.init[0].language == "bash" and secret.match == OsMatch(answer="open-sesame")
    assert process.start is not None and process.match is not None and process.match.regex
    assert created.check[0] is not None and created.example is not None
    assert [s.language for s in shared.init] == ["python", "bash"]
    assert len({t.task_id for t in tasks}) == 5 and {t.image for t in tasks} == {"default"}
    bad = tmp_path / "bad.json"
    bad.write_text('[{"description": "x", "evaluation": {}}]')
    with pytest.raises(ValueError, match="check or match must exist"):
        load_os_tasks(bad, tmp_path)


@pytest.mark.skipif(
    not (DEV / "os_interaction" / "data" / "dev.json").is_file(),
    reason="AgentBench's dev split is not here",
)
def test_agentbench_dev_split_loads_as_agentbench_reads_it() -> None:
    base = DEV / "os_interaction"
    tasks = load_os_tasks(base / "data" / "dev.json", base / "scripts" / "dev")
    assert len(tasks) == 26 and len({t.task_id for t in tasks}) == 26
    assert sum(t.match is not None for t in tasks) == 5
    assert sum(t.example is not None for t in tasks) == 21
    # the entry whose "create" is a list gets the default image and no init, as in AgentBench
    listed = [t for t in tasks if "ls -l / | grep" in (t.example.code if t.example else "")]
    assert listed and listed[0].init == [] and listed[0].image == "default"


def test_the_reference_policy_replays_example_then_answers_its_output() -> None:
    tasks = load_os_tasks(FIXTURE / "data" / "mini.json", FIXTURE / "scripts" / "mini")
    users, secret, process, _created, _shared = tasks
    start = "instructions\n\n" + problem(users)
    first = reference_action(users, start)
    assert first is not None and parse_os_action(first).kind == "bash"
    command = parse_os_action(first).content
    assert command == example_command(OsScript(code="ls /home | wc -l"))
    output = shown_output("2\n")
    seen = f"{start}\n\n{first}\n\n{output}"
    assert reference_action(users, seen) == "Think: that is the answer.\n\nAct: answer(2)"
    assert (
        parse_os_action(
            reference_action(users, f"{start}\n\n{first}\n\n{EMPTY_OUTPUT}") or ""
        ).content
        == ""
    )
    assert reference_action(secret, problem(secret)) == (
        "Think: I know the answer.\n\nAct: answer(open-sesame)"
    )
    assert reference_action(process, problem(process)) is None  # a regex and no example


def test_example_commands_run_multi_line_scripts_as_one_line(tmp_path: Path) -> None:
    for language, code in (("bash", "x=4\necho $((x * 2))\n"), ("python", "x = 4\nprint(x * 2)\n")):
        line = example_command(OsScript(language=language, code=code))
        assert "\n" not in line
        out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=tmp_path)
        assert out.stdout == "8\n"
    with pytest.raises(ValueError):
        example_command(OsScript(language="c++", code="int main(){}"))


def test_terminal_output_becomes_text() -> None:
    raw = "ls\r\n\x1b[?2004l\rhi\r\n\x1b[?2004h\x1b]0;root@h: /\x07root@h:/# \x1b[K"
    assert clean_terminal(raw) == "ls\nhi\nroot@h:/# "
    assert clean_terminal("a\x1b[01;34mblue\x1b[0m\x1b(B b") == "ablue b"
