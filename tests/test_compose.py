"""``docker-compose.yml`` agrees with the service registry (``aios_rl/stack/services.py``), can
scale, and runs NATS with one user per service (``aios-rl auth compose``, docs/security.md).

No Docker engine runs here (and no compose plugin), so the file is read with PyYAML, which
resolves the ``x-aios-service`` anchor and its ``<<`` merges as compose does, and compared with
the registry. Each check is a function that returns the problems it finds; the tests assert
there are none, and ``test_each_check_catches_its_breakage`` proves every check can fail by
feeding it a copy of the file broken the way that check is meant to catch.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from aios_rl.agents.tokens import AGENTS_FILE
from aios_rl.cli.auth import ENV_DIR, write_compose
from aios_rl.stack import SERVICES, by_name
from contracts import Names

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
NATS = "nats"
PROVISION = "provision"
NATS_URL = "nats://nats:4222"
NATS_CONFIG = "/etc/nats/nats.conf"
AUTH_DEFAULT = "${AIOS_COMPOSE_AUTH:-.aios/compose}"
PYTHONS = {"python", "python3", "python3.11"}

Compose = dict[str, Any]


def load_compose() -> Compose:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def services_of(compose: Compose) -> dict[str, dict[str, Any]]:
    return compose.get("services") or {}


def argv(command: str | list[str] | None) -> list[str]:
    """A compose ``command`` (string or list) as an argument list."""
    if command is None:
        return []
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def environment(entry: dict[str, Any]) -> dict[str, str]:
    """A compose ``environment`` (mapping or ``KEY=VALUE`` list) as a mapping."""
    env = entry.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ---- checks: each returns the problems it found, empty when the file is right -------------


def missing_services(compose: Compose) -> list[str]:
    present = services_of(compose)
    return [
        f"registered service {s.name!r} has no compose entry"
        for s in SERVICES
        if s.name not in present
    ]


def unknown_services(compose: Compose) -> list[str]:
    known = {NATS, PROVISION, *by_name()}
    return [
        f"compose entry {name!r} is neither {NATS!r}, {PROVISION!r} nor a registered service"
        for name in services_of(compose)
        if name not in known
    ]


def command_problems(compose: Compose) -> list[str]:
    problems = []
    for name, entry in services_of(compose).items():
        if name not in by_name():
            continue
        service = by_name()[name]
        wanted = ["-m", service.module, *service.args]
        args = argv(entry.get("command"))
        if len(args) < 3 or Path(args[0]).name not in PYTHONS or args[1:] != wanted:
            problems.append(f"{name}: command {args} does not run `python {shlex.join(wanted)}`")
        if "entrypoint" in entry:
            problems.append(
                f"{name}: sets an entrypoint; the image has none and the command "
                "alone must start the service"
            )
    return problems


def scaling_problems(compose: Compose) -> list[str]:
    problems = []
    for name, entry in services_of(compose).items():
        service = by_name().get(name)
        if service is None or not service.scalable:
            continue
        if "container_name" in entry:
            problems.append(f"{name}: scalable, so it must not set container_name")
        if entry.get("ports"):
            problems.append(f"{name}: scalable, so it must not publish host ports")
    return problems


def wiring_problems(compose: Compose) -> list[str]:
    """Each registered service talks to the compose ``nats`` and starts once it is healthy."""
    problems = []
    for name, entry in services_of(compose).items():
        if name not in by_name():
            continue
        url = environment(entry).get("NATS_URL")
        if url != NATS_URL:
            problems.append(f"{name}: NATS_URL is {url!r}, not {NATS_URL!r}")
        depends = entry.get("depends_on") or {}
        condition = depends.get(NATS, {}).get("condition") if isinstance(depends, dict) else None
        if condition != "service_healthy":
            problems.append(f"{name}: must depend on {NATS!r} with condition service_healthy")
        provisioned = (
            depends.get(PROVISION, {}).get("condition") if isinstance(depends, dict) else None
        )
        if provisioned != "service_completed_successfully":
            problems.append(
                f"{name}: must depend on {PROVISION!r} with condition "
                "service_completed_successfully (the topology exists before it starts)"
            )
    return problems


def env_files(entry: dict[str, Any]) -> list[str]:
    """A compose ``env_file`` (string or list) as a list."""
    files = entry.get("env_file") or []
    return [files] if isinstance(files, str) else [str(f) for f in files]


def credentials_problems(compose: Compose) -> list[str]:
    """Each registered service (and ``provision``, as the admin) reads its own env file, one of
    its own only, and no container gets credentials through ``environment:`` (which would also
    win over the file)."""
    problems = []
    for name, entry in services_of(compose).items():
        if name not in by_name() and name != PROVISION:
            continue
        user = "admin" if name == PROVISION else name
        wanted = f"{AUTH_DEFAULT}/{ENV_DIR}/{user}.env"
        if env_files(entry) != [wanted]:
            problems.append(f"{name}: env_file is {env_files(entry)}, not [{wanted!r}]")
        leaked = {"NATS_USER", "NATS_PASSWORD"} & set(environment(entry))
        if leaked:
            problems.append(
                f"{name}: sets {sorted(leaked)} in environment; they come from env_file"
            )
    nats = services_of(compose).get(NATS) or {}
    if env_files(nats) or {"NATS_USER", "NATS_PASSWORD"} & set(environment(nats)):
        problems.append(f"{NATS}: needs no credentials (its users are in the config)")
    return problems


def auth_problems(compose: Compose) -> list[str]:
    """nats runs with the generated config, mounted read-only; ``provision`` runs once, as the
    admin, after nats is healthy."""
    problems = []
    nats = services_of(compose).get(NATS) or {}
    args = argv(nats.get("command"))
    if not any(
        args[i : i + 2] == [flag, NATS_CONFIG]
        for i in range(len(args))
        for flag in ("-c", "--config")
    ):
        problems.append(
            f"{NATS}: command {args} does not load the users' config (-c {NATS_CONFIG})"
        )
    mount = f"{AUTH_DEFAULT}/auth/nats-server.conf:{NATS_CONFIG}:ro"
    if mount not in (nats.get("volumes") or []):
        problems.append(f"{NATS}: does not mount the generated config read-only ({mount})")
    prov = services_of(compose).get(PROVISION)
    if prov is None:
        return [*problems, f"no {PROVISION!r} service (the admin provisions the topology)"]
    if argv(prov.get("command")) != ["aios-rl", "auth", "provision"]:
        problems.append(f"{PROVISION}: command is not `aios-rl auth provision`")
    if environment(prov).get("NATS_URL") != NATS_URL:
        problems.append(f"{PROVISION}: NATS_URL is not {NATS_URL!r}")
    if str(prov.get("restart", "no")) != "no":
        problems.append(f"{PROVISION}: a one-shot service must not restart")
    depends = prov.get("depends_on") or {}
    if not isinstance(depends, dict) or depends.get(NATS, {}).get("condition") != "service_healthy":
        problems.append(f"{PROVISION}: must depend on {NATS!r} with condition service_healthy")
    return problems


def nats_problems(compose: Compose) -> list[str]:
    entry = services_of(compose).get(NATS)
    if entry is None:
        return [f"no {NATS!r} service"]
    problems = []
    args = argv(entry.get("command"))
    if not {"-js", "--jetstream"} & set(args):
        problems.append(f"{NATS}: command {args} does not enable JetStream (-js)")
    health = entry.get("healthcheck") or {}
    test = argv(health.get("test"))
    if health.get("disable") or not test or test[0] == "NONE":
        problems.append(f"{NATS}: no healthcheck, so depends_on service_healthy never passes")
    elif any("localhost:8222" in a for a in test) and not {"-m", "--http_port"} & set(args):
        problems.append(
            f"{NATS}: the healthcheck polls port 8222 but the command does not "
            "enable monitoring (-m 8222)"
        )
    return problems


def build_problems(compose: Compose) -> list[str]:
    problems = []
    for name, entry in services_of(compose).items():
        if name not in by_name():
            continue
        build = entry.get("build")
        if build is None:
            problems.append(
                f"{name}: has no build section (every service is built from deploy/Dockerfile)"
            )
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = REPO / build.get("context", ".")
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        if not dockerfile.is_file():
            problems.append(f"{name}: builds from {dockerfile}, which does not exist")
    return problems


CHECKS: tuple[Callable[[Compose], list[str]], ...] = (
    missing_services,
    unknown_services,
    command_problems,
    scaling_problems,
    wiring_problems,
    nats_problems,
    build_problems,
    credentials_problems,
    auth_problems,
)


# ---- the file as it is ----------------------------------------------------------------------


def assert_none(problems: list[str]) -> None:
    assert not problems, "docker-compose.yml:\n  " + "\n  ".join(problems)


def test_every_registered_service_has_an_entry() -> None:
    assert_none(missing_services(load_compose()))


def test_no_entry_outside_the_registry() -> None:
    assert_none(unknown_services(load_compose()))


def test_each_entry_runs_its_registered_module() -> None:
    assert_none(command_problems(load_compose()))


def test_scalable_services_have_no_container_name_or_ports() -> None:
    assert_none(scaling_problems(load_compose()))


def test_services_reach_nats_once_it_is_healthy() -> None:
    assert_none(wiring_problems(load_compose()))


def test_nats_runs_jetstream_with_a_healthcheck() -> None:
    assert_none(nats_problems(load_compose()))


def test_each_entry_builds_from_an_existing_dockerfile() -> None:
    assert_none(build_problems(load_compose()))


def test_each_service_reads_its_own_credentials() -> None:
    assert_none(credentials_problems(load_compose()))


def test_nats_runs_with_users_and_the_admin_provisions() -> None:
    assert_none(auth_problems(load_compose()))


def _compose_paths(compose: Compose, out: Path) -> list[tuple[str, Path]]:
    """(service, file on the host) for every file the compose file takes from ``out``."""
    paths = []
    for name, entry in services_of(compose).items():
        sources = [
            *env_files(entry),
            *(str(v).rsplit(":", 2)[0] for v in entry.get("volumes") or []),
        ]
        paths += [
            (name, out / src[len(AUTH_DEFAULT) + 1 :])
            for src in sources
            if src.startswith(AUTH_DEFAULT + "/")
        ]
    return paths


def test_auth_compose_writes_what_the_compose_file_reads(tmp_path: Path) -> None:
    """``aios-rl auth compose`` writes every file the compose file names, private; each env file
    holds its own service's user and password and nothing else (the admin's also the namespace
    the config was made for); the config has a user for each."""
    config, _ = write_compose(tmp_path, Names("ns"))
    paths = _compose_paths(load_compose(), tmp_path)
    assert {p for _, p in paths} >= {config}
    passwords: dict[str, str] = {}
    for name, path in paths:
        assert path.is_file(), f"{name}: {path} was not written"
        if path.name == AGENTS_FILE:  # the agents' token digests: no secret, read by uid 10001
            assert json.loads(path.read_text()) == {"agents": {}}
            assert path.stat().st_mode & 0o777 == 0o644
            continue
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
        if path == config:
            continue
        lines = dict(line.split("=", 1) for line in path.read_text().splitlines())
        user = "admin" if name == PROVISION else name
        extra = {"AIOS_AUTH_NAMESPACE": "ns"} if user == "admin" else {}
        assert set(lines) == {"NATS_USER", "NATS_PASSWORD", *extra}, path
        assert lines["NATS_USER"] == user and len(lines["NATS_PASSWORD"]) >= 24
        assert all(lines[k] == v for k, v in extra.items())
        passwords[user] = lines["NATS_PASSWORD"]
    text = config.read_text()
    assert all(f'"{u}"' in text and f'"{p}"' in text for u, p in passwords.items())
    assert len(set(passwords.values())) == len(passwords), "two users share a password"
    # A second run keeps the passwords.
    write_compose(tmp_path, Names("ns"))
    assert (tmp_path / ENV_DIR / "admin.env").read_text().count(passwords["admin"]) == 1


def test_auth_compose_insecure_writes_no_users(tmp_path: Path) -> None:
    config, env_dir = write_compose(tmp_path, Names(""), insecure=True)
    assert "authorization {" not in config.read_text() and "users" not in config.read_text()
    for path in env_dir.glob("*.env"):
        lines = dict(line.split("=", 1) for line in path.read_text().splitlines())
        assert lines["NATS_USER"] == "" and lines["NATS_PASSWORD"] == "", path


# ---- and each check on a broken copy ------------------------------------------------------


def _first_registered(compose: Compose) -> dict[str, Any]:
    return services_of(compose)[SERVICES[0].name]


def _drop_first_registered(c: Compose) -> None:
    del services_of(c)[SERVICES[0].name]


def _add_stray(c: Compose) -> None:
    services_of(c)["stray"] = copy.deepcopy(_first_registered(c))


def _wrong_module(c: Compose) -> None:
    _first_registered(c)["command"] = ["python", "-m", "services.nonexistent"]


def _command_as_string_wrong(c: Compose) -> None:
    _first_registered(c)["command"] = f"{SERVICES[0].module}"


def _first_scalable(c: Compose) -> dict[str, Any]:
    scalable = [s.name for s in SERVICES if s.scalable]
    if not scalable:
        pytest.skip("no scalable service registered")
    return services_of(c)[scalable[0]]


def _container_name(c: Compose) -> None:
    _first_scalable(c)["container_name"] = "fixed"


def _ports(c: Compose) -> None:
    _first_scalable(c)["ports"] = ["8000:8000"]


def _local_nats_url(c: Compose) -> None:
    _first_registered(c)["environment"] = {
        **environment(_first_registered(c)),
        "NATS_URL": "nats://127.0.0.1:4222",
    }


def _depends_started(c: Compose) -> None:
    _first_registered(c)["depends_on"] = {NATS: {"condition": "service_started"}}


def _nats_without_js(c: Compose) -> None:
    services_of(c)[NATS]["command"] = [
        a for a in argv(services_of(c)[NATS]["command"]) if a != "-js"
    ]


def _nats_without_healthcheck(c: Compose) -> None:
    del services_of(c)[NATS]["healthcheck"]


def _depends_not_on_provision(c: Compose) -> None:
    depends = dict(_first_registered(c)["depends_on"])
    del depends[PROVISION]
    _first_registered(c)["depends_on"] = depends


def _shared_env_file(c: Compose) -> None:
    _first_registered(c)["env_file"] = [f"{AUTH_DEFAULT}/{ENV_DIR}/admin.env"]


def _password_in_environment(c: Compose) -> None:
    _first_registered(c)["environment"] = {
        **environment(_first_registered(c)),
        "NATS_PASSWORD": "secret",
    }


def _nats_without_config(c: Compose) -> None:
    args = argv(services_of(c)[NATS]["command"])
    i = args.index("-c")
    services_of(c)[NATS]["command"] = args[:i] + args[i + 2 :]


def _no_provision(c: Compose) -> None:
    del services_of(c)[PROVISION]


def _provision_restarts(c: Compose) -> None:
    services_of(c)[PROVISION]["restart"] = "unless-stopped"


def _missing_dockerfile(c: Compose) -> None:
    _first_registered(c)["build"] = {"context": ".", "dockerfile": "deploy/Dockerfile.missing"}


def _no_build(c: Compose) -> None:
    del _first_registered(c)["build"]


BREAKAGES: list[tuple[Callable[[Compose], list[str]], Callable[[Compose], None]]] = [
    (missing_services, _drop_first_registered),
    (unknown_services, _add_stray),
    (command_problems, _wrong_module),
    (command_problems, _command_as_string_wrong),
    (scaling_problems, _container_name),
    (scaling_problems, _ports),
    (wiring_problems, _local_nats_url),
    (wiring_problems, _depends_started),
    (wiring_problems, _depends_not_on_provision),
    (credentials_problems, _shared_env_file),
    (credentials_problems, _password_in_environment),
    (auth_problems, _nats_without_config),
    (auth_problems, _no_provision),
    (auth_problems, _provision_restarts),
    (nats_problems, _nats_without_js),
    (nats_problems, _nats_without_healthcheck),
    (build_problems, _missing_dockerfile),
    (build_problems, _no_build),
]


@pytest.mark.parametrize(("check", "breakage"), BREAKAGES, ids=lambda f: f.__name__.strip("_"))
def test_each_check_catches_its_breakage(
    check: Callable[[Compose], list[str]], breakage: Callable[[Compose], None]
) -> None:
    compose = load_compose()
    assert check(compose) == []
    broken = copy.deepcopy(compose)
    breakage(broken)
    assert check(broken) != []


def test_every_check_has_a_breakage() -> None:
    """A new check must come with a breakage it catches, in ``BREAKAGES``."""
    assert {check for check, _ in BREAKAGES} == set(CHECKS)
