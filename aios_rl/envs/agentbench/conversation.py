"""What the AgentBench environments share: an episode is a conversation."""

from __future__ import annotations

__all__ = ["Conversation"]


class Conversation:
    """The conversation so far is the observation (its last ``chars`` characters when longer,
    marked); no candidates are offered (the policy writes free text); the episode is done once
    the judge has a verdict."""

    def __init__(self, turns: list[str], chars: int) -> None:
        self.turns = turns
        self.chars = chars
        self.verdict: bool | None = None

    @property
    def observation(self) -> str:
        text = "\n\n".join(self.turns)
        return text if len(text) <= self.chars else "[...]\n" + text[-self.chars :]

    @property
    def candidates(self) -> list[str]:
        return []

    @property
    def done(self) -> bool:
        return self.verdict is not None
