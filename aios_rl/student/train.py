"""One policy update, top to bottom: episodes in, a better student out.

``build_batch`` turns episodes into samples (pure); ``update`` runs GRPO or PPO on them with
optional KL to a reference policy, imitation of the student's own good episodes (the positive
replay lane), distillation toward teacher hints (off unless ``distill_coef`` is set: the
student then learns from reward alone) and KL regularisation on negative-lane states. Same seed
and data give bit-identical weights.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from contracts import EnvironmentRecipe, Episode, TrainerSettings, TrajectoryStep

from .base import Decision, StudentBackend, StudentError
from .losses import (
    MAX_LOG_RATIO,
    aggregate,
    aggregate_part,
    clipped_surrogate,
    clipped_value_loss,
    gae,
    group_advantages,
    kl_penalty,
)

__all__ = [
    "Batch",
    "DivergedError",
    "EmptyBatchError",
    "OptimizerMemory",
    "Sample",
    "UpdateConfig",
    "build_batch",
    "recipe_for",
    "train_step",
    "update",
    "update_config",
]


@dataclass(frozen=True)
class UpdateConfig:
    """How one update learns."""

    algorithm: Literal["grpo", "ppo"] = "grpo"
    """GRPO: group-relative advantages, no critic. PPO: GAE with the value head."""
    learning_rate: float = 3e-3
    """Adam step size."""
    update_epochs: int = 4
    """Passes over the batch."""
    minibatch_size: int = 64
    """Samples per gradient step."""
    micro_batch_size: int = 0
    """Decisions per forward and backward pass within a step (gradients accumulated: the
    step's gradient is the whole minibatch's); 0: the backend's own ``micro_batch_size`` (a
    language model's: 4), or the whole minibatch at once."""
    clip_low: float = 0.2
    """Ratio clip below 1 (``1 - clip_low``)."""
    clip_high: float = 0.28
    """Ratio clip above 1 (``1 + clip_high``; DAPO's clip-higher)."""
    aggregation: Literal["token", "action"] = "token"
    """Average the loss over all tokens of the batch, or per action first."""
    std_normalize: bool = True
    """GRPO: divide group-centred rewards by the group's std (False: Dr. GRPO)."""
    env_normalize: bool = False
    """Mixed campaigns: scale each environment's policy samples' advantages to unit root mean
    square (AgentRL's per-task advantage normalisation), so an environment whose groups mostly
    tie, or whose rewards are small, still weighs as much in the update as the others. Scaled,
    never re-centred: a tied group's zero stays zero. PPO: normalised per environment instead
    of over the whole batch."""
    kl_coef: float = 0.0
    """Weight of KL(pi || reference) on the policy samples."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Estimator of that KL from sampled actions."""
    entropy_coef: float = 0.0
    """Entropy bonus."""
    value_coef: float = 0.5
    """PPO: weight of the value loss."""
    value_clip: float = 0.2
    """PPO: clip range of the value update."""
    gamma: float = 1.0
    """PPO: discount."""
    gae_lambda: float = 0.95
    """PPO: GAE lambda."""
    imitation_coef: float = 0.5
    """Weight of cross-entropy toward the actions of positive-lane episodes (the student's own
    best episodes from replay: learning from reward)."""
    distill_coef: float = 0.0
    """Weight of cross-entropy toward teacher hints (distillation); 0, the default: hints are
    not learned from (and not even collected into the batch)."""
    negative_kl_coef: float = 0.1
    """Weight of KL(pi || reference) on negative-lane states."""
    self_imitation: bool = False
    """Also imitate (weight ``imitation_coef``) this update's own fresh episodes that
    succeeded, as the environment judged them: behaviour cloning filtered by reward (RAFT,
    self-imitation learning), less their steps whose measured progress was negative (a step
    that went backwards or changed nothing is not worth copying). A reward signal, not a
    teacher's."""
    progress_coef: float = 0.0
    """Step-level credit: each step's advantage gets this times the progress the environment
    measured for it (``TrajectoryStep.progress``; GRPO: added to the episode's group-relative
    advantage; PPO: added to that step's reward). 0: every step of an episode shares its
    episode's credit."""
    by_environment: Mapping[str, EnvironmentRecipe] = field(default_factory=dict)
    """Per environment, what replaces ``self_imitation`` and ``progress_coef`` for its
    episodes (a field left ``None`` keeps this config's)."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    is_cap: float = 2.0
    """Token-level samples: cap of the importance weight ``exp(logp_old - logp_rollout)``
    (0: no correction)."""
    seed: int = 0
    """Seeds minibatch order (and so the result)."""


@dataclass(frozen=True)
class Sample:
    """One decision to learn from by policy gradient."""

    decision: Decision
    action_index: int | str | tuple[int, ...]
    """The candidate's index, the free-text action, or the token ids the sampler wrote."""
    logp_old: float
    advantage: float = 0.0
    ret: float = 0.0
    value_old: float = 0.0
    rollout_logps: tuple[float, ...] = ()
    """Token-level: the sampler's log-prob of each of ``action_index``'s token ids."""

    @property
    def token_level(self) -> bool:
        return bool(self.rollout_logps) and isinstance(self.action_index, tuple)


Action = int | str | tuple[int, ...]


@dataclass
class Batch:
    """Everything one update learns from."""

    policy: list[Sample] = field(default_factory=list)
    imitate: list[tuple[Decision, Action]] = field(default_factory=list)
    """Positive-lane decisions and the action taken (the student's own good episodes)."""
    distill: list[tuple[Decision, Action]] = field(default_factory=list)
    """Teacher hints: each hinted step's decision and the action the teacher named."""
    negative: list[Decision] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.policy) + len(self.imitate) + len(self.distill) + len(self.negative)


def _decisions(
    ep: Episode, *, free_text: bool = False
) -> list[tuple[int, Decision, Action, float, float]]:
    """(step index, decision, action, logp, value) of the policy's own steps. The action is the
    candidate's index, or, with ``free_text``, for a step that offered no candidates, the token
    ids the sampler wrote (when it reported them with their log-probs) or else the text."""
    out: list[tuple[int, Decision, Action, float, float]] = []
    for step in ep.trajectory:
        if step.replayed:
            continue
        action: Action | None
        if not step.candidates:
            action = None
            if free_text and _token_level(step):
                action = tuple(step.token_ids)
            elif free_text and step.action:
                action = step.action
        elif step.action_index is not None:
            action = step.action_index
        else:
            action = step.candidates.index(step.action) if step.action in step.candidates else None
        if action is None:
            continue
        out.append(
            (
                step.index,
                Decision(
                    step.observation, tuple(step.candidates), prompt_ids=tuple(step.prompt_ids)
                ),
                action,
                step.logprob,
                step.value or 0.0,
            )
        )
    return out


def _token_level(step: TrajectoryStep) -> bool:
    return bool(step.token_ids) and len(step.token_ids) == len(step.token_logprobs)


def _rollout_logps(ep: Episode) -> dict[int, tuple[float, ...]]:
    return {s.index: tuple(s.token_logprobs) for s in ep.trajectory if _token_level(s)}


def _reward(ep: Episode) -> float:
    return ep.reward if ep.reward is not None else ep.env_reward


def build_batch(
    episodes: Sequence[Episode],
    *,
    config: UpdateConfig,
    positive: Sequence[Episode] = (),
    negative: Sequence[Episode] = (),
    free_text: bool = False,
) -> Batch:
    """Samples from fresh ``episodes`` (policy gradient), ``positive`` (imitation), teacher
    hints (distillation; only when ``config.distill_coef`` is above 0) and ``negative`` (KL
    states). With ``free_text`` (a backend that writes its own actions), steps without
    candidates are learned from too; KL states need candidates. Pure."""
    batch = Batch()
    if config.algorithm == "grpo":
        rewards = torch.tensor([_reward(e) for e in episodes], dtype=torch.float64)
        adv = group_advantages(
            rewards,
            [e.group_id or e.episode_id for e in episodes],
            std_normalize=config.std_normalize,
        )
        envs: list[str] = []
        for ep, a in zip(episodes, adv.tolist(), strict=True):
            rollout = _rollout_logps(ep)
            progress = _progress(ep, recipe_for(config, ep.environment)[1])
            for i, d, idx, logp, _v in _decisions(ep, free_text=free_text):
                batch.policy.append(
                    Sample(
                        d,
                        idx,
                        logp,
                        advantage=a + progress.get(i, 0.0),
                        rollout_logps=_own(idx, rollout, i),
                    )
                )
                envs.append(ep.environment)
        if config.env_normalize:
            batch.policy = _per_environment(batch.policy, envs, centre=False)
    else:
        samples: list[Sample] = []
        envs = []
        for ep in episodes:
            steps = _decisions(ep, free_text=free_text)
            if not steps:
                continue
            progress = _progress(ep, recipe_for(config, ep.environment)[1])
            rewards = torch.tensor([progress.get(i, 0.0) for i, *_ in steps], dtype=torch.float64)
            rewards[-1] += _reward(ep)
            values = torch.tensor([v for *_, v in steps], dtype=torch.float64)
            adv, ret = gae(rewards, values, gamma=config.gamma, lam=config.gae_lambda)
            rollout = _rollout_logps(ep)
            for (i, d, idx, logp, v), a, r in zip(steps, adv.tolist(), ret.tolist(), strict=True):
                samples.append(
                    Sample(
                        d,
                        idx,
                        logp,
                        advantage=a,
                        ret=r,
                        value_old=v,
                        rollout_logps=_own(idx, rollout, i),
                    )
                )
                envs.append(ep.environment)
        if config.env_normalize:
            samples = _per_environment(samples, envs, centre=True)
        elif len(samples) > 1:
            a = torch.tensor([s.advantage for s in samples])
            a = (a - a.mean()) / (a.std() + 1e-8)
            samples = [
                dataclasses.replace(s, advantage=float(x))
                for s, x in zip(samples, a.tolist(), strict=True)
            ]
        batch.policy = samples
    own = [e for e in episodes if e.outcome == "success" and recipe_for(config, e.environment)[0]]
    for ep in positive:
        batch.imitate.extend((d, idx) for _, d, idx, _, _ in _decisions(ep, free_text=free_text))
    for ep in own:  # less the steps the environment measured as going backwards or wasted
        backwards = {s.index for s in ep.trajectory if s.progress < 0}
        batch.imitate.extend(
            (d, idx)
            for i, d, idx, _, _ in _decisions(ep, free_text=free_text)
            if i not in backwards
        )
    hinted = list(episodes) + list(positive) + list(negative) if config.distill_coef > 0 else []
    for ep in hinted:
        signal = ep.teacher_signal
        if signal is None or signal.status != "ok" or signal.boundary:
            continue
        by_index = {s.index: s for s in ep.trajectory}
        for hint in signal.hints:
            step = by_index.get(hint.step)
            if step is None or step.replayed:  # a parent's step, replayed: learnt from there
                continue
            if hint.better_action and hint.better_action in step.candidates:
                batch.distill.append(
                    (
                        Decision(step.observation, tuple(step.candidates)),
                        step.candidates.index(hint.better_action),
                    )
                )
    for ep in negative:
        batch.negative.extend(d for _, d, _, _, _ in _decisions(ep))
    return batch


def _per_environment(samples: list[Sample], envs: list[str], *, centre: bool) -> list[Sample]:
    """``samples``' advantages normalised within each environment (``envs``: each sample's):
    centred and divided by the std (``centre``), or divided by the root mean square. An
    environment whose advantages are all 0 is left as it is."""
    out = list(samples)
    for env in sorted(set(envs)):
        rows = [i for i, e in enumerate(envs) if e == env]
        a = torch.tensor([samples[i].advantage for i in rows], dtype=torch.float64)
        if centre:
            if len(rows) < 2:
                continue
            a = a - a.mean()
            scale = float(a.std())
        else:
            scale = float(a.pow(2).mean().sqrt())
        if scale <= 1e-12:
            continue
        for i, x in zip(rows, (a / scale).tolist(), strict=True):
            out[i] = dataclasses.replace(samples[i], advantage=float(x))
    return out


def recipe_for(config: UpdateConfig, environment: str) -> tuple[bool, float]:
    """``(self_imitation, progress_coef)`` for ``environment``'s episodes: its own recipe's
    fields where set (``config.by_environment``), else the config's. Pure."""
    own = config.by_environment.get(environment) or EnvironmentRecipe()
    return (
        config.self_imitation if own.self_imitation is None else own.self_imitation,
        config.progress_coef if own.progress_coef is None else own.progress_coef,
    )


def _progress(ep: Episode, coef: float) -> dict[int, float]:
    """``coef`` times each step's progress, by step index (empty when ``coef`` is 0)."""
    if coef == 0:
        return {}
    return {s.index: coef * s.progress for s in ep.trajectory if s.progress}


def _own(action: Action, rollout: dict[int, tuple[float, ...]], index: int) -> tuple[float, ...]:
    return rollout.get(index, ()) if isinstance(action, tuple) else ()


def _proximal(model: StudentBackend, samples: list[Sample], chunk: int) -> list[torch.Tensor]:
    """Each token-level sample's per-token log-probs under the weights before the update."""
    out: list[torch.Tensor] = []
    with torch.no_grad():
        for k in range(0, len(samples), chunk):
            part = samples[k : k + chunk]
            ev = model.evaluate([s.decision for s in part], [s.action_index for s in part])
            out.extend(ev.logprobs[i][ev.mask[i]].float() for i in range(len(part)))
    return out


def _token_terms(
    pol: list[Sample], ev: Any, proximal: dict[int, torch.Tensor], ids: list[int], is_cap: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token current log-probs, old log-probs, importance weights and the rollout ratio
    ``exp(logp_old - logp_rollout)`` (``[N, T]``): token-level samples token by token; the
    others with their action's log-prob shared by its tokens, weight 1."""
    logp_tok = ev.logprobs
    summed = torch.where(ev.mask, logp_tok, torch.zeros_like(logp_tok)).sum(-1, keepdim=True)
    logp = torch.where(
        torch.tensor([s.token_level for s in pol]).unsqueeze(1),
        logp_tok,
        summed.expand_as(logp_tok),
    )
    old = torch.tensor([[s.logp_old] for s in pol]).expand_as(logp_tok).clone()
    weight = torch.ones_like(logp_tok)
    ratio = torch.ones_like(logp_tok)
    for row, (s, key) in enumerate(zip(pol, ids, strict=True)):
        if not s.token_level:
            continue
        n = int(ev.mask[row].sum())
        rollout = torch.tensor(s.rollout_logps, dtype=torch.float32)
        if n != len(rollout):
            raise StudentError(
                f"a sample's {len(rollout)} rollout log-probs do not match its {n} tokens"
            )
        prox = proximal[key] if key in proximal else logp_tok[row][ev.mask[row]].detach()
        cols = ev.mask[row].nonzero().squeeze(-1)
        old[row, cols] = prox
        r = torch.exp(torch.clamp(prox - rollout, -MAX_LOG_RATIO, MAX_LOG_RATIO))
        ratio[row, cols] = r
        weight[row, cols] = torch.clamp(r, max=is_cap) if is_cap > 0 else 1.0
    return logp, old, weight, ratio


class _Step:
    """One gradient step's loss, taken in micro-batches of at most ``micro`` decisions (0: all
    at once). A lane of one micro-batch adds its loss to :attr:`pending` (backward once, at
    :meth:`finish`: the whole-minibatch computation exactly); a lane of several runs backward
    after each, its terms divided by the whole minibatch's token and action counts, so the
    gradients add up to the whole minibatch's while only one micro-batch's activations are
    held. Metrics are the minibatch's, whichever way it was taken."""

    def __init__(self, micro: int) -> None:
        self.micro = micro
        self.pending = torch.zeros(())
        self.total = 0.0
        self.backward = False
        self.sums: dict[str, float] = {}
        self.maxima: dict[str, float] = {}

    def parts(self, n: int) -> list[range]:
        size = self.micro if self.micro > 0 else n
        return [range(i, min(n, i + size)) for i in range(0, n, size)]

    def add(self, loss: torch.Tensor, alone: bool) -> None:
        """A micro-batch's loss: kept for one backward (``alone``: the lane's only one), or
        backpropagated now (its graph, and the activations with it, freed)."""
        self.total += float(loss.detach())
        if not loss.requires_grad:
            return
        if alone:
            self.pending = self.pending + loss
        else:
            loss.backward()
            self.backward = True

    def note(self, name: str, value: torch.Tensor | float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(value)

    def note_max(self, name: str, value: torch.Tensor | float) -> None:
        self.maxima[name] = max(self.maxima.get(name, -math.inf), float(value))

    def finish(self) -> bool:
        """Backward of the pending loss; whether any gradient was made."""
        if self.pending.requires_grad:
            self.pending.backward()
            self.backward = True
        return self.backward

    def logged(self) -> dict[str, float]:
        out = {k: v for k, v in self.sums.items() if not k.startswith("_")}
        if "_ratio_count" in self.sums:
            n = max(self.sums["_ratio_count"], 1.0)
            out["rollout_ratio_mean"] = self.sums["_ratio_sum"] / n
            out["is_truncated_fraction"] = self.sums["_truncated"] / n
            out["rollout_ratio_max"] = self.maxima["rollout_ratio_max"]
        return out


def _token_counts(model: StudentBackend, decisions: list[Decision], actions: list[Action]) -> int:
    """Tokens of the given actions, all together (the denominator of ``token`` aggregation
    across micro-batches): the backend's ``action_token_counts`` when it has one (a language
    model), else one per action (a candidate scorer)."""
    counts = getattr(model, "action_token_counts", None)
    return sum(counts(decisions, actions)) if counts is not None else len(actions)


def _policy_lane(
    model: StudentBackend,
    reference: StudentBackend | None,
    pol: list[Sample],
    pol_ids: list[int],
    proximal: dict[int, torch.Tensor],
    config: UpdateConfig,
    step: _Step,
) -> None:
    """The policy-gradient samples of one step: clipped surrogate (token-level samples weighted
    for the sampler-trainer gap), entropy bonus, KL to ``reference``, PPO's value loss."""
    parts = step.parts(len(pol))
    alone = len(parts) == 1
    tokens = (
        None
        if alone
        else _token_counts(model, [s.decision for s in pol], [s.action_index for s in pol])
    )
    for part in parts:
        sub = [pol[j] for j in part]
        ev = model.evaluate([s.decision for s in sub], [s.action_index for s in sub])
        adv = torch.tensor([[s.advantage] for s in sub])
        # See the module docstring: the action's ratio for a candidate, the token's for
        # token-level samples (weighted for the sampler-trainer gap).
        logp, logp_old, weight, rollout_ratio = _token_terms(
            sub, ev, proximal, [pol_ids[j] for j in part], config.is_cap
        )
        per_token, clipped = clipped_surrogate(
            logp, logp_old, adv, clip_low=config.clip_low, clip_high=config.clip_high
        )
        n_tok = tokens if tokens is not None else max(int(ev.mask.sum()), 1)
        share = len(sub) / len(pol)
        if alone:
            pg = aggregate(weight * per_token, ev.mask, config.aggregation)
            entropy = ev.entropy.mean()
        else:
            pg = aggregate_part(weight * per_token, ev.mask, config.aggregation, n_tok, len(pol))
            entropy = ev.entropy.sum() / len(pol)
        tok = ev.mask & torch.tensor([s.token_level for s in sub]).unsqueeze(1)
        if bool(tok.any()):
            step.note("_ratio_sum", rollout_ratio[tok].sum())
            step.note("_ratio_count", tok.sum())
            step.note_max("rollout_ratio_max", rollout_ratio[tok].max())
            step.note(
                "_truncated",
                (rollout_ratio[tok] > config.is_cap).sum() if config.is_cap > 0 else 0.0,
            )
            step.note("token_level_tokens", tok.sum())
        loss = pg - config.entropy_coef * entropy
        step.note("pg_loss", pg.detach())
        step.note("entropy", entropy.detach())
        step.note("clip_fraction", clipped[ev.mask].float().sum() / n_tok)
        step.note("approx_kl_old", (logp_old - logp)[ev.mask].detach().sum() / n_tok)
        if reference is not None and config.kl_coef > 0:
            with torch.no_grad():
                ref = reference.evaluate([s.decision for s in sub], [s.action_index for s in sub])
            per = kl_penalty(ev.logprobs, ref.logprobs, config.kl_estimator)
            kl = (
                aggregate(per, ev.mask, config.aggregation)
                if alone
                else aggregate_part(per, ev.mask, config.aggregation, n_tok, len(pol))
            )
            loss = loss + config.kl_coef * kl
            step.note("kl_ref", kl.detach())
        if config.algorithm == "ppo":
            vl = clipped_value_loss(
                ev.values,
                torch.tensor([s.value_old for s in sub]),
                torch.tensor([s.ret for s in sub]),
                clip=config.value_clip,
            )
            vl = vl if alone else vl * share
            loss = loss + config.value_coef * vl
            step.note("value_loss", vl.detach())
        step.add(loss, alone)


def _cross_entropy_lane(
    model: StudentBackend,
    items: list[tuple[Decision, Action]],
    coef: float,
    config: UpdateConfig,
    step: _Step,
    name: str,
) -> None:
    """Cross-entropy toward the given actions (imitation of the positive lane, distillation of
    teacher hints), weighted by ``coef``."""
    parts = step.parts(len(items))
    alone = len(parts) == 1
    tokens = None if alone else _token_counts(model, [d for d, _ in items], [a for _, a in items])
    for part in parts:
        sub = [items[j] for j in part]
        ev = model.evaluate([d for d, _ in sub], [a for _, a in sub])
        if alone:
            ce = -aggregate(ev.logprobs, ev.mask, config.aggregation)
        else:
            assert tokens is not None
            ce = -aggregate_part(ev.logprobs, ev.mask, config.aggregation, tokens, len(items))
        step.note(name, ce.detach())
        step.add(coef * ce, alone)


def _negative_lane(
    model: StudentBackend,
    reference: StudentBackend,
    neg: list[Decision],
    config: UpdateConfig,
    step: _Step,
) -> None:
    """KL(pi || reference) over the full candidate distributions of negative-lane states."""
    parts = step.parts(len(neg))
    alone = len(parts) == 1
    for part in parts:
        sub = [neg[j] for j in part]
        zeros = [0] * len(sub)
        ev = model.evaluate(sub, zeros)
        with torch.no_grad():
            ref = reference.evaluate(sub, zeros)
        nkl = _exact_kl(ev.candidate_logprobs, ref.candidate_logprobs)
        nkl = nkl if alone else nkl * (len(sub) / len(neg))
        step.note("negative_kl", nkl.detach())
        step.add(config.negative_kl_coef * nkl, alone)


def _exact_kl(rows: list[torch.Tensor], ref_rows: list[torch.Tensor]) -> torch.Tensor:
    """Mean KL(pi || ref) over full candidate distributions."""
    kls = []
    for r, q in zip(rows, ref_rows, strict=True):
        p = r.exp()
        # 0 * log(0) is 0; a reference that gives no mass where pi does is clamped, not infinite.
        kls.append(torch.where(p > 0, p * (r - q.clamp(min=-1e4)), torch.zeros_like(p)).sum())
    return torch.stack(kls).mean()


def _slice(items: list, perm: list[int], k: int, parts: int) -> list:
    """The ``k``-th of ``parts`` minibatches of ``items`` in ``perm`` order."""
    if not items:
        return []
    size = math.ceil(len(items) / parts)
    return [items[i] for i in perm[k * size : (k + 1) * size]]


@dataclass
class OptimizerMemory:
    """Adam's second moments carried from one update to the next, along one line of weights.

    A fresh Adam takes steps of about the learning rate in every weight a gradient touches,
    however small that gradient is (its first step is ``lr * sign(g)``): an update whose groups
    all tied, with only a little step-level credit to learn from, moves the policy as far
    as one that learnt something, and a run of such updates is a random walk. Adam's moments kept
    across updates (what a long-lived trainer does) scale each step by the gradients seen so far:
    a weak signal makes a small step. Only the scale is carried: each update's first moment
    starts at zero, so its direction is its own batch's. The moments belong to the weights they
    were computed on: an update that starts from other weights (a rollback, another replica's
    checkpoint) starts a fresh Adam."""

    state: dict[str, Any] | None = None
    """The optimiser's ``state_dict`` after the last update."""
    weights: str = ""
    """Digest of the trainable weights that update left (what the state belongs to)."""
    reused: int = 0
    """Updates that started from the kept moments."""

    def matches(self, model: StudentBackend) -> bool:
        return self.state is not None and self.weights == weights_digest(model)


def weights_digest(model: StudentBackend) -> str:
    """Digest of ``model``'s trainable weights."""
    h = hashlib.blake2b(digest_size=16)
    for p in model.parameters():
        if p.requires_grad:
            h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def update(
    model: StudentBackend,
    reference: StudentBackend | None,
    batch: Batch,
    config: UpdateConfig,
    *,
    memory: OptimizerMemory | None = None,
) -> dict[str, float]:
    """Train ``model`` in place on ``batch``; return metrics (losses, KL, entropy, clip fraction,
    grad norm). ``reference`` is the KL target (frozen). ``memory``: Adam's moments from the
    update that left these weights, used when they match and replaced by this update's
    (:class:`OptimizerMemory`); ``None``: a fresh Adam. Raises ``StudentError`` on an empty
    batch."""
    if len(batch) == 0:
        raise StudentError("nothing to learn from: the batch is empty")
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    warm = memory is not None and memory.matches(model)
    if warm:
        assert memory is not None and memory.state is not None
        optimizer.load_state_dict(memory.state)
        for group in optimizer.param_groups:
            group["lr"] = config.learning_rate
        # The direction is this update's own: the first moment starts at zero (carried, the
        # last update's direction would go on for a dozen steps whatever this batch says).
        for st in optimizer.state.values():
            if "exp_avg" in st:
                st["exp_avg"].zero_()
        memory.reused += 1
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}

    def log(name: str, value: torch.Tensor | float) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().item()
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1

    n_pol, n_imi, n_dis, n_neg = (
        len(batch.policy),
        len(batch.imitate),
        len(batch.distill),
        len(batch.negative),
    )
    total = max(n_pol, n_imi, n_dis, n_neg)
    steps_per_epoch = max(1, math.ceil(total / config.minibatch_size))
    # Token-level samples' proximal log-probs: recomputed before the first step moves the
    # weights, unless the update is a single step (then the step's own pass, detached, is it).
    token_rows = [i for i, s in enumerate(batch.policy) if s.token_level]
    proximal: dict[int, torch.Tensor] = {}
    if token_rows and (config.update_epochs > 1 or steps_per_epoch > 1):
        prox = _proximal(model, [batch.policy[i] for i in token_rows], config.minibatch_size)
        proximal = dict(zip(token_rows, prox, strict=True))
    if config.micro_batch_size < 0:
        raise StudentError(f"micro_batch_size must be >= 0, not {config.micro_batch_size}")
    micro = config.micro_batch_size or getattr(model, "micro_batch_size", 0)
    for _ in range(config.update_epochs):
        perms = [
            torch.randperm(n, generator=gen).tolist() if n else []
            for n in (n_pol, n_dis, n_neg, n_imi)
        ]
        for k in range(steps_per_epoch):
            pol_ids = _slice(list(range(n_pol)), perms[0], k, steps_per_epoch)
            pol = [batch.policy[i] for i in pol_ids]
            dis = _slice(batch.distill, perms[1], k, steps_per_epoch)
            neg = _slice(batch.negative, perms[2], k, steps_per_epoch)
            imi = _slice(batch.imitate, perms[3], k, steps_per_epoch)
            optimizer.zero_grad(set_to_none=True)
            step = _Step(micro)
            if pol:
                _policy_lane(model, reference, pol, pol_ids, proximal, config, step)
            if imi and config.imitation_coef > 0:
                _cross_entropy_lane(
                    model, imi, config.imitation_coef, config, step, "imitation_loss"
                )
            if dis and config.distill_coef > 0:
                _cross_entropy_lane(model, dis, config.distill_coef, config, step, "distill_loss")
            if neg and reference is not None and config.negative_kl_coef > 0:
                _negative_lane(model, reference, neg, config, step)
            made = step.finish()
            for name, value in step.logged().items():
                log(name, value)
            if not made:
                continue
            grad_norm = torch.nn.utils.clip_grad_norm_(
                list(model.parameters()), config.max_grad_norm
            )
            optimizer.step()
            log("loss", step.total)
            log("grad_norm", grad_norm)
    metrics = {k: sums[k] / counts[k] for k in sums}
    metrics["samples"] = float(n_pol + n_dis + n_neg)
    metrics["policy_samples"] = float(n_pol)
    if memory is not None:
        metrics["optimizer_warm"] = float(warm)
        memory.state = copy.deepcopy(optimizer.state_dict())
        memory.weights = weights_digest(model)
    return metrics


def update_config(s: TrainerSettings) -> UpdateConfig:
    """The update configuration for a campaign's trainer settings."""
    return UpdateConfig(
        algorithm=s.algorithm,
        learning_rate=s.learning_rate,
        update_epochs=s.update_epochs,
        minibatch_size=s.minibatch_size,
        micro_batch_size=s.micro_batch_size,
        clip_low=s.clip_low,
        clip_high=s.clip_high,
        aggregation=s.aggregation,
        std_normalize=s.std_normalize,
        env_normalize=s.env_normalize,
        kl_coef=s.kl_coef,
        kl_estimator=s.kl_estimator,
        entropy_coef=s.entropy_coef,
        imitation_coef=s.imitation_coef,
        distill_coef=s.distill_coef,
        negative_kl_coef=s.negative_kl_coef,
        progress_coef=s.progress_coef,
        self_imitation=s.self_imitation,
        by_environment=dict(s.by_environment),
        is_cap=s.is_cap,
        seed=s.seed,
    )


def reward_signal(episodes: Sequence[Episode]) -> dict[str, float]:
    """What an update's fresh episodes give policy gradient to learn from, before any pass:
    ``groups``; ``tied_group_share``, the share of groups (of two or more) whose rewards are all
    equal (GRPO gives them advantage 0: no gradient); ``reward_mean`` and ``reward_std`` over the
    episodes; ``group_reward_std``, the mean within-group spread (the contrast GRPO sees);
    ``hinted_share``, the share of episodes carrying a usable teacher hint (learned from only
    with distillation on); ``progress_step_share``, the share of the policy's steps the
    environment measured progress for (step-level credit with ``progress_coef``). Pure."""
    if not episodes:
        return {}
    by_group: dict[str, list[float]] = {}
    for e in episodes:
        by_group.setdefault(e.group_id or e.episode_id, []).append(_reward(e))
    real = [g for g in by_group.values() if len(g) > 1]
    rewards = torch.tensor([_reward(e) for e in episodes], dtype=torch.float64)
    moved = [bool(s.progress) for e in episodes for s in e.trajectory if not s.replayed]
    hinted = sum(
        1
        for e in episodes
        if e.teacher_signal is not None
        and e.teacher_signal.status == "ok"
        and not e.teacher_signal.boundary
        and any(h.better_action for h in e.teacher_signal.hints)
    )
    return {
        "groups": float(len(real)),
        "tied_group_share": (
            sum(max(g) - min(g) < 1e-9 for g in real) / len(real) if real else float("nan")
        ),
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
        "group_reward_std": (
            sum(float(torch.tensor(g).std(unbiased=False)) for g in real) / len(real)
            if real
            else float("nan")
        ),
        "hinted_share": hinted / len(episodes),
        "progress_step_share": (sum(moved) / len(moved) if moved else 0.0),
        **credit_by_kind(episodes),
    }


def action_kind(action: str) -> str:
    """A coarse kind of an action label, the same across tasks: an edit (``path:line: `old` ->
    `new```) is ``edit``; anything else its first word, lower-cased (``run``, ``submit``,
    ``click``, ``deploy``); empty text is ``none``. Pure."""
    if " -> " in action:
        return "edit"
    words = action.split(maxsplit=1)
    return words[0].lower().strip("`'\":.,") if words else "none"


def credit_by_kind(episodes: Sequence[Episode], *, top: int = 6) -> dict[str, float]:
    """Where policy gradient puts its credit, by the kind of action (:func:`action_kind`):
    ``steps_mean``, the policy's own steps per episode; for the ``top`` most frequent kinds,
    ``share:<kind>``, their share of those steps, and ``credit:<kind>``, the mean over their
    steps of the episode's reward minus its group's mean (GRPO's advantage before the std
    division, the same for every step of an episode): a kind whose credit is below 0 is what
    the update pushes down, on every task alike. Pure."""
    by_group: dict[str, list[float]] = {}
    for e in episodes:
        by_group.setdefault(e.group_id or e.episode_id, []).append(_reward(e))
    mean = {g: sum(r) / len(r) for g, r in by_group.items()}
    kinds: dict[str, list[float]] = {}
    steps = 0
    for e in episodes:
        centred = _reward(e) - mean[e.group_id or e.episode_id]
        for step in e.trajectory:
            if step.replayed:
                continue
            steps += 1
            kinds.setdefault(action_kind(step.action), []).append(centred)
    if not steps:
        return {}
    out = {"steps_mean": steps / len(episodes)}
    for kind, credit in sorted(kinds.items(), key=lambda kv: -len(kv[1]))[:top]:
        out[f"share:{kind}"] = len(credit) / steps
        out[f"credit:{kind}"] = sum(credit) / len(credit)
    return out


class EmptyBatchError(StudentError):
    """The episodes of an update gave nothing to learn from; the weights are unchanged."""


class DivergedError(StudentError):
    """An update left weights that are no longer finite (the model is unusable)."""


def train_step(
    model: StudentBackend,
    reference: StudentBackend | None,
    episodes: Sequence[Episode],
    config: UpdateConfig,
    *,
    positive: Sequence[Episode] = (),
    negative: Sequence[Episode] = (),
    memory: OptimizerMemory | None = None,
) -> tuple[dict[str, float], int]:
    """The trainer's one update, written once (the trainer service and the in-process kernel run
    it): fresh ``episodes`` (policy gradient), ``positive`` (imitation), teacher hints
    (distillation, when asked for) and ``negative`` (KL states) into a batch, one
    :func:`update` of ``model`` in place against ``reference`` (with Adam's moments from
    ``memory`` when they belong to these weights). Returns the update's finite
    metrics (with :func:`reward_signal` of the fresh episodes) and the batch's size.

    Raises ``EmptyBatchError`` when the episodes give no sample (nothing changed) and
    ``DivergedError`` when the weights are no longer finite afterwards."""
    batch = build_batch(
        episodes,
        config=config,
        positive=positive,
        negative=negative,
        free_text=getattr(model, "supports_free_text", False),
    )
    if len(batch) == 0:
        raise EmptyBatchError(f"no episodes to learn from ({len(episodes)} fresh rollouts)")
    metrics = {
        **reward_signal(episodes),
        **update(model, reference, batch, config, memory=memory),
    }
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise DivergedError(
            f"the weights are no longer finite (learning rate {config.learning_rate})"
        )
    return {k: v for k, v in metrics.items() if math.isfinite(v)}, len(batch)
