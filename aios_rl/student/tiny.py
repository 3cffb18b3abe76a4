"""``tiny``: a small torch student that scores (observation, candidate) pairs.

Text goes in as hashed character 3-grams and word uni/bi-grams (no vocabulary to download), through
a shared ``EmbeddingBag``, separate observation and candidate encoders, a pair scorer (policy
head) and a value head on the observation. Trains from scratch on a CPU in seconds.

With ``pair_features`` (on) the scorer also reads a few relational features of each candidate
against the task, the observation's first line (:func:`pair_features`: how much of the
candidate the task names, whether its quoted values are in it). Pooled bags of n-grams cannot
tell "the button the task names" from "a button": these features can, whatever the words are,
so what is learnt on one task carries to another with other words. Their scorer's last layer
starts at zero, so an untrained student acts exactly as one without them.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import re
from collections.abc import Sequence

import torch
from torch import nn

from .base import (
    ActOutput,
    Decision,
    Evaluation,
    Regime,
    StudentError,
    candidate_index,
    confidence,
)
from .features import hashed_ngrams

__all__ = ["TinyConfig", "TinyStudent", "kind_counts", "page_context", "sample_index"]


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Shape of the tiny student."""

    buckets: int = 1 << 15
    """Hash buckets for n-gram ids."""
    embed_dim: int = 64
    """Embedding width."""
    hidden_dim: int = 128
    """Encoder and scorer width."""
    summary_dim: int = 8
    """Length of the hidden-state summary given to RAIL."""
    seed: int = 0
    """Seed of the initial weights."""
    pair_features: bool = True
    """Score each candidate on its relational features against the task too
    (:func:`pair_features`). Checkpoints from before this setting load with it off."""
    named_values: bool = False
    """A sixth relational feature (:func:`named_value`): whether the task names the candidate's
    field right before the value it types (``city "Belfast"`` for ``fill [5] "Belfast"  #
    textbox "City"``). Off by default: measured on site flows first (``bench/learning_rl.py
    --levers``); checkpoints from before it load with it off."""
    page_context: bool = False
    """Eight more relational inputs (:func:`page_context`): the candidate's kind of action (click,
    fill, select, scroll down, scroll up, Enter, back) and whether any element the page offers to
    click is one the task names by its whole name. They are meant to let the scorer learn *when*
    to scroll or move on (nothing named here yet) rather than *what* to click: the steps the task
    does not name. Measured on site flows (``rl+action-kinds``), it did not carry to held-out
    templates. Off by default; checkpoints from before it load with it off."""
    kind_balance: bool = False
    """Each candidate's logit less the log of how many candidates of its kind
    (:data:`ACTION_KINDS`, the rest one kind) the decision offers: the policy picks a kind of
    action, then one of that kind. A form offers every quoted value in every textbox (80 fills
    beside one ``scroll down``), so without it a student that knows nothing types nearly every
    step and never explores the rest. A kind the decision offers once (``scroll down``,
    ``go back``, ``press Enter``) is never discounted, so a near-greedy untrained student with it
    on mostly scrolls, goes back or presses Enter. A fixed term: it changes the untrained policy
    (measure it with the same setting) and nothing to learn. Off by default; checkpoints keep
    it."""
    pair_gain: float = 5.0
    """What the relational head's score is multiplied by: its five inputs drive one score
    among the n-gram scorer's 2 M weights, and an optimiser step moves every weight by about
    the learning rate, so without a gain a few dozen updates leave it unheard."""


@functools.lru_cache(maxsize=65536)
def _ids(text: str, buckets: int) -> tuple[int, ...]:
    return tuple(hashed_ngrams(text, buckets))


_WORDS = re.compile(r"[a-z0-9_]{2,}")
_ELEMENT_ID = re.compile(r"\[\d+\]")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
PAIR_FEATURES = 5
"""Length of :func:`pair_features` (:func:`named_value` adds one with ``named_values``)."""


@functools.lru_cache(maxsize=4096)
def _task_words(task: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(task))


@functools.lru_cache(maxsize=65536)
def pair_features(task: str, candidate: str) -> tuple[float, ...]:
    """Relational features of ``candidate`` against ``task`` (an observation's first line),
    case-insensitive: the share of the candidate's words (two characters or more; element
    numbers like ``[3]`` left out) the task contains, log(1 + their count), whether any of its
    quoted values is in the task, whether all are (0 without quoted values), and, for a candidate
    with a value and a name (``fill [2] "alice"  # textbox "Username"``: first and last quoted),
    how near the task puts them: 1 / (1 + the fewest words between the value and a word of the
    name), 0 when either is not in the task."""
    task = task.lower()
    words = _WORDS.findall(_ELEMENT_ID.sub(" ", candidate.lower()))
    known = _task_words(task)
    hits = sum(w in known for w in words)
    quoted = [q.lower() for q in _QUOTED.findall(candidate) if q.strip()]
    found = [q in task for q in quoted]
    return (
        hits / len(words) if words else 0.0,
        math.log1p(hits),
        float(any(found)),
        float(bool(found) and all(found)),
        _nearness(task, quoted[0], quoted[-1]) if len(quoted) >= 2 else 0.0,
    )


@functools.lru_cache(maxsize=65536)
def named_value(task: str, candidate: str) -> float:
    """For a candidate with a value and a name (first and last quoted, as in
    ``fill [2] "alice"  # textbox "Username"``): the share of the name's words among the words the
    task puts before that value, quoted, since the quote before it (``the username "alice"``:
    1.0), the best over the value's quoted occurrences; 0 for other candidates, a value the task
    does not quote, or a name without words. Case-insensitive. Unlike the nearness of
    :func:`pair_features` it reads the task's order (a name belongs to the value after it) and
    whole quoted values (``"Leslie Dijkstra"`` is not inside ``"leslie.dijkstra@..."``)."""
    quoted = [q for q in _QUOTED.findall(candidate) if q.strip()]
    if len(quoted) < 2:
        return 0.0
    value, name = quoted[0].strip().lower(), set(_WORDS.findall(quoted[-1].lower()))
    if not name:
        return 0.0
    task = task.lower()
    best, since = 0.0, 0
    for m in _QUOTED.finditer(task):
        if m.group(1).strip() == value:
            label = set(_WORDS.findall(task[since : m.start()]))
            best = max(best, len(name & label) / len(name))
        since = m.end()
    return best


ACTION_KINDS = ("click", "fill", "select", "scroll down", "scroll up", "press Enter", "go back")
"""The kinds of action :func:`page_context` tells apart (a candidate of another kind: none)."""
PAGE_CONTEXT = len(ACTION_KINDS) + 1
"""Length of :func:`page_context`."""


def _kind(candidate: str) -> int | None:
    head = candidate.split("  #", 1)[0].strip()
    for i, kind in enumerate(ACTION_KINDS):
        if head == kind or head.startswith(kind + " "):
            return i
    return None


def kind_counts(candidates: Sequence[str]) -> list[int]:
    """For each candidate, how many of ``candidates`` are of its kind (:data:`ACTION_KINDS`;
    every other candidate is of one kind, "other")."""
    kinds = [_kind(c) for c in candidates]
    return [kinds.count(k) for k in kinds]


def page_context(task: str, candidates: Sequence[str]) -> list[tuple[float, ...]]:
    """For each of a decision's ``candidates``: its kind of action, one-hot over
    :data:`ACTION_KINDS`, then one number shared by the decision: 1 when some ``click``
    candidate's element is named whole by the task (its quoted name is in the task,
    case-insensitive: ``click [3]  # link "Episode 33"`` for *Open "Episode 33"*), else 0. What a
    page offers, not what one candidate is: it tells "the thing asked for is here" from "it is
    not yet", whatever its words."""
    low = task.lower()
    named = 0.0
    for c in candidates:
        if _kind(c) == 0:
            quoted = [q.lower() for q in _QUOTED.findall(c) if q.strip()]
            if quoted and all(q in low for q in quoted):
                named = 1.0
                break
    out = []
    for c in candidates:
        k = _kind(c)
        out.append((*(float(i == k) for i in range(len(ACTION_KINDS))), named))
    return out


def _nearness(task: str, value: str, name: str) -> float:
    tokens = _WORDS.findall(task)
    value_words, name_words = _WORDS.findall(value), set(_WORDS.findall(name))
    if not value_words or not name_words:
        return 0.0
    n = len(value_words)
    at = [i for i in range(len(tokens) - n + 1) if tokens[i : i + n] == value_words]
    names = [i for i, t in enumerate(tokens) if t in name_words]
    if not at or not names:
        return 0.0
    gap = min(max(0, j - (i + n - 1), i - j) for i in at for j in names) - 1
    return 1.0 / (1.0 + max(0, gap))


def sample_index(logits: torch.Tensor, regime: Regime, generator: torch.Generator | None) -> int:
    """Draw an index from 1-D ``logits`` under temperature and top-p (nucleus) sampling.

    The most likely index is always kept, so top-p never empties the distribution. The logits
    are shifted so their maximum is 0 before the temperature divides them, and a temperature
    below the logits' smallest normal number (which their dtype would round to 0) takes the
    most likely index: any temperature > 0 gives a distribution, a vanishing one tends to greedy,
    never to NaN. Raises ``StudentError`` when the largest logit is not finite (NaN weights)."""
    top = logits.max()
    if not torch.isfinite(top):
        raise StudentError(f"the policy's logits are not finite (largest: {float(top)})")
    if regime.temperature < torch.finfo(logits.dtype).tiny:
        return int(torch.argmax(logits).item())
    probs = torch.softmax((logits - top) / regime.temperature, dim=-1)
    if regime.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_p, dim=-1)
        keep_sorted = (cumulative - sorted_p) < regime.top_p
        keep_sorted[0] = True
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[order[keep_sorted]] = True
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return int(torch.multinomial(probs, 1, generator=generator).item())


class TinyStudent(nn.Module):
    """The default student backend (see module docstring)."""

    name = "tiny"
    supports_free_text = False

    def __init__(self, config: TinyConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or TinyConfig()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            e, h = config.embed_dim, config.hidden_dim
            self.embed = nn.EmbeddingBag(config.buckets, e, mode="mean", padding_idx=0)
            self.obs_encoder = nn.Sequential(nn.Linear(e, h), nn.Tanh())
            self.candidate_encoder = nn.Sequential(nn.Linear(e, h), nn.Tanh())
            self.scorer = nn.Sequential(nn.Linear(3 * h, h), nn.Tanh(), nn.Linear(h, 1))
            self.value_head = nn.Sequential(nn.Linear(h, h // 2), nn.Tanh(), nn.Linear(h // 2, 1))
            self.register_buffer(
                "summary_projection", torch.randn(h, config.summary_dim) / math.sqrt(h)
            )
            # Made last, so the layers above draw the same initial weights with or without it.
            self.pair_scorer: nn.Module | None = None
            if config.pair_features:
                width = (
                    PAIR_FEATURES
                    + int(config.named_values)
                    + PAGE_CONTEXT * int(config.page_context)
                )
                self.pair_scorer = nn.Sequential(nn.Linear(width, 16), nn.Tanh(), nn.Linear(16, 1))
                last = self.pair_scorer[2]
                nn.init.zeros_(last.weight)
                nn.init.zeros_(last.bias)

    # -- forward ------------------------------------------------------------------------------------
    def _bag(self, texts: Sequence[str]) -> torch.Tensor:
        flat: list[int] = []
        offsets: list[int] = []
        for t in texts:
            offsets.append(len(flat))
            flat.extend(_ids(t, self.config.buckets))
        return self.embed(
            torch.tensor(flat, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)
        )

    def forward(
        self, decisions: Sequence[Decision]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded candidate logits ``[N, C]`` (``-inf`` beyond each row's candidates), their mask,
        values ``[N]`` and observation encodings ``[N, H]``. Raises ``StudentError`` for a
        decision without candidates (this backend cannot write free text)."""
        if not decisions:
            raise StudentError("no decisions to act on")
        for d in decisions:
            if not d.candidates:
                raise StudentError(
                    "the tiny student chooses among candidate actions; this observation offers none"
                )
        h_obs = self.obs_encoder(self._bag([d.observation for d in decisions]))
        counts = [len(d.candidates) for d in decisions]
        h_cand = self.candidate_encoder(self._bag([c for d in decisions for c in d.candidates]))
        row = torch.repeat_interleave(torch.arange(len(decisions)), torch.tensor(counts))
        ho = h_obs[row]
        scores = self.scorer(torch.cat([ho, h_cand, ho * h_cand], dim=-1)).squeeze(-1)
        if self.pair_scorer is not None:
            tasks = [d.observation.split("\n", 1)[0] for d in decisions]
            named, paged = self.config.named_values, self.config.page_context
            rows: list[tuple[float, ...]] = []
            for t, d in zip(tasks, decisions, strict=True):
                page = page_context(t, d.candidates) if paged else [()] * len(d.candidates)
                rows += [
                    pair_features(t, c) + ((named_value(t, c),) if named else ()) + p
                    for c, p in zip(d.candidates, page, strict=True)
                ]
            feats = torch.tensor(rows, dtype=scores.dtype)
            scores = scores + self.config.pair_gain * self.pair_scorer(feats).squeeze(-1)
        if self.config.kind_balance:
            same = [n for d in decisions for n in kind_counts(d.candidates)]
            scores = scores - torch.log(torch.tensor(same, dtype=scores.dtype))
        width = max(counts)
        col = torch.cat([torch.arange(c) for c in counts])
        logits = torch.full((len(decisions), width), float("-inf"))
        logits = logits.index_put((row, col), scores)
        mask = torch.zeros((len(decisions), width), dtype=torch.bool).index_put(
            (row, col), torch.tensor(True)
        )
        values = self.value_head(h_obs).squeeze(-1)
        return logits, mask, values, h_obs

    # -- the backend interface ------------------------------------------------------------------------
    @torch.no_grad()
    def act(
        self,
        decisions: list[Decision],
        regime: Regime | Sequence[Regime],
        *,
        want_hidden: bool = False,
    ) -> list[ActOutput]:
        regimes = [regime] * len(decisions) if isinstance(regime, Regime) else list(regime)
        if len(regimes) != len(decisions):
            raise StudentError(f"{len(decisions)} decisions but {len(regimes)} regimes")
        logits, _mask, values, h_obs = self.forward(decisions)
        logp = torch.log_softmax(logits, dim=-1)
        out: list[ActOutput] = []
        summary = torch.tanh(h_obs @ self.summary_projection) if want_hidden else None
        for i, d in enumerate(decisions):
            n = len(d.candidates)
            row_logp = logp[i, :n]
            gen = torch.Generator().manual_seed(d.seed) if d.seed is not None else None
            idx = sample_index(logits[i, :n], regimes[i], gen)
            probs = row_logp.exp()
            entropy = float(
                -torch.where(probs > 0, probs * row_logp, torch.zeros_like(probs)).sum()
            )
            top1, margin = confidence(row_logp)
            out.append(
                ActOutput(
                    action=d.candidates[idx],
                    action_index=idx,
                    logprob=float(row_logp[idx]),
                    entropy=entropy,
                    value=float(values[i]),
                    hidden=[float(x) for x in summary[i]] if summary is not None else [],
                    top1_prob=top1,
                    margin=margin,
                )
            )
        return out

    def evaluate(self, decisions: list[Decision], actions: list[int | str]) -> Evaluation:
        if len(decisions) != len(actions):
            raise StudentError(f"{len(decisions)} decisions but {len(actions)} actions")
        index = []
        for d, a in zip(decisions, actions, strict=True):
            index.append(candidate_index(d, a))
        logits, mask, values, _ = self.forward(decisions)
        logp_all = torch.log_softmax(logits, dim=-1)
        chosen = logp_all.gather(1, torch.tensor(index).unsqueeze(1))
        safe = torch.where(mask, logp_all, torch.zeros_like(logp_all))
        entropy = -torch.where(safe.exp() > 0, safe.exp() * safe, torch.zeros_like(safe)).sum(-1)
        rows = [logp_all[i, : len(d.candidates)] for i, d in enumerate(decisions)]
        return Evaluation(
            logprobs=chosen,
            mask=torch.ones_like(chosen, dtype=torch.bool),
            entropy=entropy,
            values=values,
            candidate_logprobs=rows,
        )

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save(
            {
                "backend": self.name,
                "config": dataclasses.asdict(self.config),
                "state": self.state_dict(),
            },
            buf,
        )
        return buf.getvalue()

    @classmethod
    def from_payload(cls, payload: dict) -> TinyStudent:
        # A checkpoint from before pair_features was made without them.
        model = cls(TinyConfig(**{"pair_features": False, **payload["config"]}))
        model.load_state_dict(payload["state"])
        return model
