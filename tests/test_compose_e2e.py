"""``docker compose up`` for real: the compose stack runs a short campaign end to end.

Opt-in (it needs a Docker engine and builds the image): ``AIOS_COMPOSE_E2E=1``.

    AIOS_COMPOSE_E2E=1 .venv/bin/python -m pytest -q tests/test_compose_e2e.py

It builds the image (``AIOS_COMPOSE_E2E_BUILD=0`` uses the one already built), generates the
stack's NATS users into a temporary folder (``aios-rl auth compose``'s code, passed to compose as
``AIOS_COMPOSE_AUTH``), starts the stack as a compose project of its own with two shell runners
(the one-shot ``provision`` container creates the topology as the admin first), connects from the
host as the admin, checks that a service's container holds its own password only and that a
service's user may not manage streams, waits until every service answers discovery, stores
orchestrator, shell and browser tasks (one site flow, one MiniWoB++ task), runs a one-epoch
campaign over the three environments and checks that every scheduled episode came out compared,
shell ones included (so the sandbox ran inside the shell-runner containers) and browser ones
included and not blocked (so Chromium ran in the browser-runner container against the sites
container), then removes the project with its volume.

``docker compose`` (v2) is used when present, else ``docker-compose`` (v1). The image's base is
``AIOS_BASE_IMAGE`` when set, else ``aios-base:bookworm`` when that image exists (made by
``deploy/build-base-image.sh`` where no registry is reachable), else the Dockerfile's default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aios_rl.bus import Bus, BusError, connect, discover
from aios_rl.cli.auth import write_compose
from aios_rl.envs.browser.generate import generate as generate_browser
from aios_rl.envs.orchestrator import generate as generate_orchestrator
from aios_rl.envs.registry import task_store
from aios_rl.envs.shell.generate import generate as generate_shell
from aios_rl.envs.shell.store import ShellTaskStore
from aios_rl.envs.shell.verify import RunCache, default_cache_dir
from aios_rl.stack import SERVICES
from aios_rl.stack.auth import Credentials, load_credentials
from aios_rl.state.ledger import Ledger
from contracts import (
    CampaignSpec,
    CampaignStatus,
    Episode,
    Names,
    StartCampaign,
    StatusCampaign,
    TrainerSettings,
)

from .support import eventually

pytestmark = pytest.mark.skipif(
    os.environ.get("AIOS_COMPOSE_E2E") != "1",
    reason="needs a Docker engine and builds the image: set AIOS_COMPOSE_E2E=1",
)

REPO = Path(__file__).resolve().parents[1]
LOCAL_BASE = "aios-base:bookworm"
SHELL_RUNNERS = 2
CAMPAIGN = "compose-e2e"


def _ok(*cmd: str) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_command() -> list[str]:
    if _ok("docker", "compose", "version"):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("AIOS_COMPOSE_E2E=1 but neither `docker compose` nor `docker-compose` is installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Project:
    """One compose project: its own name, host port and volume, so it leaves others alone."""

    def __init__(self, auth_dir: Path) -> None:
        if not _ok("docker", "info"):
            pytest.fail("AIOS_COMPOSE_E2E=1 but no Docker engine answers `docker info`")
        self.compose = compose_command()
        self.name = f"aiose2e{os.getpid()}"
        self.port = free_port()
        # Every user's password, the server config and one env file per service (0600).
        write_compose(auth_dir, Names(""))
        self.auth_dir = auth_dir
        admin = load_credentials(auth_dir, "admin")
        assert admin is not None
        self.admin: Credentials = admin
        self.env = {
            **os.environ,
            "COMPOSE_PROJECT_NAME": self.name,
            "NATS_HOST_PORT": str(self.port),
            "AIOS_NAMESPACE": "",
            "AIOS_COMPOSE_AUTH": str(auth_dir),
        }
        if "AIOS_BASE_IMAGE" not in os.environ and _ok("docker", "image", "inspect", LOCAL_BASE):
            self.env["AIOS_BASE_IMAGE"] = LOCAL_BASE
        self.url = f"nats://127.0.0.1:{self.port}"

    def run(self, *args: str, timeout: float = 900, check: bool = True) -> str:
        proc = subprocess.run(
            [*self.compose, "-f", str(REPO / "docker-compose.yml"), *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"`compose {' '.join(args)}` exited {proc.returncode}:\n{proc.stderr[-4000:]}"
            )
        return proc.stdout + proc.stderr

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "30", timeout=60, check=False)[-12000:]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    p = Project(tmp_path_factory.mktemp("compose-auth"))
    if os.environ.get("AIOS_COMPOSE_E2E_BUILD", "1") != "0":
        p.run("build", "nats", timeout=3600)  # every service shares the one image nats builds
    try:
        p.run("up", "-d", "--no-build", "--scale", f"shell-runner={SHELL_RUNNERS}", timeout=600)
        yield p
    finally:
        p.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)


async def _wait_for_services(bus: Bus, timeout: float) -> dict[str, int]:
    """Instances per service, once every default service answers (two shell runners)."""
    wanted = {s.name for s in SERVICES if s.replicas > 0}

    async def probe() -> dict[str, int] | None:
        counts: dict[str, int] = {}
        for view in await discover(bus.nc, namespace="", window=0.5):
            counts[view.name] = counts.get(view.name, 0) + 1
        up = wanted <= set(counts) and counts.get("shell-runner", 0) >= SHELL_RUNNERS
        return counts if up else None

    return await eventually(probe, within=timeout, every=1.0, what=f"services {sorted(wanted)}")


async def _status(bus: Bus) -> CampaignStatus | None:
    with contextlib.suppress(BusError):
        return await bus.request(
            bus.names.campaign_cmd("status"),
            StatusCampaign(campaign_id=CAMPAIGN),
            CampaignStatus,
            timeout=5,
        )
    return None


def _check_isolation(p: Project) -> None:
    """A service's container has its own user and password, nobody else's."""
    env = p.run("exec", "-T", "trainer", "env", timeout=60)
    values = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
    assert values.get("NATS_USER") == "trainer", values.get("NATS_USER")
    own = load_credentials(p.auth_dir, "trainer")
    assert own is not None and values.get("NATS_PASSWORD") == own.password
    others = [
        c.user
        for f in (p.auth_dir / "auth").glob("*.json")
        if (c := load_credentials(p.auth_dir, f.stem)) is not None and c.user != "trainer"
    ]
    for user in others:
        creds = load_credentials(p.auth_dir, user)
        assert creds is not None and creds.password not in env, f"trainer sees {user}'s password"


async def _check_permissions(p: Project) -> None:
    """Without credentials the server refuses; a runner's user may not delete a stream."""
    with pytest.raises(BusError):
        async with connect(
            p.url, name="compose-e2e-anon", connect_deadline=3, user="", password=""
        ):
            pass
    runner = load_credentials(p.auth_dir, "shell-runner")
    assert runner is not None
    async with connect(
        p.url,
        name="compose-e2e-runner",
        connect_deadline=10,
        user=runner.user,
        password=runner.password,
    ) as bus:
        with pytest.raises(Exception):  # noqa: B017 - a permissions violation or a timeout
            await bus.js.delete_stream(bus.names.stream("EPISODES"))
        # ...and the admin's provisioning left the stream there.
        await bus.js.stream_info(bus.names.stream("EPISODES"))


async def _campaign(p: Project) -> None:
    await _check_permissions(p)
    async with connect(
        p.url,
        name="compose-e2e",
        connect_deadline=60,
        user=p.admin.user,
        password=p.admin.password,
    ) as bus:
        counts = await _wait_for_services(bus, 180)
        assert counts["shell-runner"] == SHELL_RUNNERS, counts
        _check_isolation(p)

        await task_store(bus, "orchestrator").put_all(generate_orchestrator(8))
        shell = await asyncio.to_thread(
            generate_shell, 4, 0, "train", cache=RunCache(default_cache_dir())
        )
        await ShellTaskStore(bus).put_all(shell)
        browser = generate_browser(2, 0, "train")  # one site flow, one MiniWoB++ task
        assert {t.kind for t in browser} == {"site", "miniwob"}, browser
        await task_store(bus, "browser").put_all(browser)

        compared: list[Episode] = []

        async def on_compared(msg: object, raw: object) -> None:
            if isinstance(msg, Episode) and msg.campaign_id == CAMPAIGN:
                compared.append(msg)

        await bus.subscribe(bus.names.episode("compared", "*"), on_compared)
        spec = CampaignSpec(
            campaign_id=CAMPAIGN,
            environments={"orchestrator": 1.0, "shell": 1.0, "browser": 1.0},
            tasks_per_epoch=6,  # two tasks of each: both browser tasks run
            group_size=2,
            epochs=1,
            episode_deadline_s=180,
            trainer=TrainerSettings(learning_rate=1e-2, seed=0),
        )
        status = await bus.request(
            bus.names.campaign_cmd("start"), StartCampaign(spec=spec), CampaignStatus, timeout=30
        )
        assert status.state == "running", status

        async def ended() -> CampaignStatus | None:
            status = await _status(bus)
            ends = ("finished", "failed", "stopped")
            return status if status is not None and status.state in ends else None

        status = await eventually(ended, within=600, every=2.0, what="the campaign's end")
        assert status.state == "finished", status

        records = await Ledger(bus).records(CAMPAIGN)
        scheduled = sum(r.scheduled for r in records)
        received = sum(r.received for r in records)
        assert scheduled > 0 and received == scheduled, records

        async def all_seen() -> bool | None:  # the last compared episodes may still be in flight
            return True if len({ep.episode_id for ep in compared}) >= received else None

        await eventually(all_seen, within=30, what="every compared episode at the test")
        # Reference episodes pass comparison with comparison=None; every rollout gets a result.
        rollouts = [ep for ep in compared if ep.role == "rollout"]
        envs = {str(ep.environment) for ep in rollouts}
        assert {"orchestrator", "shell", "browser"} <= envs, f"compared rollouts by env: {envs}"
        web = [ep for ep in rollouts if ep.environment == "browser"]
        blocked = {ep.episode_id: ep.info.get("error", "") for ep in web if ep.outcome == "blocked"}
        assert not blocked, f"browser rollouts that could not run: {blocked}"
        assert {ep.task_id for ep in web} == {t.task_id for t in browser}, web
        unmeasured = [ep.episode_id for ep in rollouts if ep.comparison is None]
        assert not unmeasured, f"rollouts without a comparison result: {unmeasured}"


def test_compose_stack_runs_a_campaign(project: Project) -> None:
    try:
        asyncio.run(_campaign(project))
    except BaseException as e:
        raise AssertionError(f"{e}\n--- compose logs (tail) ---\n{project.logs()}") from e
