"""AgentBench's OS bench as the ``agentbench_os`` environment, on real machines (run as root:
an overlay root over the image ``deploy/setup.sh`` builds, a full uid map, bubblewrap): the
escape tests (no network, no host files, root inside is nobody outside, limits hold, nothing
survives a machine), the persistent shell, episodes of the project's own tasks in AgentBench's
format, the runner service on a real nats-server with a scripted policy that replays ``example``
and with the hf student, ``aios-rl agentbench verify --env os`` and ``import --env os``, and
AgentBench's own dev split when it is present."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aios_rl.bus import Bus
from aios_rl.envs import registry
from aios_rl.envs.agentbench.images import UID_BASE, build_image
from aios_rl.envs.agentbench.machine import Machine, MachineLimits, Shell
from aios_rl.envs.agentbench.os import load_os_tasks, problem, reference_action
from aios_rl.envs.agentbench.os_adapter import OsEnv, OsHost, OsRunnerSettings
from aios_rl.envs.agentbench.verify import verify_os
from contracts import ActRequest, AgentBenchOsTask, Names, RolloutJob
from services.runner.main import build as build_runner
from services.runner.main import provision_runner

from .support import agentbench_dev_dir, play
from .test_realrepo import run_cli
from .test_shell_runner import policy_service, run_jobs

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the OS bench's machines need root (a full uid map)"
)

FIXTURE = Path(__file__).parent / "fixtures" / "agentbench" / "os_interaction"
DEV = agentbench_dev_dir()


@pytest.fixture(scope="module")
def image() -> Path:
    return build_image("default", log=lambda _line: None)  # cached: deploy/setup.sh built it


@pytest.fixture(scope="module")
def machine(image: Path) -> Iterator[Machine]:
    """One machine the read-only checks share."""
    with Machine(image, MachineLimits(memory_bytes=256 << 20, max_processes=64)) as m:
        yield m


@pytest.fixture(scope="module")
def tasks() -> dict[str, AgentBenchOsTask]:
    loaded = load_os_tasks(FIXTURE / "data" / "mini.json", FIXTURE / "scripts" / "mini", "mini")
    return dict(zip(("users", "secret", "process", "created", "shared"), loaded, strict=True))


def run(machine: Machine, script: str, timeout_s: float = 20.0) -> tuple[int, str]:
    return machine.exec(["bash", "-c", script], timeout_s=timeout_s)


def pid_namespace_members(pid: int) -> set[int]:
    """Host pids of every process in ``pid``'s pid namespace."""
    target = os.readlink(f"/proc/{pid}/ns/pid")
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == target:
                    members.add(int(entry))
            except OSError:
                pass
    return members


# -- escape tests ------------------------------------------------------------------------------


def test_no_network_but_its_own_loopback(machine: Machine) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        probe = (
            "import socket, sys\n"
            "print(sorted(n for _, n in socket.if_nameindex()))\n"
            f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 80), ('10.0.2.2', 80)):\n"
            "    s = socket.socket(); s.settimeout(3)\n"
            "    try:\n"
            "        s.connect((host, port)); print('CONNECTED', host)\n"
            "    except OSError as exc:\n"
            "        print('refused', host, type(exc).__name__)\n"
        )
        code, out = machine.exec(["python3", "-c", probe], timeout_s=20)
    finally:
        listener.close()
    assert code == 0 and "CONNECTED" not in out, out
    assert out.splitlines()[0] == "['lo']"  # no interface but the machine's own loopback
    code, out = run(machine, "curl -sS --max-time 5 http://deb.debian.org/ 2>&1")
    assert code != 0 and "Could not resolve host" in out


def test_no_host_files(machine: Machine, image: Path, tmp_path: Path) -> None:
    marker = tmp_path / "host-marker"
    marker.write_text("host secret")
    code, out = run(machine, f"ls {tmp_path} /work /root/.cache 2>&1; cat {marker} 2>&1; ls /")
    assert "host secret" not in out and "No such file or directory" in out
    # the root is the image: its offline apt repository is there, the host's venv is not
    assert run(machine, "test -d /var/lib/aios-offline-apt && test ! -e /work")[0] == 0
    # root inside writes to the machine's own upper layer, never to the image underneath
    assert run(machine, "echo planted > /usr/bin/planted && cat /usr/bin/planted")[1] == "planted\n"
    assert not (image / "usr" / "bin" / "planted").exists()
    # the host's processes and mounts are not visible
    code, out = run(machine, "ls /proc | grep -c '^[0-9]'; grep -c overlay /proc/mounts")
    assert code == 0 and int(out.split()[0]) < 10


def test_root_inside_is_nobody_outside(machine: Machine) -> None:
    code, out = run(machine, "id -u; cat /proc/self/uid_map; useradd -m dave && su - dave -c id")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "0" and lines[1].split() == ["0", str(UID_BASE), "65536"]
    assert "uid=1000(dave)" in lines[2]
    status = Path(f"/proc/{machine.main_pid}/status").read_text()
    uids = re.search(r"^Uid:\s+(\d+)", status, re.M)
    assert uids is not None and int(uids.group(1)) == UID_BASE  # the host sees an unprivileged uid
    # root inside has no power over what belongs to the host: the kernel's settings and log
    code, out = run(machine, "echo 1 > /proc/sys/vm/drop_caches; dmesg | head -1; echo end")
    assert out.count("Permission denied") + out.count("Operation not permitted") == 2, out


def test_limits_hold(image: Path) -> None:
    limits = MachineLimits(memory_bytes=192 << 20, max_processes=48, disk_bytes=32 << 20)
    with Machine(image, limits) as m:
        code, out = m.exec(
            ["python3", "-c", "b = b'x' * (512 << 20); print('allocated', len(b))"], timeout_s=30
        )
        assert code != 0 and "allocated" not in out  # killed or MemoryError: never allocated
        forks = (
            "import os, signal\n"
            "n = 0\n"
            "try:\n"
            "    for _ in range(200):\n"
            "        if os.fork() == 0:\n"
            "            signal.pause()\n"
            "        n += 1\n"
            "except OSError:\n"
            "    pass\n"
            "print(n, flush=True)\n"
            "os.killpg(0, signal.SIGKILL)\n"
        )
        code, out = m.exec(["python3", "-c", forks], timeout_s=30)
        assert int(out.split()[0]) < 48, out
        code, out = run(m, "head -c 64M /dev/zero > /tmp/big; echo $?; ls -s /tmp/big 2>&1")
        assert "No space left on device" in out
        started = time.monotonic()
        code, _ = m.exec(["sleep", "300"], timeout_s=1.0)
        assert code == 124 and time.monotonic() - started < 15
        alive = run(m, "ps -eo stat=,comm= | grep -v '^Z' | grep -c ' sleep$'")[1]
        assert alive.strip() == "1"  # the timed-out one is gone: only the main process sleeps


def test_nothing_survives_the_machine(image: Path) -> None:
    m = Machine(image).start()
    shell = m.shell()
    shell.run("setsid nohup sleep 999 > /dev/null 2>&1 &")
    shell.run("(bash -c 'trap \"\" TERM HUP; exec sleep 998' &) ; disown -a")
    run(m, "nohup sleep 997 > /dev/null 2>&1 &")
    members = pid_namespace_members(m.main_pid)
    target = os.readlink(f"/proc/{m.main_pid}/ns/pid")
    assert len(members) >= 6  # init, main, shell, the three sleeps
    cgroups = list(m.cgroup.dirs) if m.cgroup else []
    run_dir = m._run
    assert run_dir is not None and run_dir.is_dir()
    m.close()

    def gone(pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") != target
        except OSError:
            return True

    assert all(gone(pid) for pid in members)
    assert not any(d.exists() for d in cgroups)
    assert str(run_dir) not in Path("/proc/self/mountinfo").read_text()
    assert not run_dir.exists()


# -- the shell -----------------------------------------------------------------------------------


def test_the_shell_keeps_its_state_and_reads_like_agentbench(machine: Machine) -> None:
    shell = machine.shell()
    assert shell.run("cd /tmp && export GREETING=hi") == ""
    assert shell.run("pwd; echo $GREETING") == "/tmp\nhi\n"
    looped = shell.run("for i in 1 2; do\n  echo n$i\ndone")
    assert looped.endswith("n1\nn2\n") and "> done" in looped  # later lines echo, as a terminal
    assert shell.run("python3 -c 'print(6 * 7)'") == "42\n"
    assert shell.run("useradd -m -s /bin/bash erin; su - erin") == ""  # a login shell, prompted
    assert shell.run("whoami; pwd") == "erin\n/home/erin\n"
    shell.run("exit")
    idle, shell.idle_timeout_s = shell.idle_timeout_s, 0.5
    started = time.monotonic()
    assert shell.run("cat") == ""  # waits for input: left after the shell is quiet
    assert time.monotonic() - started < 5
    # Back to the default for what follows: half a second of silence is also what a loaded
    # machine's shell can take to echo a line (the next command then read as nothing).
    shell.idle_timeout_s = idle
    shell.run("\x04")  # end of input for cat
    assert shell.run("echo back") == "back\n"
    os.write(shell.master, b"\n\n\n")  # prompts the shell prints around the next command
    assert shell.run("echo still") == "still\n"  # only a prompt after its echo ends it
    flood = shell.run("yes", hard_s=3.0)
    assert flood.startswith("y\ny\n")
    assert shell.run("echo after the flood").endswith("after the flood\n")


def test_ctrl_c_stops_a_command_even_when_this_process_ignores_sigint(machine: Machine) -> None:
    """Started in the background of a non-interactive shell (as a CI script may start the
    suite), this process ignores SIGINT and its children would inherit that: the machine's
    shell must get the default back, or Ctrl-C stops nothing and the next command reads the
    flood of the last one."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        shell = machine.shell()
    finally:
        signal.signal(signal.SIGINT, before)
    flood = shell.run("yes", hard_s=2.0)
    assert flood.startswith("y\ny\n")
    assert shell.run("echo after the flood").endswith("after the flood\n")


TITLELESS_BASHRC = "PROMPT_COMMAND=\nPS1='\\u@\\h:\\w\\$ '\n"
"""A ``.bashrc`` whose prompt has no xterm title (``user@host:dir# `` after readline's
bracketed-paste switch), as after an init script that rewrites it."""


def test_a_prompt_without_the_title_is_a_prompt(
    image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell's prompt is recognised without the xterm title too (a ``.bashrc`` rewritten
    by an init script, a ``PS1`` the agent sets): no command waits for the shell to go quiet.
    A prompt that is not ``user@host...`` is still accepted at login; commands then end when
    the shell is quiet and show that prompt, as AgentBench's reader does."""
    monkeypatch.setattr(Shell, "idle_timeout_s", 60.0)  # a missed prompt would cost a minute
    with Machine(image, MachineLimits(memory_bytes=256 << 20, max_processes=64)) as m:
        assert m.exec(["bash", "-c", "echo 'export FROM_INIT=1' > /root/.bashrc"])[0] == 0
        started = time.monotonic()
        shell = m.shell()  # /etc/bash.bashrc's prompt: root@host:/#
        assert b"\x1b]0;" not in shell.greeting and shell.greeting.endswith(b":/# ")
        assert shell.run("echo $FROM_INIT; cd /tmp") == "1\n"
        m.exec(["bash", "-c", f"printf %s {shlex.quote(TITLELESS_BASHRC)} > /root/.bashrc"])
        assert shell.run("source /root/.bashrc") == ""  # the prompt an init script left
        assert shell.run("pwd") == "/tmp\n"
        assert shell.run("for i in 1 2; do\n  echo n$i\ndone").endswith("n1\nn2\n")
        assert shell.run("useradd -m -s /bin/bash fay; su - fay") == ""
        assert shell.run("PS1='\\u@\\h:\\w\\$ '; whoami") == "fay\n"
        assert shell.run("exit") == "logout\n"
        assert time.monotonic() - started < 30
    monkeypatch.setattr(Shell, "idle_timeout_s", 1.0)
    with Machine(image, MachineLimits(memory_bytes=256 << 20, max_processes=64)) as m:
        m.exec(["bash", "-c", "echo \"PS1='\\w\\$ '\" >> /root/.bashrc"])
        shell = m.shell()  # "/$ ": no user@host, accepted once the shell is quiet
        assert shell.greeting.endswith(b"/$ ")
        assert shell.run("echo quiet") == "quiet\n/$ "


# -- the environment ---------------------------------------------------------------------------


async def episode(host: OsHost, task: AgentBenchOsTask, turns: list[str]) -> OsEnv:
    return await play(host, task, turns)


async def test_references_succeed_and_wrong_answers_fail(
    image: Path, tasks: dict[str, AgentBenchOsTask]
) -> None:
    host = OsHost(OsRunnerSettings(nats_url=""))
    for name, task in tasks.items():
        env = await host.open(task, seed=0, max_steps=8)
        try:
            while not env.done:
                action = reference_action(task, env.observation)
                if action is None:  # the regex task has no reference: answer it by looking
                    action = "Act: bash\n\n```bash\nps -eo args | grep '^sleeper'\n```"
                    if len(env.turns) > 2:
                        found = env.turns[-1].rsplit("sleeper ", 1)[-1].split()[0]
                        action = f"Act: answer({found})"
                await env.step(action)
            assert env.result().outcome == "success", (name, env.turns[2:], env.result().info)
        finally:
            await env.close()
    wrong = await episode(host, tasks["users"], ["Act: answer(7)"])
    assert wrong.result().outcome == "failure" and wrong.result().info["answer"] == "7"
    undone = await episode(host, tasks["shared"], ["Act: finish"])
    assert undone.result().outcome == "failure" and undone.result().info["ending"] == "finish"


async def test_the_agent_sees_outputs_and_runs_out_of_rounds(
    image: Path, tasks: dict[str, AgentBenchOsTask]
) -> None:
    host = OsHost(OsRunnerSettings(nats_url=""))
    env = await episode(
        host, tasks["secret"], ["Act: bash\n\n```bash\ncat /root/notes/secret.txt\n```"]
    )
    assert problem(tasks["secret"]) in env.observation
    assert env.observation.endswith("The output of the OS:\n\nopen-sesame\n")
    looping = await episode(host, tasks["secret"], ["Act: bash\n\n```bash\nseq 1000\n```"] * 9)
    assert looping.rounds == 8 and looping.result().info["ending"] == "round limit"
    assert "[truncated because the output is too long]" in looping.observation
    invalid = await episode(host, tasks["secret"], ["The answer is open-sesame."])
    assert (
        invalid.result().outcome == "failure"
        and invalid.result().info["ending"] == "invalid action"
    )


# -- the runner and the command line ---------------------------------------------------------------


async def test_os_episodes_through_the_runner_replaying_example(
    bus: Bus, names: Names, tasks: dict[str, AgentBenchOsTask], image: Path
) -> None:
    spec = registry.get("agentbench_os")
    await provision_runner(bus, spec)
    chosen = {k: t for k, t in tasks.items() if reference_action(t, problem(t)) is not None}
    await registry.task_store(bus, "agentbench_os").put_all(list(chosen.values()))
    by_episode = {f"os-{i}": t for i, t in enumerate(chosen.values())}

    def answer(req: ActRequest) -> str:
        action = reference_action(by_episode[req.episode_id], req.observation)
        assert action is not None
        return action

    runner, _ = build_runner(bus, spec, OsRunnerSettings(nats_url="", namespace=names.namespace))
    jobs = [
        RolloutJob(
            job_id=f"job-{ep}",
            episode_id=ep,
            environment="agentbench_os",
            task_id=t.task_id,
            seed=i,
        )
        for i, (ep, t) in enumerate(by_episode.items())
    ]
    got = await run_jobs(
        bus, names, jobs, [policy_service(bus, answer), runner], 120, env="agentbench_os"
    )
    assert {ep.outcome for ep in got.values()} == {"success"}, {
        e.task_id: e.info for e in got.values()
    }
    assert len(got) == 4 and all(len(e.trajectory) >= 1 for e in got.values())


async def test_hf_student_os_episodes_through_the_runner(
    bus: Bus, names: Names, tasks: dict[str, AgentBenchOsTask], image: Path
) -> None:
    """The hf student (a tiny random model) writes every turn: the episodes run and are
    judged (a random model's text is an invalid action, or runs out of rounds)."""
    from .test_student_hf import text_policy

    spec = registry.get("agentbench_os")
    await provision_runner(bus, spec)
    chosen = [tasks["users"], tasks["secret"]]
    await registry.task_store(bus, "agentbench_os").put_all(chosen)
    seen: list[ActRequest] = []
    write = text_policy(seen)

    runner, _ = build_runner(
        bus, spec, OsRunnerSettings(nats_url="", namespace=names.namespace, observation_chars=2500)
    )
    jobs = [
        RolloutJob(
            job_id=f"hf-{i}", episode_id=f"hf-os-{i}", environment="agentbench_os",
            task_id=t.task_id, seed=i,
        )
        for i, t in enumerate(chosen)
    ]  # fmt: skip
    got = await run_jobs(
        bus, names, jobs, [policy_service(bus, write), runner], 120, env="agentbench_os"
    )
    assert set(got) == {j.episode_id for j in jobs}
    for ep in got.values():
        assert ep.outcome in ("success", "failure") and ep.trajectory
        assert all(step.candidates == [] for step in ep.trajectory)
    assert seen and "Act: bash" in seen[0].observation


def test_verify_and_import_clis_on_the_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: Path
) -> None:
    import asyncio

    from aios_rl.stack.embedded import reader

    shutil.copytree(FIXTURE, tmp_path / "os_interaction")
    argv = ["agentbench", "verify", "--env", "os", "--split", "mini", "--dir", str(tmp_path)]
    assert run_cli([*argv, "--json"]) == 1  # the regex task has no reference solution
    doc = json.loads(capsys.readouterr().out)["os"]
    assert doc["tasks"] == 5 and doc["passed"] == 4
    assert [c["failure"] for c in doc["checks"] if not c["passed"]] == ["no reference solution"]
    assert run_cli(["agentbench", "verify", "--env", "os", "--dir", str(tmp_path)]) == 1
    assert "no OS tasks at" in capsys.readouterr().err
    checkout = tmp_path / "AgentBench"  # a checkout: its data/ folder is read
    shutil.copytree(FIXTURE, checkout / "data" / "os_interaction")
    argv = ["agentbench", "verify", "--split", "mini", "--agentbench-dir", str(checkout), "--json"]
    assert run_cli(argv) == 1
    assert json.loads(capsys.readouterr().out)["os"]["passed"] == 4

    store = tmp_path / "store"
    argv = ["agentbench", "import", "--env", "os", "--dir", str(tmp_path), "--split", "mini"]
    assert run_cli([*argv, "--store", str(store), "--nats-url", "nats://127.0.0.1:1"]) == 0
    assert "5 agentbench_os tasks in split mini: 5 new" in capsys.readouterr().out

    async def stored() -> list[str]:
        async with reader(None, store=store) as state:
            return await registry.task_store(state.bus, "agentbench_os").list("mini")

    assert len(asyncio.run(stored())) == 5


def test_verify_passes_tasks_whose_init_scripts_rewrite_the_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: Path
) -> None:
    """Tasks in AgentBench's format whose init scripts rewrite ``.bashrc`` (its prompt then has
    no xterm title): ``verify`` passes them (it once failed with ``the shell did not prompt``).
    The agent's shell logs in before the init scripts run, as AgentBench's does with the
    container, so what they write reaches it only when the shell reads it again."""
    titleless = "unset PROMPT_COMMAND\nPS1='\\u@\\h:\\w\\$ '\n"
    tasks = [
        {
            "description": "Is FROM_INIT set in your shell? Answer its value, or unset.",
            "create": {"local": "default", "init": "echo 'export FROM_INIT=1' > /root/.bashrc"},
            "evaluation": {
                "check": {"code": 'test "$1" = unset'},
                "example": 'echo "${FROM_INIT:-unset}"',
            },
            "labels": ["prompt"],
        },
        {
            "description": "What number does /root/answer.txt hold?",
            "create": {
                "local": "default",
                "init": [
                    f"printf %s {shlex.quote(titleless)} >> /root/.bashrc",
                    "echo 42 > /root/answer.txt",
                ],
            },
            "start": "source /root/.bashrc",
            "evaluation": {
                "check": {"code": 'test "$1" = 42'},
                "example": "cat /root/answer.txt",
            },
            "labels": ["prompt"],
        },
        {
            "description": "Which user are you?",
            "create": {
                "local": "default",
                "init": {
                    "language": "python",
                    "code": f"open('/root/.bashrc', 'w').write({titleless!r})",
                },
            },
            "start": "exec bash --login",
            "evaluation": {"check": {"code": 'test "$1" = root'}, "example": "whoami"},
            "labels": ["prompt"],
        },
    ]
    data = tmp_path / "os_interaction" / "data"
    data.mkdir(parents=True)
    (data / "held.json").write_text(json.dumps(tasks))
    argv = ["agentbench", "verify", "--env", "os", "--split", "held", "--dir", str(tmp_path)]
    assert run_cli([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["os"]
    assert doc["tasks"] == 3 and doc["passed"] == 3, doc["checks"]


@pytest.fixture(scope="module")
def text_student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random GPT-2 with room for a conversation, saved as a model directory."""
    from .test_student_hf import conversation_lm, make_tokenizer

    tok = make_tokenizer()
    model = tmp_path_factory.mktemp("model")
    conversation_lm(tok).save_pretrained(model)
    tok.save_pretrained(model)
    return model


def test_agentbench_eval_and_train_clis_on_an_embedded_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], image: Path, text_student: Path
) -> None:
    """``aios-rl agentbench eval`` and ``train`` start a stack with the environment's runner and
    an hf student from a model directory, on imported tasks; a tiny student is refused."""
    shutil.copytree(FIXTURE, tmp_path / "data" / "os_interaction")
    store = ["--store", str(tmp_path / "store"), "--nats-url", "nats://127.0.0.1:1"]
    argv = ["agentbench", "import", "--env", "os", "--dir", str(tmp_path / "data")]
    assert run_cli([*argv, "--split", "mini", *store]) == 0
    capsys.readouterr()
    hf = ["--student", "hf", "--model-path", str(text_student)]
    argv = ["agentbench", "eval", "--env", "os", "--split", "mini", "--limit", "2", *store]
    assert run_cli([*argv, *hf, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["environment"] == "agentbench_os" and doc["episodes"] == 2
    assert set(doc["endings"]) <= {"invalid action", "round limit", "answer", "finish"}
    argv = ["agentbench", "train", "--env", "os", "--split", "mini", "--epochs", "1"]
    argv += ["--tasks-per-epoch", "2", "--group-size", "2", "--heldout", "2", *store, "--json"]
    assert run_cli(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["end"] == "finished"
    assert doc["spec"]["environments"] == {"agentbench_os": 1.0} and doc["spec"]["split"] == "mini"
    assert doc["before"]["episodes"] == 2 and doc["after"]["episodes"] == 2
    assert doc["records"] and doc["records"][0]["epoch"] == 0
    assert run_cli(["agentbench", "eval", "--student", "tiny", *store]) == 2
    assert "invalid choice: 'tiny'" in capsys.readouterr().err
    assert run_cli(["agentbench", "train", "--student", "tiny", *store]) == 1
    assert "cannot write text" in capsys.readouterr().err


@pytest.mark.skipif(
    not (DEV / "os_interaction" / "data" / "dev.json").is_file(),
    reason="AgentBench's dev split is not here",
)
def test_agentbench_os_dev_split_references_pass(image: Path) -> None:
    base = DEV / "os_interaction"
    tasks = load_os_tasks(base / "data" / "dev.json", base / "scripts" / "dev")
    checks = verify_os(tasks)
    with_example = [c for c, t in zip(checks, tasks, strict=True) if t.example is not None]
    passed = sum(c.passed for c in with_example)
    assert passed >= 0.95 * len(with_example), [(c.source, c.detail) for c in checks]
    # the one known failure fails under Docker too: `du -sh` prints "4.0K", which the task's
    # own check script cannot parse (int("4.0"))
    assert {c.source for c in checks if not c.passed} <= {"dev.json#8"}


def test_host_only_variables_never_enter_a_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from aios_rl.envs.agentbench.machine import host_env

    monkeypatch.setenv("LD_PRELOAD", "/host/only/libgomp.so.1")
    monkeypatch.setenv("AIOS_SOMETHING", "kept")
    env = host_env()
    assert "LD_PRELOAD" not in env and env["AIOS_SOMETHING"] == "kept"
