"""Browser tasks in the Object Store ``tasks``, through the one task store
(:mod:`aios_rl.state.tasks`): a task's id is its content address (:func:`browser_task_id`),
checked on every put and get; each split's index keeps the order ids were added in."""

from __future__ import annotations

from aios_rl.bus import Bus
from contracts import BrowserTask

from ...state.tasks import TaskKind, TaskStore
from .flows import browser_task_id

__all__ = ["BROWSER_TASKS", "BrowserTaskStore", "browser_task_id"]

ENVIRONMENT = "browser"

BROWSER_TASKS = TaskKind(ENVIRONMENT, BrowserTask, browser_task_id)
"""Browser tasks as the task store knows them."""


class BrowserTaskStore(TaskStore[BrowserTask]):
    """Browser tasks in the stack's ``tasks`` Object Store (under ``bus.names``, provisioned)."""

    def __init__(self, bus: Bus) -> None:
        super().__init__(bus, BROWSER_TASKS)
