"""Authorization (issue 12, item 3): a user per service with the permissions ``contracts.access``
derives. The derivation and the config are checked without a server; then a real nats-server
started with the generated config refuses what a runner must not do (move ``active``, write
weights, start a campaign, delete a stream) while the trainer, the admin and the runner itself
still do their jobs."""

from __future__ import annotations

import asyncio
import contextlib
import stat
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats.errors
import pytest

from aios_rl.bus import Bus, RequestTimeout, connect, provision
from aios_rl.envs import registry
from aios_rl.envs.orchestrator import sim
from aios_rl.envs.orchestrator.tasks import generate
from aios_rl.envs.runner import RunnerSettings
from aios_rl.stack import SERVICES
from aios_rl.stack.auth import (
    AUTH_DIR,
    Credentials,
    StackAuth,
    credentials_env,
    ensure_credentials,
    prepare,
    render_config,
)
from aios_rl.stack.natsd import NatsServer
from aios_rl.state.checkpoints import CheckpointRegistry
from contracts import (
    ENVIRONMENTS,
    ActRequest,
    ActResponse,
    CampaignSpec,
    CampaignStatus,
    Episode,
    Names,
    RolloutJob,
    StartCampaign,
    StopCampaign,
    topology,
)
from contracts.access import ADMIN, Access, access, answerers, permissions, runner_access
from contracts.subjects import (
    BUCKET_CHECKPOINTS,
    OBJECTS_WEIGHTS,
    STREAM_EPISODES,
)
from services.campaign.main import build as build_campaign
from services.campaign.settings import CampaignSettings
from services.runner.main import build as build_runner

from .support import admin_of, running

NAMES = Names("auth")

# -- the declaration and the config, without a server ------------------------------------------


def _writes(names: Names, user: str) -> tuple[str, ...]:
    return permissions(names, access(names)[user]).publish_allow


def test_runners_may_not_move_pointers_write_weights_or_start_campaigns() -> None:
    checkpoints = f"$KV.{NAMES.bucket(BUCKET_CHECKPOINTS)}."
    weights = f"$O.{NAMES.bucket(OBJECTS_WEIGHTS)}."
    for env in ("shell", "orchestrator"):
        allowed = _writes(NAMES, f"{env}-runner")
        assert not any(p.startswith(("$KV.", checkpoints, weights)) for p in allowed), allowed
        assert not any(p.startswith("$O.") and "weights" in p for p in allowed)
        assert NAMES.campaign_cmd("start") not in allowed and not any(
            "campaign" in p for p in allowed
        )
        assert NAMES.policy_act() in allowed and NAMES.episode("completed", env) in allowed
    movers = {u for u in access(NAMES) if any(p.startswith(checkpoints) for p in _writes(NAMES, u))}
    assert movers == {"trainer", "campaign"}
    weight_writers = {
        u for u in access(NAMES) if any(p.startswith(weights) for p in _writes(NAMES, u))
    }
    assert weight_writers == {"trainer"}
    # Only the campaign serves campaign commands; no service may send one (the admin does).
    senders = {
        u
        for u in access(NAMES)
        if any(p.startswith(NAMES.subject("campaign", "cmd")) for p in _writes(NAMES, u))
    }
    assert senders == set()


def test_no_service_may_manage_streams_or_another_services_consumer() -> None:
    topo = topology(NAMES)
    for user, grant in access(NAMES).items():
        perms = permissions(NAMES, grant)
        for verb in ("CREATE", "UPDATE", "DELETE"):
            assert f"$JS.API.STREAM.{verb}.>" in perms.publish_deny, user
        assert "$JS.API.CONSUMER.DELETE.>" in perms.publish_deny
        assert not any(p.startswith(("$JS.API.STREAM.CREATE", ">")) for p in perms.publish_allow)
        others = {c.durable for c in topo.consumers} - set(grant.consumes)
        for durable in others:
            assert not any(
                p.endswith(f".{durable}") or f".{durable}." in p
                for p in perms.publish_allow
                if p.startswith(("$JS.API.CONSUMER.MSG.NEXT", "$JS.ACK", "$JS.API.CONSUMER.CREATE"))
            ), (user, durable)


def test_an_endpoint_may_answer_the_inboxes_of_its_declared_requesters_and_the_admin() -> None:
    """``allow_responses`` lives on one server connection; a responder that reconnected between a
    request and its answer (a cluster node lost) needs an explicit grant on the asker's inbox."""
    grants = access(NAMES)
    replies = answerers(grants)
    assert replies["trainer"] == (ADMIN, "campaign")
    assert replies["replay"] == (ADMIN, "trainer")
    assert replies["teacher-oracle"] == (ADMIN, "teacher-gateway")
    assert replies["shell-runner"] == (ADMIN, "agent-gateway")
    assert "reward" not in replies  # serves nothing, answers no one
    for user, grant in grants.items():
        perms = permissions(NAMES, grant, answers=replies.get(user, ()))
        inboxes = {p for p in perms.publish_allow if p.startswith("_INBOX.")}
        assert inboxes == {f"_INBOX.{u}.>" for u in replies.get(user, ())}, user
    # Wildcards on either side count: a requester of one runner's step matches ``env.step.*.*``.
    asker = Access(user="kitchen-agent", requests=(NAMES.env_step("shell", "e1"),))
    assert "kitchen-agent" in answerers({**grants, "kitchen-agent": asker})["shell-runner"]
    assert "kitchen-agent" not in answerers({**grants, "kitchen-agent": asker})["browser-runner"]


def test_every_declared_consumer_and_deployed_service_has_its_user() -> None:
    grants = access(NAMES)
    consumed = [d for g in grants.values() for d in g.consumes]
    assert sorted(consumed) == sorted(c.durable for c in topology(NAMES).consumers)
    assert {s.name for s in SERVICES} <= set(grants)
    assert ADMIN not in grants


def test_a_runner_added_later_gets_its_permissions_from_the_same_declaration() -> None:
    grant = runner_access(NAMES, "kitchen")
    topo = topology(NAMES)
    from contracts.subjects import runner_consumer

    topo.consumers.append(runner_consumer(NAMES, "kitchen"))
    perms = permissions(NAMES, grant, topo)
    assert (
        f"$JS.API.CONSUMER.MSG.NEXT.{NAMES.stream('ROLLOUTS')}.kitchen-runner"
        in perms.publish_allow
    )
    assert NAMES.episode("completed", "kitchen") in perms.publish_allow
    with pytest.raises(KeyError, match="kitchen-runner"):
        permissions(NAMES, grant)  # a consumer the topology does not declare
    # A stack that runs it declares it: the same permissions.
    assert permissions(NAMES, grant, topology(NAMES, (*ENVIRONMENTS, "kitchen"))) == perms


def test_rendered_config_quotes_everything_and_leaves_the_admin_unrestricted() -> None:
    perms = permissions(NAMES, Access(user="x", publishes=("a.b",)))
    text = render_config({ADMIN: ('p"w', None), "x": ("secret", perms)})
    assert '{user: "admin", password: "p\\"w"}' in text
    assert '"x", password: "secret", permissions: {publish: {allow: [' in text
    assert '"_INBOX.x.>"' in text and 'allow_responses: {max: 1, expires: "3600s"}' in text
    assert text.count("permissions:") == 1 and "tls {" not in text
    from aios_rl.stack.tls import TlsFiles

    tls = TlsFiles(Path("/d/ca.pem"), Path("/d/server.pem"), Path("/d/server.key"))
    with_tls = render_config({ADMIN: ("pw", None)}, tls=tls)
    assert 'tls {\n  cert_file: "/d/server.pem"\n  key_file: "/d/server.key"\n}' in with_tls


def test_credentials_are_generated_once_and_readable_by_their_owner_only(tmp_path: Path) -> None:
    first = ensure_credentials(tmp_path, ["reward"])
    again = ensure_credentials(tmp_path, ["reward", "sampler"])
    assert first["reward"] == again["reward"] and first[ADMIN] == again[ADMIN]
    assert first["reward"].password != again["sampler"].password
    folder = tmp_path / "auth"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for f in folder.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert first["reward"].password not in repr(first["reward"])
    assert credentials_env(None) == {"NATS_USER": "", "NATS_PASSWORD": ""}


# -- against a nats-server started with the generated config ----------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, StackAuth]]:
    data = tmp_path_factory.mktemp("secured")
    auth = prepare(data, NAMES, [s.name for s in SERVICES])
    with NatsServer(data / "nats", config=auth.config) as server:
        yield server, auth


def _creds(auth: StackAuth, user: str) -> Credentials:
    env = auth.admin._asdict() if user == ADMIN else None
    if env is not None:
        return auth.admin
    e = auth.service_env[user]
    return Credentials(e["NATS_USER"], e["NATS_PASSWORD"])


@contextlib.asynccontextmanager
async def _as(secured: tuple[NatsServer, StackAuth], user: str, names: Names) -> AsyncIterator[Bus]:
    server, auth = secured
    c = _creds(auth, user)
    async with connect(
        server.url, name=f"test-{user}", names=names, user=c.user, password=c.password
    ) as bus:
        yield bus


@pytest.fixture
async def ns(secured: tuple[NatsServer, StackAuth]) -> AsyncIterator[Names]:
    """The module's namespace (its permissions are derived for it), provisioned by the admin."""
    async with _as(secured, ADMIN, NAMES) as admin:
        await provision(admin)
    yield NAMES


def _violations(server: NatsServer, user: str) -> str:
    return "\n".join(
        line
        for line in server.log_file.read_text(errors="replace").splitlines()
        if "Violation" in line and f"user:{user}" in line
    )


async def test_unknown_users_and_wrong_passwords_are_refused(secured) -> None:
    server, _ = secured
    from aios_rl.bus import ConnectError

    with pytest.raises(ConnectError, match=r"refused user shell-runner.s credentials"):
        async with connect(
            server.url, name="x", user="shell-runner", password="guess", connect_deadline=2
        ):
            pass
    with pytest.raises(ConnectError, match="refused a connection without credentials"):
        async with connect(server.url, name="x", user="", password="", connect_deadline=2):
            pass


async def test_a_runner_cannot_move_active_write_weights_start_a_campaign_or_delete_a_stream(
    secured, ns: Names
) -> None:
    server, _ = secured
    async with _as(secured, "trainer", ns) as trainer_bus:
        registry_ = CheckpointRegistry(trainer_bus)
        first = await registry_.store(b"w0", parent_id=None, created_by="init", algorithm="init")
        second = await registry_.store(
            b"w1", parent_id=first.checkpoint_id, created_by="u1", algorithm="grpo"
        )
        await registry_.init(first.checkpoint_id)  # the trainer moves the pointer
        assert (await registry_.pointers())[0].active == first.checkpoint_id

    async with (
        _as(secured, ADMIN, ns) as admin,
        _as(secured, "campaign", ns) as campaign_bus,
        _as(secured, "shell-runner", ns) as runner,
    ):
        svc, campaigns = build_campaign(
            campaign_bus, CampaignSettings(nats_url=server.url, namespace=ns.namespace)
        )
        js = runner.nc.jetstream(timeout=1.5)
        async with running(svc):
            # 1. move ``active``: a raw KV put of the pointers key
            kv = await js.key_value(ns.bucket(BUCKET_CHECKPOINTS))
            with pytest.raises(nats.errors.TimeoutError):
                await kv.put(Names.key_pointers(), b'{"active": "evil"}')
            # 2. overwrite weights
            weights = await js.object_store(ns.bucket(OBJECTS_WEIGHTS))
            with pytest.raises(nats.errors.TimeoutError):
                await weights.put(Names.object_weights(second.checkpoint_id), b"evil")
            # 3. start a campaign
            start = StartCampaign(spec=CampaignSpec(campaign_id="evil", epochs=1))
            with pytest.raises(RequestTimeout):
                await runner.request(ns.campaign_cmd("start"), start, CampaignStatus, timeout=1.5)
            # 4. delete a stream
            with pytest.raises(nats.errors.TimeoutError):
                await js.delete_stream(ns.stream(STREAM_EPISODES))

            # Nothing moved: the pointer, the weights, the stream, the campaigns.
            pointers, _ = await CheckpointRegistry(admin).pointers()
            assert pointers.active == first.checkpoint_id
            assert await CheckpointRegistry(admin).load(second.checkpoint_id) == b"w1"
            await admin.js.stream_info(ns.stream(STREAM_EPISODES))
            assert "evil" not in campaigns.drivers

            # The admin (the command line) starts a campaign through the campaign service.
            ok = StartCampaign(spec=CampaignSpec(campaign_id=f"c{uuid.uuid4().hex[:6]}", epochs=1))
            status = await admin.request(ns.campaign_cmd("start"), ok, CampaignStatus, timeout=10)
            assert status.campaign_id == ok.spec.campaign_id
            await admin.request(
                ns.campaign_cmd("stop"),
                StopCampaign(campaign_id=ok.spec.campaign_id),
                CampaignStatus,
                timeout=10,
            )
        await campaigns.close()

    log = _violations(server, "shell-runner")
    for subject in (
        f"$KV.{ns.bucket(BUCKET_CHECKPOINTS)}.pointers",
        f"$O.{ns.bucket(OBJECTS_WEIGHTS)}.",
        ns.campaign_cmd("start"),
        f"$JS.API.STREAM.DELETE.{ns.stream(STREAM_EPISODES)}",
    ):
        assert subject in log, (subject, log)
    assert not _violations(server, "campaign"), _violations(server, "campaign")
    assert not _violations(server, "trainer")


async def test_an_answer_reaches_its_asker_without_a_request_on_this_connection_a_stranger_not(
    secured, ns: Names
) -> None:
    """The trainer publishes on the campaign's inbox with no request received on its connection
    (as after a reconnect between request and answer) and the campaign gets it; a runner, which
    answers no campaign request, is refused."""
    server, _ = secured
    subject = f"_INBOX.campaign.{uuid.uuid4().hex}"
    async with (
        _as(secured, "campaign", ns) as campaign_bus,
        _as(secured, "trainer", ns) as trainer_bus,
        _as(secured, "shell-runner", ns) as runner,
    ):
        sub = await campaign_bus.nc.subscribe(subject)
        await campaign_bus.nc.flush()
        await runner.nc.publish(subject, b"forged")
        await runner.nc.flush()  # the server has refused it before the trainer's goes out
        await trainer_bus.nc.publish(subject, b"answer")
        await trainer_bus.nc.flush()
        msg = await sub.next_msg(timeout=10)
        assert msg.data == b"answer"
        await sub.unsubscribe()
    assert subject in _violations(server, "shell-runner")
    assert subject not in _violations(server, "trainer")


async def test_a_runner_under_its_credentials_still_runs_its_jobs(secured, ns: Names) -> None:
    server, _ = secured
    spec = registry.get("orchestrator")
    tasks = generate(2)
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg, raw) -> None:
        if isinstance(msg, Episode):
            got[msg.episode_id] = msg
            if len(got) == len(tasks):
                done.set()

    async with (
        _as(secured, ADMIN, ns) as admin,
        _as(secured, "sampler", ns) as sampler_bus,
        _as(secured, "orchestrator-runner", ns) as runner_bus,
    ):
        await registry.task_store(admin, "orchestrator").put_all(tasks)
        from aios_rl.bus import Service

        # A scripted policy under the sampler's user (it may serve policy.act).
        policy = Service(sampler_bus, name="sampler", version="0.0.1")

        async def act(req: ActRequest) -> ActResponse:
            return ActResponse(action=req.candidates[0], action_index=0, checkpoint_id="scripted")

        policy.endpoint("act", ns.policy_act(), ActRequest, act)
        runner_svc, _ = build_runner(
            runner_bus,
            spec,
            RunnerSettings(env="orchestrator", nats_url=server.url, namespace=ns.namespace),
        )
        runner_svc.fetch_timeout_s = 0.2
        await admin.subscribe(ns.episode("completed", "orchestrator"), on_completed)
        async with running(policy), running(runner_svc):
            for i, t in enumerate(tasks):
                job = RolloutJob(
                    job_id=f"auth-j{i}",
                    episode_id=f"auth-e{i}",
                    environment="orchestrator",
                    task_id=t.task_id,
                    seed=i,
                )
                await admin.publish_durable(ns.rollout_job("orchestrator"), job, msg_id=job.job_id)
            await asyncio.wait_for(done.wait(), 30)
    assert {ep.outcome for ep in got.values()} <= {"success", "failure", "partial"}, got
    assert all(
        ep.trajectory[0].action == sim.offered(t, sim.start(t))[0]
        for ep, t in zip((got[f"auth-e{i}"] for i in range(len(tasks))), tasks, strict=True)
    )
    assert not _violations(server, "orchestrator-runner"), _violations(
        server, "orchestrator-runner"
    )
    assert not _violations(server, "sampler"), _violations(server, "sampler")


def test_urls_are_logged_without_credentials() -> None:
    from aios_rl.bus._bus import redacted

    assert redacted("nats://admin:s3cret@127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert (
        redacted("nats://a:b@h1:1, tls://h2:2,nats://tok@h3") == "nats://h1:1,tls://h2:2,nats://h3"
    )
    assert redacted("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"


async def test_up_insecure_runs_without_users_up_refuses_strangers_and_up_tls_speaks_tls(
    tmp_path: Path,
) -> None:
    import os
    import signal
    import sys

    from aios_rl.bus import ConnectError, discover
    from aios_rl.stack.natsd import free_port

    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "AIOS_NAMESPACE")}
    env["AIOS_LOG_FORMAT"] = "json"

    async def reward_up(*flags: str) -> tuple[asyncio.subprocess.Process, str]:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "aios_rl.cli", "up", "--only", "reward"),
            *("--nats-port", str(port), "--data-dir", str(tmp_path / flags[0]), *flags[1:]),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
        return proc, f"nats://127.0.0.1:{port}"

    async def reward_answers(url: str, **login: str) -> None:
        async with connect(url, name="test-insecure", connect_deadline=30, **login) as bus:
            async with asyncio.timeout(30):
                while "reward" not in {v.name for v in await discover(bus.nc, window=0.2)}:
                    pass  # each round waits for replies

    insecure, url = await reward_up("open", "--insecure")
    secure, secure_url = await reward_up("closed")
    tls, tls_url = await reward_up("tls", "--tls")
    try:
        await reward_answers(url, user="", password="")  # no credentials needed
        assert not (tmp_path / "open" / "auth").exists()
        await reward_answers(secure_url, **await admin_of(tmp_path / "closed"))
        with pytest.raises(ConnectError, match="refused a connection without credentials"):
            async with connect(secure_url, name="x", user="", password="", connect_deadline=2):
                pass
        # --tls: the reward service reached the server over TLS (it answers the admin, who
        # trusts the stack's CA); a client that does not trust it gets nowhere.
        admin = await admin_of(tmp_path / "tls")
        ca = str(tmp_path / "tls" / "auth" / "tls" / "ca.pem")
        await reward_answers(tls_url, ca=ca, **admin)
        with pytest.raises(ConnectError):
            async with connect(tls_url, name="x", ca="", connect_deadline=2, **admin):
                pass
    finally:
        for proc in (insecure, secure, tls):
            proc.send_signal(signal.SIGINT)
        outs = [
            (await asyncio.wait_for(p.communicate(), 30))[0].decode()
            for p in (insecure, secure, tls)
        ]
    assert "no authorization (--insecure)" in outs[0]
    assert "users and permissions from" in outs[1]
    assert "TLS (CA " in outs[2], outs[2]
    import json

    kept = [json.loads(f.read_text()) for f in (tmp_path / "closed" / "auth").glob("*.json")]
    assert len(kept) > 2
    assert not [k["user"] for k in kept if k["password"] in outs[1]]  # no password in the logs


async def test_a_runner_of_a_users_own_environment_runs_under_its_own_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``up --env beacon``: the environment (defined in a test module, known to no file under
    aios_rl/ or services/) gets a runner user, and its runner, connected from its credentials
    file, pulls its jobs and publishes its episodes, and may do nothing else."""
    from .test_environments import BEACON, COLOURS, beacon

    names = Names(f"own{uuid.uuid4().hex[:6]}")
    auth = prepare(tmp_path, names, [s.name for s in SERVICES], environments=["beacon"])
    creds_file = tmp_path / AUTH_DIR / "beacon-runner.json"
    assert creds_file.exists() and "beacon-runner" in auth.service_env
    tasks = [beacon(c) for c in COLOURS]
    got: dict[str, Episode] = {}
    done = asyncio.Event()

    async def on_completed(msg, raw) -> None:
        if isinstance(msg, Episode):
            got[msg.episode_id] = msg
            if len(got) == len(tasks):
                done.set()

    with NatsServer(tmp_path / "nats", config=auth.config) as server:
        secured = (server, auth)
        async with _as(secured, ADMIN, names) as admin:
            # What `up --env beacon` does as the admin: the topology with beacon's runner consumer.
            await provision(admin, topology(names, ("shell", "orchestrator", "beacon")))
            await registry.task_store(admin, "beacon").put_all(tasks)
            await admin.subscribe(names.episode("completed", "beacon"), on_completed)
            monkeypatch.delenv("NATS_USER", raising=False)
            monkeypatch.setenv("AIOS_CREDENTIALS", str(creds_file))
            async with (
                _as(secured, "sampler", names) as sampler_bus,
                connect(server.url, name="beacon-runner", names=names) as runner_bus,
            ):
                from aios_rl.bus import Service

                policy = Service(sampler_bus, name="sampler", version="0.0.1")

                async def act(req: ActRequest) -> ActResponse:
                    return ActResponse(action=req.candidates[0], action_index=0)

                policy.endpoint("act", names.policy_act(), ActRequest, act)
                runner_svc, _ = build_runner(
                    runner_bus,
                    BEACON,
                    RunnerSettings(env="beacon", nats_url=server.url, namespace=names.namespace),
                )
                runner_svc.fetch_timeout_s = 0.2
                async with running(policy), running(runner_svc):
                    for i, t in enumerate(tasks):
                        job = RolloutJob(
                            job_id=f"b{i}",
                            episode_id=f"b{i}",
                            environment="beacon",
                            task_id=t.task_id,
                        )
                        await admin.publish_durable(
                            names.rollout_job("beacon"), job, msg_id=f"b{i}"
                        )
                    await asyncio.wait_for(done.wait(), 30)
                # And nothing else: its user may not move pointers.
                js = runner_bus.nc.jetstream(timeout=1.5)
                kv = await js.key_value(names.bucket(BUCKET_CHECKPOINTS))
                with pytest.raises(nats.errors.TimeoutError):
                    await kv.put(Names.key_pointers(), b'{"active": "evil"}')
        refused = _violations(server, "beacon-runner").splitlines()
        assert refused and all("$KV" in line for line in refused), refused  # only the KV put
    assert {ep.trajectory[0].action for ep in got.values()} == {COLOURS[0]}
    assert all(len(ep.trajectory) == 2 for ep in got.values())
