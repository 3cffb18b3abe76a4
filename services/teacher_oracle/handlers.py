"""Oracle handlers: read the task's ground truth from the Object Store ``tasks``, judge."""

from __future__ import annotations

from collections import OrderedDict

from aios_rl.bus import Bus, PermanentError, ServiceError, get_logger
from aios_rl.envs.browser.store import BrowserTaskStore
from aios_rl.envs.registry import task_store
from aios_rl.envs.shell.store import ShellTaskStore
from aios_rl.state.tasks import CorruptTaskError, TaskStoreUnavailableError, UnknownTaskError
from contracts import (
    AgentBenchDbTask,
    AgentBenchOsTask,
    BrowserTask,
    Names,
    OrchestratorTask,
    ShellTask,
    TeacherRequest,
    TeacherSignal,
)

from .logic import (
    garble,
    judge,
    judge_agentbench,
    judge_browser,
    judge_orchestrator,
    not_judged,
)
from .settings import OracleSettings


class Oracle:
    """Answers ``teacher.request.oracle`` with judgements from ground truth (garbled at the
    settings' accuracy below 1: ``teacher.request.noisy-oracle``)."""

    def __init__(self, bus: Bus, settings: OracleSettings) -> None:
        self.bus = bus
        self.store = ShellTaskStore(bus)
        self.tasks: OrderedDict[str, ShellTask] = OrderedDict()
        self.browser_store = BrowserTaskStore(bus)
        self.browser_tasks: OrderedDict[str, BrowserTask] = OrderedDict()
        self.orchestrator_store = task_store(bus, "orchestrator")
        self.orchestrator_tasks: OrderedDict[str, OrchestratorTask] = OrderedDict()
        self.agentbench_stores = {
            env: task_store(bus, env) for env in ("agentbench_db", "agentbench_os")
        }
        self.agentbench_tasks: dict[str, OrderedDict[str, AgentBenchDbTask | AgentBenchOsTask]] = {
            env: OrderedDict() for env in self.agentbench_stores
        }
        self.capacity = settings.task_cache_size
        self.accuracy = settings.accuracy
        self.noise_seed = settings.noise_seed
        self.answered = 0
        self.missing_tasks = 0
        self.log = get_logger()

    async def browser_task(self, task_id: str) -> BrowserTask:
        """The browser task ``task_id`` (errors as :meth:`task`)."""
        return await self._load("browser", task_id, self.browser_store, self.browser_tasks)

    async def task(self, task_id: str) -> ShellTask:
        """The shell task ``task_id`` from the task store (decoded and checked once, then cached).

        Raises ``PermanentError`` for an id that cannot name a task or a stored task that is
        corrupt (does not decode, or does not match its id), ``ServiceError`` 404 when no such
        task is stored and 503 when the store is unreachable."""
        return await self._load("shell", task_id, self.store, self.tasks)

    async def _load(self, env: str, task_id: str, store, cache):  # type: ignore[no-untyped-def]
        """``task_id`` of ``env`` from ``store`` through ``cache`` (least recently used first)."""
        cached = cache.get(task_id)
        if cached is not None:
            cache.move_to_end(task_id)
            return cached
        try:
            Names.object_task(env, task_id)
        except ValueError as exc:  # not even a valid id: asking again cannot help
            raise PermanentError(str(exc)) from exc
        try:
            task = await store.get(task_id)
        except UnknownTaskError as exc:
            self.missing_tasks += 1
            raise ServiceError("404", f"no {env} task {task_id} in the tasks store") from exc
        except TaskStoreUnavailableError as exc:
            raise ServiceError("503", str(exc)) from exc
        except CorruptTaskError as exc:
            kind = store.kind.type.__name__
            raise PermanentError(f"stored task {task_id} is not a {kind}: {exc}") from exc
        cache[task_id] = task
        while len(cache) > self.capacity:
            cache.popitem(last=False)
        return task

    async def answer(self, req: TeacherRequest) -> TeacherSignal:
        """Endpoint handler: the oracle's signal for one request."""
        if req.environment == "shell":
            signal = judge(req, await self.task(req.task_id))
        elif req.environment == "browser":
            signal = judge_browser(req, await self.browser_task(req.task_id))
        elif req.environment == "orchestrator":
            task = await self._load(
                "orchestrator", req.task_id, self.orchestrator_store, self.orchestrator_tasks
            )
            signal = judge_orchestrator(req, task)
        elif req.environment in self.agentbench_stores:
            task = await self._load(
                req.environment,
                req.task_id,
                self.agentbench_stores[req.environment],
                self.agentbench_tasks[req.environment],
            )
            signal = judge_agentbench(req, task)
        else:
            signal = not_judged(
                req,
                f"the oracle holds ground truth for shell, browser, orchestrator and AgentBench "
                f"tasks, not {req.environment}",
            )
        if self.accuracy < 1.0:
            signal = garble(signal, req, accuracy=self.accuracy, seed=self.noise_seed)
        self.answered += 1
        self.log.debug(
            "oracle.answered",
            episode_id=req.episode_id,
            verdict=signal.verdict,
            score=signal.score,
            hints=len(signal.hints),
        )
        return signal

    def stats(self) -> dict[str, float]:
        return {
            "answered": float(self.answered),
            "cached_tasks": float(len(self.tasks)),
            "missing_tasks": float(self.missing_tasks),
        }
