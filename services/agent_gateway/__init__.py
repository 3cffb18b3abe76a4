"""``agent-gateway``: an OpenAI-compatible endpoint (``/v1/chat/completions``, ``/v1/models``)
in front of the student, for agents users already have; every completion of an episode recorded
as it was served."""

__version__ = "0.1.0"
