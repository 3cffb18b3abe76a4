"""One campaign's RAIL controller: decides, learns from traces, promotes and demotes. No NATS
(the ``rail`` service stores what :meth:`Controller.state` and the scorers' bytes say; the
benchmarks drive it in one process).

- **Shadow**: the heuristic warm-up decides (the candidate state with the highest entropy, a
  budget that doubles round by round, a regime drawn among the allowed ones so traces cover
  them); the scorer predicts silently on every decision.
- **Promotion**: after each trace, over the ``window`` most recent traces whose prediction came
  from a fitted scorer (out of sample: fitted before the decision), promote when the lower Wilson
  bound of the sign agreement clears ``0.5 + margin``; a copy of the scorer is frozen then.
- **Live**: every feasible (state, action) is scored; the best branches if its predicted gain
  clears ``eta``, else no intervention; with probability ``exploration`` a random feasible pair
  is taken instead. Demoted back to shadow when the live agreement's upper bound falls below the
  bar.
- **Co-evolution**: the scorer refits every ``refit_every`` traces (not after promotion under
  ``freeze_after_promotion``); the frozen copy predicts beside it on every live decision, so
  online and frozen errors are measured on the same traces.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

import msgspec

from contracts import RailState
from contracts.rail import (
    RailDecideRequest,
    RailDecision,
    RailDecisions,
    RailSettings,
    RailTrace,
)

from .context import Action, actions, label
from .scorer import Scorer, action_features, agreement, demote, fit, gate, promote

__all__ = ["MAX_TRACES", "Controller"]

MAX_TRACES = 4096
"""Traces kept for fitting (the oldest go first; their recency weight is tiny by then)."""


class Controller:
    """The controller of one campaign."""

    def __init__(
        self,
        campaign_id: str,
        settings: RailSettings,
        *,
        seed: int = 0,
        state: RailState | None = None,
        online: bytes | None = None,
        frozen: bytes | None = None,
    ) -> None:
        self.campaign_id = campaign_id
        self.settings = settings
        self.seed = seed
        self.meta = state or RailState(campaign_id=campaign_id, eta=settings.eta)
        self.online = Scorer.from_bytes(online) if online else Scorer(seed=seed)
        self.frozen = Scorer.from_bytes(frozen) if frozen else None
        self.traces: list[RailTrace] = []
        self.seen: set[str] = set()
        self.order: dict[str, int] = {}
        """Decision id -> when it was learned from (1: the first trace)."""

    # -- deciding -----------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.meta.mode

    def decide(self, req: RailDecideRequest) -> RailDecisions:
        """At most one decision for the request's group this round (none when nothing is
        feasible)."""
        s = self.settings
        feasible = actions(s, req.budget_left, budget_only=req.budget_only)
        states = sorted(req.candidates, key=lambda c: -c.context[0])[: max(1, s.candidates)]
        if not feasible or not states:
            return RailDecisions(mode=self.meta.mode)
        rng = random.Random(f"{self.seed}:{req.campaign_id}:{req.epoch}:{req.group_id}:{req.round}")
        pairs = [(c, a) for c in states for a in feasible]
        fitted = self.meta.scorer_version > 0
        z = [c.context for c, _ in pairs]
        feats = [action_features(a.budget, a.regime) for _, a in pairs]
        online = self.online.predict(z, feats) if fitted else [0.0] * len(pairs)
        frozen = self.frozen.predict(z, feats) if self.frozen is not None else None
        decision_id = f"{req.group_id}-r{req.round}"
        if self.meta.mode == "live":
            if rng.random() < s.exploration:  # keeps traces of other actions flowing
                i, branch = rng.randrange(len(pairs)), True
            else:
                i = max(range(len(pairs)), key=lambda j: (online[j], -j))
                branch = gate(online[i], s.eta)
            decided_by = "rail"
        else:
            c = states[0]  # the highest entropy
            cap = 2 ** max(0, req.round - 1)
            budgets = sorted({a.budget for a in feasible})
            budget = max((b for b in budgets if b <= cap), default=budgets[0])
            regimes = [a.regime for a in feasible if a.budget == budget]
            action = Action(budget, regimes[rng.randrange(len(regimes))])
            i = next(j for j, (cj, aj) in enumerate(pairs) if cj is c and aj == action)
            branch, decided_by = True, "heuristic"
        c, a = pairs[i]
        decision = RailDecision(
            decision_id=decision_id,
            branch=branch,
            episode_id=c.episode_id,
            step=c.step,
            budget=a.budget if branch else 0,
            regime=a.regime,
            context=list(c.context),
            predicted_gain=online[i],
            frozen_gain=frozen[i] if frozen is not None else None,
            fitted=fitted,
            mode=self.meta.mode,  # type: ignore[arg-type]
            decided_by=decided_by,  # type: ignore[arg-type]
            scorer_version=self.meta.scorer_version,
        )
        self._count(req.environment, label(decision.budget, a.regime) if branch else "0")
        return RailDecisions(decisions=[decision], mode=self.meta.mode)  # type: ignore[arg-type]

    def _count(self, env: str, action: str) -> None:
        hist = {k: dict(v) for k, v in self.meta.actions.items()}
        row = hist.setdefault(env, {})
        row[action] = row.get(action, 0) + 1
        self.meta = msgspec.structs.replace(self.meta, actions=hist)

    # -- learning -----------------------------------------------------------------------------------
    def restore(self, traces: Iterable[RailTrace]) -> None:
        """Take back the traces a restarted service reads from the stream (nothing refits,
        nothing is promoted: the stored state already says what they did)."""
        for t in traces:
            if t.decision_id not in self.seen:
                self.seen.add(t.decision_id)
                self.traces.append(t)
                self.order[t.decision_id] = len(self.seen)
        del self.traces[:-MAX_TRACES]

    def observe(self, trace: RailTrace) -> tuple[bool, bool]:
        """Learn from one trace: (whether it was new, whether the scorer was refitted). Checks
        promotion / demotion, then refits on schedule."""
        if trace.decision_id in self.seen:
            return False, False
        self.seen.add(trace.decision_id)
        self.traces.append(trace)
        del self.traces[:-MAX_TRACES]
        m = msgspec.structs.replace(self.meta, traces_seen=self.meta.traces_seen + 1)
        self.order[trace.decision_id] = m.traces_seen
        s = self.settings
        window = [t for t in self.traces if t.fitted][-s.window :]
        k, n = agreement([t.predicted_gain for t in window], [t.realized_gain for t in window])
        m = msgspec.structs.replace(m, sign_agreement=k / n if n else 0.0)
        bar = {"min_traces": s.min_traces, "margin": s.margin, "z": s.z}
        if m.mode == "shadow" and promote(k, n, **bar):
            self.frozen = self.online.copy()
            m = msgspec.structs.replace(
                m, mode="live", promotions=m.promotions + 1, promoted_at=m.traces_seen
            )
        elif m.mode == "live":
            # Only the decisions of this promotion: those of an earlier one judged a scorer
            # that has been refitted and promoted again since.
            live = [
                t
                for t in self.traces
                if t.mode == "live"
                and t.fitted
                and self.order.get(t.decision_id, 0) > m.promoted_at
            ][-s.window :]
            lk, ln = agreement([t.predicted_gain for t in live], [t.realized_gain for t in live])
            if demote(lk, ln, **bar):
                m = msgspec.structs.replace(m, mode="shadow", demotions=m.demotions + 1)
        self.meta = self._measured(m)
        refit = m.traces_seen - m.fitted_at >= s.refit_every and not (
            m.mode == "live" and s.freeze_after_promotion
        )
        if refit:
            self.refit()
        self.meta = msgspec.structs.replace(self.meta, updated_at=time.time())
        return True, refit

    def refit(self) -> None:
        """Fit the online scorer on every kept trace (recency-weighted); one version more."""
        s = self.settings
        version = self.meta.scorer_version + 1
        fit(
            self.online,
            [t.context for t in self.traces],
            [action_features(t.budget, t.regime) for t in self.traces],
            [t.realized_gain for t in self.traces],
            half_life=s.half_life,
            steps=s.fit_steps,
            seed=self.seed * 1000 + version,
            weight_decay=s.weight_decay,
        )
        self.meta = msgspec.structs.replace(
            self.meta, scorer_version=version, fitted_at=self.meta.traces_seen
        )

    def _measured(self, m: RailState) -> RailState:
        """``m`` with the online-vs-frozen errors and agreements on the live traces."""
        live = [t for t in self.traces if t.mode == "live" and t.frozen_gain is not None]
        if not live:
            return msgspec.structs.replace(m, live_traces=0)
        ys = [t.realized_gain for t in live]
        on = [t.predicted_gain for t in live]
        fr = [t.frozen_gain or 0.0 for t in live]
        mae = lambda p: sum(abs(a - b) for a, b in zip(p, ys, strict=True)) / len(ys)  # noqa: E731
        return msgspec.structs.replace(
            m,
            live_traces=len(live),
            mae_online=mae(on),
            mae_frozen=mae(fr),
            agreement_online=agreement(on, ys)[0] / len(ys),
            agreement_frozen=agreement(fr, ys)[0] / len(ys),
        )

    # -- what is stored -----------------------------------------------------------------------------
    def state(self) -> RailState:
        return self.meta

    def weights(self) -> bytes:
        return self.online.to_bytes()

    def frozen_weights(self) -> bytes | None:
        return self.frozen.to_bytes() if self.frozen is not None else None
