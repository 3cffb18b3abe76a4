"""The training options reach what runs: ``--algorithm`` the trainer's update, ``--student`` /
``--model-path`` the student the stack starts from and serves, ``--teacher`` the gateway's
backend, ``--split real`` the tasks a campaign draws; every table command takes ``--json``;
``aios-rl config`` says where each service setting comes from. Read commands serve the store
with no server running."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import json
import os
import sys
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from aios_rl.bus import Bus, RemoteError, explain_settings, load_settings
from aios_rl.cli import build_parser
from aios_rl.cli._common import CliError
from aios_rl.cli._training import (
    apply_teacher,
    campaign_spec,
    check_store_student,
    check_student,
    embedded_options,
    option_needs,
    teacher_needs,
)
from aios_rl.cli.engine import ensure_tasks
from aios_rl.cli.environments import generate_tasks
from aios_rl.cli.report import learning_signals, signals_line
from aios_rl.envs import registry
from aios_rl.rollouts.epoch import sample_tasks
from aios_rl.stack.auth import prepare
from aios_rl.stack.natsd import NatsServer, free_port
from aios_rl.stack.services import SERVICES
from aios_rl.state.checkpoints import CheckpointRegistry
from aios_rl.state.control import ControlStore
from aios_rl.state.ledger import Ledger
from aios_rl.state.tasks import task_ids
from aios_rl.student import load_student, new_student
from aios_rl.student.train import build_batch, update, update_config
from contracts import (
    ActRequest,
    ActResponse,
    CampaignSpec,
    CampaignState,
    EnvironmentRecipe,
    EpochRecord,
    GatewaySettings,
    Names,
    TrainerSettings,
)
from services.trainer.settings import TrainerServiceSettings

from .support import eventually, running
from .test_student_hf import HAVE_TRANSFORMERS, tiny_lm, tokenizer  # noqa: F401 - a fixture
from .toytask import ToyTask

AIOS = [sys.executable, "-m", "aios_rl.cli"]

TRAINING_COMMANDS = [["train"], ["shell", "train"], ["mixed", "--shell-only"], ["demo"]]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


async def aios(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    full = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "AIOS_NAMESPACE")}
    # Tables as wide as they need: at the default 80 columns a wide cell (a slow run's times)
    # squeezes the decision column to "…".
    full["COLUMNS"] = "220"
    full.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        *AIOS,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=full,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


# -- every option on every training command -------------------------------------------------------------


@pytest.mark.parametrize("command", TRAINING_COMMANDS, ids=" ".join)
def test_every_training_option_is_reachable(command: list[str], tmp_path: Path) -> None:
    args = parse(
        *command,
        "--algorithm", "ppo",
        "--student", "hf",
        "--model-path", str(tmp_path),
        "--split", "real",
        "--teacher", "claude",
        "--learning-rate", "0.01",
        "--distill", "0.5",
        "--no-self-imitation",
        "--progress-coef", "0.5",
        "--warm-optimizer",
        "--env-normalize",
        "--group-size", "3",
        "--tasks-per-epoch", "5",
        "--store", str(tmp_path / "store"),
        "--json",
    )  # fmt: skip
    spec = campaign_spec(args, "c", {"shell": 1.0})
    assert (spec.trainer.algorithm, spec.trainer.learning_rate) == ("ppo", 0.01)
    assert spec.trainer.distill_coef == 0.5
    assert (spec.trainer.self_imitation, spec.trainer.progress_coef) == (False, 0.5)
    assert spec.trainer.warm_optimizer and spec.trainer.env_normalize
    assert (spec.group_size, spec.tasks_per_epoch, spec.split) == (3, 5, "real")
    opts = embedded_options(args)
    assert opts["service_args"] == {
        "trainer": ["--backend", "hf", "--model-path", str(tmp_path.resolve())],
        "teacher-gateway": ["--default-backend", "claude"],
        # a language model scores candidates in process: the runners wait longer for it
        **{
            runner: ["--act-timeout-s", "180"]
            for runner in ("browser-runner", "orchestrator-runner", "shell-runner")
        },
    }
    assert opts["scale"] == {"teacher-claude": 1}
    assert args.store == tmp_path / "store" and args.json


def test_every_signal_a_student_learns_from_is_named() -> None:
    plain = TrainerSettings()
    assert learning_signals(plain, "oracle") == {
        "environment_reward": "yes",
        "teacher_shaping": "yes (oracle, which knows the answers)",
        "hint_distillation": "off",
        "self_imitation": "off",
        "step_progress": "off",
        "per_environment": "none",
    }
    distilled = TrainerSettings(distill_coef=0.5)
    assert learning_signals(distilled, "noisy-oracle")["hint_distillation"] == (
        "weight 0.5 (noisy-oracle)"
    )
    alone = learning_signals(distilled, "none")  # no teacher: nothing shapes, nothing to distil
    assert (alone["teacher_shaping"], alone["hint_distillation"]) == ("no (no teacher)", "off")
    assert signals_line(plain, "openai") == (
        "learns from: environment reward; teacher shaping: yes (openai); hint distillation: off"
    )
    recipe = TrainerSettings(self_imitation=True, progress_coef=1.0)
    assert signals_line(recipe, "none") == (
        "learns from: environment reward; teacher shaping: no (no teacher); hint distillation: "
        "off; self-imitation: weight 0.5 (its own successes); step progress: weight 1 (the "
        "environment's)"
    )
    own = msgspec.structs.replace(
        recipe,
        by_environment={
            "browser": EnvironmentRecipe(self_imitation=False, progress_coef=0.0),
            "shell": EnvironmentRecipe(progress_coef=0.5),
        },
    )
    assert learning_signals(own, "none")["per_environment"] == (
        "browser: GRPO alone; shell: self-imitation on, step progress 0.5"
    )
    assert signals_line(own, "none").endswith(
        "; per environment: browser: GRPO alone; shell: self-imitation on, step progress 0.5"
    )


@pytest.mark.parametrize("value", ["browser", "browser=ppo", "=grpo"])
def test_a_bad_env_recipe_is_a_one_line_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse("train", "--env-recipe", value)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{value!r} is not ENV=grpo or ENV=recipe" in err


def test_the_measured_recipes_are_one_table_for_the_cli_and_the_benchmarks() -> None:
    """``aios_rl.recipes`` holds the defaults ``aios-rl train`` and ``bench/phase_de.py`` use:
    an override replaces a default, an unknown name is refused."""
    from aios_rl.recipes import env_recipes

    grpo = EnvironmentRecipe(self_imitation=False, progress_coef=0.0)
    assert env_recipes() == {"browser": grpo}
    assert env_recipes({"browser": "recipe", "shell": "grpo"}) == {"shell": grpo}
    with pytest.raises(ValueError, match="not a recipe: shell=ppo"):
        env_recipes({"shell": "ppo"})


def test_defaults_and_the_data_dir_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse("train", "--data-dir", "elsewhere")
    assert args.store == Path("elsewhere")
    spec = campaign_spec(args, "c", {"shell": 1.0})
    assert (spec.trainer.algorithm, spec.split) == ("grpo", "train")
    assert spec.trainer.distill_coef == 0.0  # learning from reward unless asked
    # ... by the recipe measured to learn from it (bench/results/learning_rl-*.md)
    assert (spec.trainer.self_imitation, spec.trainer.progress_coef) == (True, 1.0)
    assert not spec.trainer.warm_optimizer  # an option, not shown to help yet
    assert not spec.trainer.env_normalize
    off = campaign_spec(parse("train", "--no-self-imitation", "--progress-coef", "0"), "c", {})
    assert (off.trainer.self_imitation, off.trainer.progress_coef) == (False, 0.0)
    # Browser episodes learn by GRPO alone unless asked (measured better on MiniWoB++).
    grpo = EnvironmentRecipe(self_imitation=False, progress_coef=0.0)
    assert spec.trainer.by_environment == {"browser": grpo}
    mixed = parse("train", "--env-recipe", "browser=recipe", "--env-recipe", "shell=grpo")
    assert campaign_spec(mixed, "c", {}).trainer.by_environment == {"shell": grpo}
    assert embedded_options(args) == {"service_args": {}, "scale": {}}
    assert teacher_needs(args) == set()
    monkeypatch.setenv("AIOS_STORE", "from-env")
    assert parse("checkpoints").store == Path("from-env")
    monkeypatch.delenv("AIOS_STORE")
    assert parse("eval").store == Path(".aios/stack") == parse("demo").store


@pytest.mark.parametrize(
    "command",
    [
        ["checkpoints"],
        ["campaign", "status"],
        ["rail", "status"],
        ["services"],
        ["config"],
        ["eval"],
        ["shell", "eval"],
        ["browser", "eval"],
        ["orchestrator", "eval"],
        ["mixed-eval"],
        *TRAINING_COMMANDS,
        ["browser", "train"],
        ["orchestrator", "train"],
    ],
    ids=" ".join,
)
def test_every_table_command_takes_json(command: list[str]) -> None:
    assert parse(*command, "--json").json


# -- every environment's benchmark-generate / train / eval, from the registry ----------------------------


@pytest.mark.parametrize("env", list(registry.benchmarks()))
def test_every_generated_environment_has_its_three_commands(env: str) -> None:
    bench = registry.benchmark(env)
    gen = parse(env, "benchmark-generate", "--count", "2")
    assert (gen.environment, gen.split, gen.count) == (env, "train", 2)
    assert hasattr(gen, "out") == (bench.verified is not None)
    train = parse(env, "train")
    assert (train.environment, train.train_tasks, train.heldout, train.split) == (
        env,
        bench.train_tasks,
        bench.heldout,
        bench.train_splits[0],
    )
    assert train.epochs == 5 and train.run is not None
    ev = parse(env, "eval")
    assert (ev.environment, ev.limit, ev.split) == (env, bench.eval_limit, "heldout")
    for split in bench.eval_splits:
        assert parse(env, "eval", "--split", split).split == split
    with pytest.raises(SystemExit):
        parse(env, "eval", "--split", "nope")


def test_the_top_level_commands_are_the_shells_and_generate_any_environment() -> None:
    assert parse("train").environment == parse("eval").environment == "shell"
    assert (parse("train").train_tasks, parse("eval").limit) == (
        registry.benchmark("shell").train_tasks,
        registry.benchmark("shell").eval_limit,
    )
    for env in registry.benchmarks():
        assert parse("benchmark-generate", "--count", "1", "--env", env).environment == env


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--split", "real"], "--split real: orchestrator tasks come in train, heldout"),
        (["--out", "x"], "--out and --no-store are for shell tasks"),
    ],
)
def test_generating_what_an_environment_does_not_make_is_a_one_line_error(
    argv: list[str], message: str
) -> None:
    args = parse("benchmark-generate", "--count", "1", "--env", "orchestrator", *argv)
    with pytest.raises(CliError, match=message):
        generate_tasks(args)  # before any connection


@pytest.mark.parametrize("env", ["browser", "orchestrator"])
def test_a_registry_generator_makes_tasks_of_the_environments_type(env: str) -> None:
    tasks = registry.generator(env)(3, seed=1, split="heldout")
    assert len(tasks) == 3
    assert all(isinstance(t, registry.get(env).tasks.type) for t in tasks)
    assert {t.split for t in tasks} == {"heldout"}


# -- --algorithm: the trainer's update ------------------------------------------------------------------


def test_algorithm_selects_the_update_the_trainer_runs() -> None:
    """The spec the CLI builds, through the trainer's own configuration, on the same batch:
    PPO's update (GAE on a value head, a value loss) differs from GRPO's."""
    episodes = ToyTask(seed=1).rollouts(new_student(seed=1), groups=8, group_size=4)
    digests, metrics = {}, {}
    for algorithm in ("grpo", "ppo"):
        spec = campaign_spec(parse("train", "--algorithm", algorithm), "c", {"shell": 1.0})
        config = update_config(spec.trainer)
        assert config.algorithm == algorithm
        model = new_student(seed=1)
        metrics[algorithm] = update(model, None, build_batch(episodes, config=config), config)
        digests[algorithm] = hashlib.sha256(model.to_bytes()).hexdigest()
    assert digests["grpo"] != digests["ppo"]
    assert "value_loss" in metrics["ppo"] and "value_loss" not in metrics["grpo"]


# -- --student / --model-path ---------------------------------------------------------------------------


def test_student_errors_are_one_line_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CliError, match="needs --model-path"):
        check_student(parse("train", "--student", "hf"))
    with pytest.raises(CliError, match="is for --student hf"):
        check_student(parse("train", "--model-path", str(tmp_path)))
    with pytest.raises(CliError, match="is for --student hf"):
        check_student(parse("train", "--student", "minilm", "--model-path", str(tmp_path)))
    with pytest.raises(CliError, match="no such directory"):
        check_student(parse("train", "--student", "hf", "--model-path", str(tmp_path / "no")))
    import aios_rl.cli._training as training

    monkeypatch.setattr(training.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CliError, match=r"--student minilm: its backend \(aios_rl.student.minilm\)"):
        check_student(parse("demo", "--student", "minilm"))


def test_a_cli_teacher_without_its_program_is_a_one_line_error_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aios_rl.cli._training import check_teacher

    monkeypatch.delenv("AIOS_EXECUTABLE", raising=False)
    missing, present = (lambda _: None), (lambda p: f"/usr/bin/{p}")
    with pytest.raises(CliError, match="--teacher codex: 'codex' is not an executable on PATH"):
        check_teacher(parse("train", "--teacher", "codex"), which=missing)
    check_teacher(parse("train", "--teacher", "codex"), which=present)
    check_teacher(parse("train", "--teacher", "oracle"), which=missing)  # no program to find
    check_teacher(parse("train"), which=missing)
    monkeypatch.setenv("AIOS_EXECUTABLE", "my-claude")
    with pytest.raises(CliError, match="'my-claude'"):
        check_teacher(parse("demo", "--teacher", "claude"), which=missing)


def test_student_minilm_goes_where_tiny_and_hf_go() -> None:
    args = parse("demo", "--student", "minilm")
    flags = embedded_options(args)["service_args"]["trainer"]  # type: ignore[index]
    assert flags == ["--backend", "minilm"]
    assert load_settings(TrainerServiceSettings, flags).backend == "minilm"


@pytest.mark.skipif(not HAVE_TRANSFORMERS, reason="transformers is not installed")
async def test_student_hf_makes_the_stack_serve_the_model_directory(
    bus: Bus,
    nats_url: str,
    names: Names,
    tokenizer,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """The trainer and sampler, started with the flags the CLI gives them, store an hf student
    from the directory and serve it; the CLI then refuses another student on that store."""
    from services.sampler.main import build as build_sampler
    from services.sampler.settings import SamplerSettings
    from services.trainer.main import build as build_trainer

    tiny_lm(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model_dir = str(tmp_path.resolve())  # noqa: ASYNC240 - a test's own folder
    args = parse("train", "--student", "hf", "--model-path", str(tmp_path))
    check_student(args)
    flags = embedded_options(args)["service_args"]["trainer"]  # type: ignore[index]
    base = ["--nats-url", nats_url, "--namespace", names.namespace]
    settings = load_settings(TrainerServiceSettings, [*base, *flags])
    _svc, trainer = build_trainer(bus, settings)
    await trainer.ensure_initial()
    registry = CheckpointRegistry(bus)
    active = (await registry.pointers())[0].active
    assert active is not None and (await registry.meta(active)).backend == "hf"
    student = load_student(await registry.load(active))
    assert student.config.model_path == model_dir  # type: ignore[attr-defined]
    sampler, _ = build_sampler(bus, load_settings(SamplerSettings, base))
    request = ActRequest(episode_id="e", step=0, observation="the light", candidates=["a", "b"])

    async def act() -> ActResponse | None:
        try:
            return await bus.request(bus.names.policy_act(), request, ActResponse, timeout=30)
        except RemoteError as exc:  # 503 until the sampler has followed the active pointer
            if exc.code != "503":
                raise
            return None

    async with running(sampler):
        reply = await eventually(act, within=30, what="the sampler serving the hf checkpoint")
    assert reply.checkpoint_id == active and reply.action in ("a", "b")
    await check_store_student(bus, active, "hf")
    await check_store_student(bus, active, None)
    with pytest.raises(CliError, match="is a hf student"):
        await check_store_student(bus, active, "tiny")


# -- --agent-cmd ----------------------------------------------------------------------------------------


def test_agent_cmd_starts_the_gateway_and_the_runner_with_the_agent(tmp_path: Path) -> None:
    """``--agent-cmd`` gives the environment's runner the agent's command and name (read back by
    the runner's own settings, as the embedded stack starts it) and one agent gateway; it is
    refused for a mixed campaign, a student that does not write text, a RAIL strategy and a bad
    name (entropy and heuristic branching run: continuations replay the agent's turns)."""
    from aios_rl.cli._training import check_agent
    from aios_rl.envs.shell.adapter import ShellRunnerSettings
    from aios_rl.stack.embedded import _with_env

    cmd = "python3 my agent.py --fast"
    args = parse("train", "--agent-cmd", cmd, "--agent-name", "coder")
    opts = embedded_options(args)
    assert opts["scale"] == {"agent-gateway": 1}
    assert option_needs(args) == {"agent-gateway"}
    both = parse("train", "--agent-cmd", cmd, "--teacher", "oracle")
    assert option_needs(both) == {"agent-gateway", "teacher-oracle"}
    flags = opts["service_args"]["shell-runner"]  # type: ignore[index]
    settings = load_settings(
        ShellRunnerSettings, ["--env", "shell", *flags, "--agent-token", "t0k"]
    )
    assert (settings.agent_cmd, settings.agent_name) == (cmd, "coder")
    assert embedded_options(parse("train"))["scale"] == {}  # no agent: no gateway
    check_agent(args, ["shell"])
    check_agent(parse("train", "--student", "hf", "--agent-cmd", cmd), ["shell"])
    with pytest.raises(CliError, match="not a mixed campaign"):
        check_agent(args, ["shell", "browser"])
    with pytest.raises(CliError, match="writes text"):
        check_agent(parse("train", "--student", "tiny", "--agent-cmd", cmd), ["shell"])
    with pytest.raises(CliError, match="--strategy rail: RAIL reads the student's hidden"):
        check_agent(parse("train", "--strategy", "rail", "--agent-cmd", cmd), ["shell"])
    for branching in ("entropy", "heuristic"):  # continuations replay the agent's turns
        check_agent(parse("train", "--strategy", branching, "--agent-cmd", cmd), ["shell"])
    check_agent(parse("train", "--strategy", "dapo-filter", "--agent-cmd", cmd), ["shell"])
    with pytest.raises(CliError, match="--agent-name 'a b'"):
        check_agent(parse("train", "--agent-cmd", cmd, "--agent-name", "a b"), ["shell"])
    # A new token for the name: its digest in the store, the token for that runner alone.
    from aios_rl.agents.tokens import Tokens
    from aios_rl.cli._training import agent_service_env

    store = ["--store", str(tmp_path)]
    assert agent_service_env(parse("train", *store)) == {}
    assert not (tmp_path / "auth").exists()
    env = agent_service_env(parse("train", *store, "--agent-cmd", cmd, "--agent-name", "coder"))
    token = env["shell-runner"]["AIOS_AGENT_TOKEN"]
    tokens = Tokens.from_json((tmp_path / "auth" / "agents.json").read_text())
    assert set(env) == {"shell-runner"} and set(tokens.digests) == {"coder"}
    assert token not in (tmp_path / "auth" / "agents.json").read_text()
    assert tokens.agent(f"Bearer {token}") == "coder"
    # The runner's token goes beside its credentials, which it does not replace.
    merged = _with_env(
        {"shell-runner": {"NATS_USER": "u"}, "sampler": {"NATS_USER": "s"}},
        {"shell-runner": {"AIOS_AGENT_TOKEN": "t"}},
    )
    assert merged == {
        "shell-runner": {"NATS_USER": "u", "AIOS_AGENT_TOKEN": "t"},
        "sampler": {"NATS_USER": "s"},
    }


# -- --teacher ------------------------------------------------------------------------------------------


async def test_teacher_sets_the_gateways_backend(bus: Bus, nats_url: str, names: Names) -> None:
    """A gateway started with the flag the CLI gives it seeds its control key with that backend;
    ``--teacher`` on a store whose key exists rewrites it, and the running gateway follows."""
    from services.teacher_gateway.main import build as build_gateway
    from services.teacher_gateway.settings import GatewayServiceSettings

    key = Names.key_control("gateway", "default")
    store = ControlStore(bus)
    flags = embedded_options(parse("train", "--teacher", "codex"))["service_args"]
    base = ["--nats-url", nats_url, "--namespace", names.namespace]
    settings = load_settings(GatewayServiceSettings, [*base, *flags["teacher-gateway"]])  # type: ignore[index]
    svc, gateway = build_gateway(bus, settings)

    async def backend(name: str) -> bool | None:
        return True if gateway.config.backend == name else None

    async with running(svc):
        await eventually(lambda: backend("codex"), within=10, what="the flag's backend")
        await apply_teacher(bus, parse("train", "--teacher", "claude").teacher)
        await eventually(lambda: backend("claude"), within=10, what="the gateway following")
    snap, _ = await store.load(key)
    assert snap is not None and snap.state == GatewaySettings(backend="claude")
    await apply_teacher(bus, parse("train").teacher)  # no option: the store's setting stays
    assert (await store.load(key))[0].state.backend == "claude"  # type: ignore[union-attr]
    args = parse("train", "--teacher", "none")
    assert teacher_needs(args) == set() and embedded_options(args)["scale"] == {}
    assert teacher_needs(parse("train", "--teacher", "oracle")) == {"teacher-oracle"}
    assert embedded_options(parse("train", "--teacher", "oracle"))["scale"] == {}  # runs anyway
    assert embedded_options(parse("train", "--teacher", "claude"))["scale"] == {"teacher-claude": 1}


# -- --split real ---------------------------------------------------------------------------------------


async def test_split_real_trains_on_real_code_tasks(bus: Bus) -> None:
    """The campaign the CLI builds draws its tasks from the real split ``ensure_tasks`` fills,
    the same index the campaign service reads."""
    args = parse("train", "--split", "real", "--tasks-per-epoch", "3")
    spec = campaign_spec(args, "c", {"shell": 1.0})
    await ensure_tasks(bus, spec.split, 2, Console(file=io.StringIO()))
    available = {"shell": await task_ids(bus, "shell", spec.split)}
    assert len(available["shell"]) == 2 and await task_ids(bus, "shell", "train") == []
    drawn = sample_tasks(spec, 0, available)
    assert len(drawn) == 3 and {t.split("/", 1)[1] for t in drawn} <= set(available["shell"])
    with pytest.raises(CliError, match="--split real is for shell tasks only"):
        campaign_spec(parse("mixed", "--split", "real"), "c", {"shell": 0.5, "browser": 0.5})


# -- aios-rl config -------------------------------------------------------------------------------------


def test_explain_settings_names_each_source() -> None:
    settings, sources = explain_settings(
        TrainerServiceSettings,
        ["--backend", "hf", "--model-path", "/m"],
        {"AIOS_TORCH_THREADS": "2", "NATS_URL": "nats://x:1"},
    )
    assert (settings.backend, settings.torch_threads, settings.nats_url) == ("hf", 2, "nats://x:1")
    assert sources["backend"] == "flag --backend" and sources["model_path"] == "flag --model-path"
    assert sources["torch_threads"] == "env AIOS_TORCH_THREADS"
    assert sources["nats_url"] == "env NATS_URL" and sources["init_seed"] == "default"
    with pytest.raises(ValueError, match="AIOS_TORCH_THREADS"):
        explain_settings(TrainerServiceSettings, [], {"AIOS_TORCH_THREADS": "many"})


async def test_config_prints_every_service_and_each_sources(tmp_path: Path) -> None:
    model_dir = str(tmp_path.resolve())  # noqa: ASYNC240 - a test's own folder
    code, out, err = await aios(
        "config", "--json", "--student", "hf", "--model-path", str(tmp_path),
        "--teacher", "codex", "--algorithm", "ppo",
        env={"AIOS_MAX_BATCH": "7"},
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["services"]) == {s.name for s in SERVICES}
    trainer = doc["services"]["trainer"]
    assert trainer["backend"] == {"value": "hf", "source": "flag --student"}
    assert trainer["model_path"] == {"value": model_dir, "source": "flag --model-path"}
    assert trainer["init_seed"] == {"value": 0, "source": "default"}
    assert doc["services"]["sampler"]["max_batch"] == {"value": 7, "source": "env AIOS_MAX_BATCH"}
    assert doc["services"]["teacher-gateway"]["default_backend"]["source"] == "flag --teacher"
    assert doc["services"]["shell-runner"]["env"] == {"value": "shell", "source": "stack"}
    assert doc["services"]["reward"]["log_format"] == {"value": "json", "source": "stack"}
    assert doc["campaign"]["trainer.algorithm"] == {"value": "ppo", "source": "flag --algorithm"}
    assert doc["campaign"]["group_size"] == {"value": 4, "source": "default"}
    code, out, err = await aios("config", "--service", "trainer")
    assert code == 0 and "backend" in out and "sampler" not in out, err


# -- read commands on the store -------------------------------------------------------------------------


async def _make_store(store: Path) -> str:
    """A store as a command leaves it (users, a checkpoint lineage, a campaign with a ledger),
    with its server stopped; the campaign's id."""
    names = Names("")
    auth = prepare(store, names, [s.name for s in SERVICES])
    from aios_rl.bus import connect, provision

    with NatsServer(store / "nats", config=auth.config) as server:
        async with connect(
            server.url, name="t", user=auth.admin.user, password=auth.admin.password
        ) as bus:
            await provision(bus)
            reg = CheckpointRegistry(bus)
            root = await reg.store(b"w0", parent_id=None, created_by="init", algorithm="init")
            child = await reg.store(
                b"w1", parent_id=root.checkpoint_id, created_by="update-1", algorithm="ppo"
            )
            await reg.init(root.checkpoint_id)
            await reg.advance(child.checkpoint_id, "update-1")
            spec = CampaignSpec(campaign_id="camp-1", epochs=1)
            await ControlStore(bus).load_or_init(
                Names.key_control("campaign", "camp-1"),
                lambda: CampaignState(spec=spec, state="finished", epoch=1, phase="done"),
            )
            await Ledger(bus).put(
                EpochRecord(campaign_id="camp-1", epoch=0, verdict="same", decision="promote")
            )
    return child.checkpoint_id


async def test_read_commands_serve_the_store_when_no_server_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    active = await _make_store(store)
    nowhere = ["--nats-url", f"nats://127.0.0.1:{free_port()}", "--store", str(store)]
    code, out, err = await aios("checkpoints", *nowhere)
    assert code == 0, err
    assert f"active          {active}" in out and "update-1" in out
    code, out, err = await aios("campaign", "status", *nowhere)  # the newest campaign
    assert code == 0, err
    assert "campaign camp-1: finished" in out and "promote" in out
    # What its updates learned from: no gateway key written, so the gateway's default teacher.
    assert (
        "learns from: environment reward; teacher shaping: yes (oracle, which knows the "
        "answers); hint distillation: off" in out
    )
    code, out, err = await aios("campaign", "status", "camp-1", "--json", *nowhere)
    assert code == 0 and json.loads(out)["state"] == "finished", err
    assert json.loads(out)["learned_from"]["hint_distillation"] == "off"
    code, out, err = await aios("rail", "status", *nowhere)
    assert code == 0 and "no RAIL controller yet" in out, err
    code, _out, err = await aios("services", *nowhere)
    assert code == 1 and "no server is running" in err and f"store {store}" in err
    empty = ["--nats-url", nowhere[1], "--store", str(tmp_path / "empty")]
    for command in (["checkpoints"], ["campaign", "status"], ["rail", "status"]):
        code, _out, err = await aios(*command, *empty)
        assert code == 1 and err.count("\n") == 1, err
        assert "run `aios-rl demo` or `aios-rl train` first" in err


async def test_read_commands_use_the_server_running_on_the_store(tmp_path: Path) -> None:
    """Another command's embedded server on the store (a train in progress): read from it."""
    store = tmp_path / "store"
    active = await _make_store(store)
    auth = prepare(store, Names(""), [s.name for s in SERVICES])
    with NatsServer(store / "nats", config=auth.config):
        nowhere = ["--nats-url", f"nats://127.0.0.1:{free_port()}", "--store", str(store)]
        code, out, err = await aios("checkpoints", "--json", *nowhere)
        assert code == 0, err
        assert json.loads(out)["pointers"]["active"] == active
        code, out, err = await aios("services", "--json", *nowhere)
        assert code == 0 and json.loads(out) == [], err


def test_a_training_commands_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    from aios_rl.cli._common import print_campaign_json

    print_campaign_json(
        "c1",
        "finished",
        {"epochs": 2},
        {"checkpoint": "a", "success": 0.1},
        {"checkpoint": "b", "success": 0.4},
        [{"epoch": 0}, {"epoch": 1}],
        12.345,
        heldout_success_by_epoch={0: 0.2, 1: 0.4},
    )
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == [
        "campaign_id", "end", "spec", "before", "after", "heldout_success_by_epoch", "records",
        "seconds",
    ]  # fmt: skip
    assert doc["before"]["checkpoint"] == "a" and doc["after"]["checkpoint"] == "b"
    assert doc["heldout_success_by_epoch"] == {"0": 0.2, "1": 0.4} and doc["seconds"] == 12.3


def test_the_demo_is_smaller_with_a_language_model_student_unless_sizes_are_given() -> None:
    from aios_rl.cli.demo import DEMO, LM_DEMO, lm_sizes

    tiny = parse("demo")
    assert lm_sizes(tiny) == [] and tiny.epochs == DEMO["epochs"] == 4
    lm = parse("demo", "--student", "lm")
    assert lm_sizes(lm) == list(LM_DEMO)
    assert (lm.epochs, lm.heldout, lm.group_size) == (2, LM_DEMO["heldout"], 2)
    given = parse("demo", "--student", "lm", "--epochs", "4", "--heldout", "6")
    assert LM_DEMO["epochs"] < 4 and LM_DEMO["heldout"] < 6
    changed = lm_sizes(given)
    assert "epochs" not in changed and "heldout" not in changed and "group_size" in changed
    assert (given.epochs, given.heldout, given.tasks_per_epoch) == (
        4,
        6,
        LM_DEMO["tasks_per_epoch"],
    )


def test_config_shows_what_agent_cmd_gives_the_runner(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from .test_realrepo import run_cli

    argv = ["config", "--service", "shell-runner", "--json", "--store", str(tmp_path)]
    assert run_cli([*argv, "--agent-cmd", "python a.py", "--agent-name", "coder"]) == 0
    runner = json.loads(capsys.readouterr().out)["services"]["shell-runner"]
    assert runner["agent_cmd"] == {"value": "python a.py", "source": "flag --agent-cmd"}
    assert runner["agent_token"]["source"] == "stack"
    assert not (tmp_path / "auth").exists()  # no token is made to show the settings
