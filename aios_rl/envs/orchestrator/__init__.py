"""The orchestrator environment: whole orchestrated runs over work items with hidden attributes
(:mod:`.sim`), their evidence as text (:mod:`.render`), tasks split honestly (:mod:`.tasks`),
checkpoints from other environments' episodes (:mod:`.ledger`), users' logs (:mod:`.importer`)."""

from .tasks import generate, task_id_of

__all__ = ["generate", "task_id_of"]
