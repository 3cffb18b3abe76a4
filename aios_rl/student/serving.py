"""How a student answers one ``ActRequest``, written once: the sampler service serves it over the
bus, the in-process kernel (:mod:`aios_rl.local`) calls it directly. Pure (no NATS).

A request becomes a :class:`~aios_rl.student.base.Decision` under a
:class:`~aios_rl.student.base.Regime` (:func:`decision_for`: checked first, seeded by the
request's seed or one derived from its episode and step); the student's
:class:`~aios_rl.student.base.ActOutput` becomes the ``ActResponse`` (:func:`response_for`).
Whoever serves in between (a batch of many requests, or one call) changes nothing else, so the
same request, weights and seed give the same action on the stack and in-process.
"""

from __future__ import annotations

import math
import zlib

from contracts import ActRequest, ActResponse, DecodingRegime

from .base import ActOutput, Decision, Regime

__all__ = ["check_request", "decision_for", "derive_seed", "response_for"]


def derive_seed(episode_id: str, step: int, base: int = 0) -> int:
    """A seed fixed by (episode, step): a replayed episode samples the same actions."""
    return (zlib.crc32(f"{episode_id}:{step}".encode()) ^ (base * 0x9E3779B1)) & 0x7FFFFFFF


def check_request(
    candidates: list[str], regime: DecodingRegime, *, free_text: bool, backend: str
) -> None:
    """Raises ``ValueError`` with a sentence saying what is wrong when a request can never be
    answered: a temperature that is not a finite number > 0, a ``top_p`` outside (0, 1], or no
    candidates for a ``backend`` that cannot write free text. A vanishing temperature is fine
    (it acts greedily). Checked before a request joins a batch, so it fails alone."""
    if not (math.isfinite(regime.temperature) and regime.temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {regime.temperature}")
    if not 0 < regime.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {regime.top_p}")
    if not candidates and not free_text:
        raise ValueError(
            f"the {backend} student chooses among candidate actions and cannot write free text; "
            "this request offers no candidates"
        )


def decision_for(
    req: ActRequest, *, free_text: bool, backend: str, base_seed: int = 0
) -> tuple[Decision, Regime]:
    """The decision and regime a student acts on for ``req``. Raises ``ValueError`` (see
    :func:`check_request`) for a request that can never be answered."""
    check_request(req.candidates, req.regime, free_text=free_text, backend=backend)
    seed = req.seed if req.seed is not None else derive_seed(req.episode_id, req.step, base_seed)
    decision = Decision(req.observation, tuple(req.candidates), seed=seed)
    return decision, Regime(req.regime.temperature, req.regime.top_p)


def response_for(out: ActOutput, *, checkpoint_id: str, want_hidden: bool) -> ActResponse:
    """The reply for one decision the student made under ``checkpoint_id``."""
    return ActResponse(
        action=out.action,
        action_index=out.action_index,
        logprob=out.logprob,
        entropy=out.entropy,
        value=out.value,
        checkpoint_id=checkpoint_id,
        hidden=out.hidden if want_hidden else [],
        top1_prob=out.top1_prob,
        margin=out.margin,
        token_entropies=out.token_entropies,
        token_ids=out.token_ids,
        token_logprobs=out.token_logprobs,
    )
