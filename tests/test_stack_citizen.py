"""``aios-rl up`` as a good citizen: children die with their supervisor, one server per store,
one stack per namespace, and a bad port or URL is one line at once."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from aios_rl.bus import Bus
from aios_rl.cli._common import nats_url, port
from aios_rl.stack.natsd import NatsServer, NatsServerError, check_port, free_port
from contracts import Names
from services.campaign.main import build as build_campaign
from services.campaign.settings import CampaignSettings

from .support import running

AIOS = [sys.executable, "-m", "aios_rl.cli"]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """The pids still alive after waiting up to ``timeout`` for them to go (psutil waits on
    their exit; a zombie left to a dead parent counts as gone)."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [p.pid for p in alive if not gone(p.pid)]


# -- pure argument checks ---------------------------------------------------------------------------


def test_urls_and_ports_are_checked() -> None:
    assert nats_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert nats_url("nats://a:1,tls://b:2") == "nats://a:1,tls://b:2"
    for bad in ("foo", "http://x:1", "nats://", "nats://h:99999", "nats://h:0"):
        with pytest.raises(Exception, match="not a NATS URL"):
            nats_url(bad)
    assert port("4222") == 4222
    for bad in ("-1", "0", "65536", "x"):
        with pytest.raises(Exception, match="port"):
            port(bad)


def test_a_taken_or_impossible_port_is_refused_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(NatsServerError, match="taken"):
            check_port(taken)
    with pytest.raises(NatsServerError, match="not a TCP port"):
        check_port(-1)


# -- the embedded server ------------------------------------------------------------------------------


def test_one_server_per_store(tmp_path: Path) -> None:
    with NatsServer(tmp_path / "nats") as first:
        with pytest.raises(NatsServerError, match="in use by pid"):
            NatsServer(tmp_path / "nats").start()
        with pytest.raises(NatsServerError, match="taken"):
            NatsServer(tmp_path / "other", port=first.port).start()
    with NatsServer(tmp_path / "nats"):  # released when the first stopped
        pass


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, subprocess, sys
        from aios_rl.proc import die_with_parent
        child = subprocess.Popen(
            [sys.executable, "-c", "import signal; signal.pause()"],
            start_new_session=True, preexec_fn=die_with_parent(),
        )
        print(child.pid, flush=True)
        signal.pause()
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not gone(child)
    parent.kill()
    parent.wait()
    assert wait_gone([child], 10) == [], "the child outlived its SIGKILLed parent"


# -- aios-rl up ----------------------------------------------------------------------------------------


def run_up(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AIOS, "up", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_up_refuses_a_bad_port_or_url_in_one_line(tmp_path: Path) -> None:
    for args in (["--nats-port", "-1"], ["--nats-url", "localhost"]):
        done = run_up(*args, "--data-dir", str(tmp_path))
        assert done.returncode == 2, done
        assert len(done.stderr.strip().splitlines()) == 1 and "error:" in done.stderr, done.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        done = run_up("--nats-port", str(taken), "--data-dir", str(tmp_path))
    assert done.returncode == 1 and "taken" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_up_refuses_to_run_a_second_campaign_in_a_namespace(
    bus: Bus, nats_url: str, names: Names
) -> None:
    svc, campaigns = build_campaign(
        bus, CampaignSettings(nats_url=nats_url, namespace=names.namespace)
    )
    async with running(svc):
        proc = await asyncio.create_subprocess_exec(
            *AIOS,
            "up",
            "--nats-url",
            nats_url,
            "--namespace",
            names.namespace,
            "--only",
            "campaign,reward",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    await campaigns.close()
    assert proc.returncode == 1, (out, err)
    assert f"campaign (pid {os.getpid()}) already running" in err.decode()


def test_killing_up_leaves_no_process_behind(tmp_path: Path) -> None:
    up = subprocess.Popen(
        [
            *AIOS,
            "up",
            "--only",
            "reward",
            "--nats-port",
            str(free_port()),
            "--data-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "AIOS_LOG_FORMAT": "json"},
    )
    assert up.stdout is not None
    try:
        for line in up.stdout:  # until the reward service says it is ready
            if "service.ready" in line:
                break
        else:
            pytest.fail("aios-rl up ended before the service was ready")
        children = [p.pid for p in psutil.Process(up.pid).children(recursive=True)]
        assert len(children) >= 2, "expected the nats-server and the reward service"
        up.send_signal(signal.SIGKILL)
        up.wait()
        assert wait_gone(children, 20) == [], "processes outlived a SIGKILLed aios-rl up"
    finally:
        if up.poll() is None:
            up.kill()


def test_an_environment_outside_the_registry_gets_a_runner_in_the_embedded_stack() -> None:
    from aios_rl.stack.embedded import _replicas

    names = [r.service.name for r in _replicas({}, None)]
    assert "agentbench_os-runner" not in names
    replicas = _replicas({}, None, ("agentbench_os", "shell"))
    runners = [r.service for r in replicas if r.service.name == "agentbench_os-runner"]
    assert len(runners) == 1 and runners[0].module == "services.runner"
    assert runners[0].args == ("--env", "agentbench_os")
    assert [r.service.name for r in replicas].count("shell-runner") == 1  # already a service
