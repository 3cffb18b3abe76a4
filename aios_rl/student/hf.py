"""``hf``: any local Hugging Face causal language model as the student.

A short prompt template turns an observation (and its candidate list) into text. With candidates,
the model scores each one by the log-likelihood of its tokens after the prompt (closed by the
end-of-sequence token: an action is a complete string) and samples among them under the regime;
without candidates it writes a free-text action token by token. Either way the reported log-prob
is the sum of the action's token log-probs under the raw model, and ``evaluate`` returns exactly
those tokens' log-probs as ``[N, T]``. A linear value head (trained on detached features, so the critic
never moves the language model) and a fixed seeded projection (the hidden-state summary for RAIL)
read the last hidden state of the prompt. Optional LoRA through
``peft``; otherwise the whole model trains.

``transformers`` (and ``peft``) are imported only when a model is built, so the tiny backend never
needs them. Nothing here downloads: models come from a local directory, objects in memory, or
checkpoint bytes.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
)
from .tiny import sample_index

__all__ = ["Completion", "HFConfig", "HFStudent"]

PAYLOAD_FORMAT = 1


@dataclass(frozen=True)
class Completion:
    """One completion as sampled (:meth:`HFStudent.complete`)."""

    token_ids: list[int]
    """The sampled tokens (ending with end-of-sequence when the turn ended there)."""
    token_logprobs: list[float]
    """Each token's log-prob under the raw policy (temperature 1, no top-p)."""
    text: str
    """The tokens decoded, special tokens skipped, cut before the first stop string."""
    finish_reason: str
    """``stop`` (end of turn or a stop string) or ``length`` (``max_tokens``)."""
    top_logprobs: list[list[tuple[int, float]]]
    """Per token, the most likely ``(token id, log-prob)`` alternatives when asked for."""
    token_entropies: list[float] = field(default_factory=list)
    """Per token, the entropy (nats) of the raw next-token distribution it was drawn from."""


@dataclass(frozen=True)
class HFConfig:
    """How the hf student prompts, decodes, trains and is rebuilt."""

    model_path: str | None = None
    """Local model directory the weights came from (``None`` for a model built in memory). LoRA
    checkpoints of a model from a directory hold only the adapter and reload the base from here."""
    prompt_template: str = "Observation:\n{observation}\n{candidates}Action:"
    """The prompt; ``{observation}`` and ``{candidates}`` appear exactly once each."""
    candidates_header: str = "Candidates:\n"
    """Opens the candidate block (left out, like the block, when there are no candidates)."""
    candidate_line: str = "- {candidate}\n"
    """One line of the candidate block."""
    action_prefix: str = " "
    """Put between the prompt and the action's text (both when scoring and when writing)."""
    chat: bool = False
    """Prompt through the tokenizer's chat template: ``system_prompt`` as the system message,
    the filled ``prompt_template`` as the user's, and the action as the assistant's reply (ended
    by the tokenizer's end-of-sequence token, the end of the turn in an instruct model's
    template)."""
    system_prompt: str = (
        "You are an agent acting in an environment. Reply with exactly one action and nothing "
        "else: when candidates are listed, one of them, copied exactly."
    )
    """The system message of a ``chat`` prompt."""
    max_prompt_tokens: int = 1024
    """Prompt length cap; a longer observation keeps its head and tail tokens."""
    max_new_tokens: int = 64
    """Length cap of a free-text action."""
    greedy_temperature: float = 0.05
    """Regimes at or below this temperature take the most likely candidate or token."""
    forward_batch: int = 64
    """Sequences per forward pass (a larger request runs in chunks)."""
    micro_batch_size: int = 4
    """Decisions per forward and backward pass of a trainer step (the trainer's
    ``micro_batch_size`` 0 takes this): gradients accumulate over the step's minibatch."""
    share_prompt: bool = True
    """Score a decision's candidates over one pass of its prompt (its KV cache repeated for each
    candidate) instead of one pass of prompt and candidate per candidate: the same log-probs
    (within float error), the prompt's cost paid once."""
    lora_rank: int = 0
    """LoRA rank through ``peft``; 0 (or ``peft`` missing) trains the full model."""
    lora_alpha: float = 16.0
    """LoRA scaling numerator."""
    lora_dropout: float = 0.0
    """LoRA dropout (the policy runs without dropout, so keep 0 for exact PPO ratios)."""
    lora_targets: tuple[str, ...] = ()
    """Module names LoRA adapts; empty: ``peft``'s default for the architecture."""
    summary_dim: int = 8
    """Length of the hidden-state summary given to RAIL."""
    dtype: str = "float32"
    """Torch dtype of the model's weights (log-probs are always computed in float32)."""
    seed: int = 0
    """Seeds the value head, the summary projection and the LoRA initialisation."""
    device: str = "auto"
    """Where the language model runs: ``auto`` (CUDA when torch sees a GPU, else CPU), ``cpu``,
    ``cuda``, ``cuda:1`` ... The small heads, sampling and the losses stay on the CPU (each
    pass brings its logits and last hidden state back)."""

    def __post_init__(self) -> None:
        t = self.prompt_template
        if t.count("{observation}") != 1 or t.count("{candidates}") != 1:
            raise StudentError(
                "prompt_template must contain {observation} and {candidates} exactly once each"
            )
        if "{candidate}" not in self.candidate_line:
            raise StudentError("candidate_line must contain {candidate}")
        if self.max_prompt_tokens < 1 or self.max_new_tokens < 1 or self.forward_batch < 1:
            raise StudentError("max_prompt_tokens, max_new_tokens and forward_batch must be >= 1")
        if self.micro_batch_size < 1:
            raise StudentError("micro_batch_size must be >= 1")
        if self.lora_rank < 0 or self.summary_dim < 1:
            raise StudentError("lora_rank must be >= 0 and summary_dim >= 1")
        if not isinstance(getattr(torch, self.dtype, None), torch.dtype):
            raise StudentError(f"dtype {self.dtype!r} is not a torch dtype")
        if self.chat and "{observation}" in self.system_prompt:
            raise StudentError("system_prompt is fixed text; the observation goes in the template")


# -- optional imports, translated once ----------------------------------------------------------------


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise StudentError(
            "the hf student needs transformers; install it with `pip install aios-rl[hf]`"
        ) from exc
    return transformers


def _peft() -> Any | None:
    try:
        import peft
    except ImportError:
        return None
    return peft


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass
class _Scored:
    """Teacher-forced pass over ``S`` prompt + action sequences."""

    token_logp: torch.Tensor
    """``[S, T]`` log-prob of each action token (left-aligned, 0 beyond the mask)."""
    mask: torch.Tensor
    """``[S, T]`` which entries are action tokens."""
    token_entropy: torch.Tensor
    """``[S, T]`` entropy of the next-token distribution at each action token."""
    prompt_hidden: torch.Tensor
    """``[S, H]`` last hidden state at the prompt's last token (float32)."""


def _scored(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor
) -> _Scored:
    """``logits[s, t]`` predict ``targets[s, t]`` (float32, on the CPU): their log-probs and
    entropies, zeroed beyond ``mask``."""
    logp_all = torch.log_softmax(logits, dim=-1)
    token_logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros(())
    return _Scored(
        token_logp=torch.where(mask, token_logp, zero),
        mask=mask,
        token_entropy=torch.where(mask, entropy, zero),
        prompt_hidden=hidden,
    )


class HFStudent(nn.Module):
    """A Hugging Face causal LM as a student backend (see module docstring).

    Build it from objects with ``HFStudent(model, tokenizer, config)``, from a local directory with
    ``HFStudent.from_pretrained(path)``, or from checkpoint bytes through ``load_student``. The
    model always runs without dropout (PPO ratios must compare like with like)."""

    name = "hf"
    supports_free_text = True

    def __init__(self, model: Any, tokenizer: Any, config: HFConfig | None = None) -> None:
        super().__init__()
        config = config or HFConfig()
        _transformers()
        if tokenizer.eos_token_id is None:
            raise StudentError(
                "the tokenizer has no end-of-sequence token; set one (tokenizer.eos_token) "
                "so actions can end"
            )
        self.tokenizer = tokenizer
        self._frames: dict[tuple[str, str], tuple[str, str]] = {}
        self.eos_id = int(tokenizer.eos_token_id)
        self.pad_id = int(
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        )
        self.bos_id = int(tokenizer.bos_token_id) if tokenizer.bos_token_id is not None else None
        self.max_positions = _max_positions(model.config)
        # transformers renamed the KV-cache argument from ``past_key_values`` to ``cache``.
        self._cache_arg = (
            "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        )
        self._model_config_json = model.config.to_json_string(use_diff=False)
        self._tokenizer_files = _tokenizer_files(tokenizer)
        self.device = _device(config.device)
        model = model.to(device=self.device, dtype=getattr(torch, config.dtype))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            if config.lora_rank > 0:
                peft = _peft()
                if peft is None:
                    warnings.warn(
                        "peft is not installed: lora_rank is ignored and the full model trains",
                        stacklevel=2,
                    )
                    config = dataclasses.replace(config, lora_rank=0)
                else:
                    model = peft.get_peft_model(
                        model,
                        peft.LoraConfig(
                            r=config.lora_rank,
                            lora_alpha=config.lora_alpha,
                            lora_dropout=config.lora_dropout,
                            target_modules=list(config.lora_targets) or None,
                            task_type="CAUSAL_LM",
                        ),
                    )
            hidden = getattr(model.config, "hidden_size", None) or int(
                model.get_input_embeddings().weight.shape[1]
            )
            self.value_head = nn.Linear(hidden, 1)
            self.register_buffer("summary_projection", torch.randn(hidden, config.summary_dim))
        self.config = config
        self.lm = model
        self.eval()

    @classmethod
    def from_pretrained(cls, path: str | Path, config: HFConfig | None = None) -> HFStudent:
        """A student from a local model directory (never the network). Raises ``StudentError``
        when the directory is missing or holds no loadable causal LM and tokenizer."""
        path = Path(path).expanduser().resolve()
        config = dataclasses.replace(config or HFConfig(), model_path=str(path))
        model = _load_base(str(path), config.dtype)
        try:
            tokenizer = _transformers().AutoTokenizer.from_pretrained(
                str(path), local_files_only=True
            )
        except Exception as exc:  # transformers raises many types for a bad directory
            raise StudentError(f"no tokenizer loads from {path}: {exc}") from exc
        return cls(model, tokenizer, config)

    # -- text into token ids --------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _prompt_ids(self, d: Decision) -> list[int]:
        """Token ids of the prompt; the observation is cut to its head and tail when the prompt
        would pass ``max_prompt_tokens`` or leave too few of the model's positions for the
        longest candidate (or ``max_new_tokens``). Depends on the decision only, so acting and
        evaluating see the same prompt. A decision's own ``prompt_ids`` are the prompt as they
        are (never cut: the action was written after exactly those); ``StudentError`` when they
        leave no room for the action in the model's positions."""
        c = self.config
        reserve = (
            max(len(self._action_ids(x)) for x in d.candidates)
            if d.candidates
            else c.max_new_tokens + 1
        )
        if d.prompt_ids:
            given = list(self._checked_ids(d.prompt_ids, "prompt"))
            if self.max_positions is not None and len(given) + reserve > self.max_positions:
                raise StudentError(
                    f"a given prompt of {len(given)} tokens leaves fewer than {reserve} of the "
                    f"model's {self.max_positions} positions for the action"
                )
            return given
        block = ""
        if d.candidates:
            block = c.candidates_header + "".join(
                c.candidate_line.replace("{candidate}", x) for x in d.candidates
            )
        before, after = c.prompt_template.split("{observation}")
        before, after = before.replace("{candidates}", block), after.replace("{candidates}", block)
        if c.chat:
            before, after = self._chat_frame(before, after)
            head = self._encode(before)  # the template opens the text itself
        else:
            head = ([self.bos_id] if self.bos_id is not None else []) + self._encode(before)
        tail = self._encode(after)
        budget = c.max_prompt_tokens
        if self.max_positions is not None:
            budget = min(budget, self.max_positions - reserve)
        room = budget - len(head) - len(tail)
        if room < 1:
            raise StudentError(
                f"the prompt template and candidate list take {len(head) + len(tail)} tokens, "
                f"leaving no room for the observation within {budget} prompt tokens"
            )
        obs = self._encode(d.observation)
        if len(obs) > room:
            keep = room // 2
            obs = obs[:keep] + obs[len(obs) - (room - keep) :]
        ids = head + obs + tail
        if not ids:
            raise StudentError("the prompt encodes to no tokens; give the template some text")
        return ids

    def _chat_frame(self, before: str, after: str) -> tuple[str, str]:
        """The chat template's text around the observation, for a user message that reads
        ``before + observation + after`` (the observation is cut to fit between the two)."""
        cached = self._frames.get((before, after))
        if cached is not None:
            return cached
        marker = "\x00observation\x00"
        try:
            text = self.tokenizer.apply_chat_template(
                [
                    {"role": "system", "content": self.config.system_prompt},
                    {"role": "user", "content": before + marker + after},
                ],
                tokenize=False,
                add_generation_prompt=True,
            )
        except Exception as exc:  # no template, or a template that raises: say which
            raise StudentError(f"the tokenizer's chat template does not render: {exc}") from exc
        if not isinstance(text, str) or text.count(marker) != 1:
            raise StudentError("the tokenizer's chat template does not keep the user's message")
        head, tail = text.split(marker)
        self._frames[(before, after)] = (head, tail)
        return head, tail

    def _action_ids(self, text: str) -> list[int]:
        """An action's tokens: its text after the prefix, then end-of-sequence."""
        return [*self._encode(self.config.action_prefix + text), self.eos_id]

    def _sequences(
        self,
        decisions: Sequence[Decision],
        prompt_ids: list[list[int]],
        texts: dict[int, str | tuple[int, ...]],
    ) -> tuple[list[list[int]], list[list[int]], list[range]]:
        """Prompt and action ids of every sequence to score: each candidate of a decision with
        candidates, the one text (or token ids, taken as they are) in ``texts`` otherwise; and
        each decision's rows."""
        prompts, actions, rows = [], [], []
        for i, d in enumerate(decisions):
            prompt = prompt_ids[i]
            options = d.candidates if d.candidates else (texts[i],)
            start = len(prompts)
            for option in options:
                ids = list(option) if isinstance(option, tuple) else self._action_ids(option)
                if self.max_positions is not None and len(prompt) + len(ids) > self.max_positions:
                    raise StudentError(
                        f"prompt and action take {len(prompt) + len(ids)} tokens, more than the "
                        f"model's {self.max_positions} positions"
                    )
                prompts.append(prompt)
                actions.append(ids)
            rows.append(range(start, len(prompts)))
        return prompts, actions, rows

    # -- forward --------------------------------------------------------------------------------------
    def _left_padded(self, seqs: Sequence[list[int]]) -> tuple[torch.Tensor, ...]:
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            attention[i, width - len(s) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), attention.to(self.device), positions.to(self.device)

    def _forward_left(self, seqs: Sequence[list[int]], keep: int) -> tuple[Any, int]:
        """One pass over ``seqs`` left-padded, keeping the last ``keep`` logits and the hidden
        states; with the padded width."""
        ids, attention, positions = self._left_padded(seqs)
        out = self.lm(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            output_hidden_states=True,
            use_cache=False,
            logits_to_keep=keep,
        )
        if out.hidden_states is None:
            raise StudentError("the model returns no hidden states, so it has no value estimate")
        return out, ids.shape[1]

    def _score_chunk(self, prompts: list[list[int]], actions: list[list[int]]) -> _Scored:
        lengths = torch.tensor([len(a) for a in actions])
        T = int(lengths.max())
        out, width = self._forward_left(
            [p + a for p, a in zip(prompts, actions, strict=True)], T + 1
        )
        # Sequences are right-aligned: kept logit j sits at position width - T - 1 + j, and action
        # token t of a row with A tokens is predicted by kept logit T - A + t.
        targets, mask = self._targets(actions)
        where = torch.where(mask, (T - lengths).unsqueeze(1) + torch.arange(T), 0)
        logits = out.logits[:, -(T + 1) :].float().cpu()
        picked = logits.gather(1, where.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        rows = torch.arange(len(actions))
        last = out.hidden_states[-1].cpu()[rows, width - lengths - 1].float()
        return _scored(picked, targets, mask, last)

    def _score_shared(self, prompt: list[int], actions: list[list[int]]) -> _Scored:
        """:meth:`_score_chunk` for several actions after one prompt: the prompt runs once and
        its KV cache is repeated for the actions (right-padded, so padding follows every real
        token and changes none)."""
        k = len(actions)
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        out = self.lm(input_ids=ids, use_cache=True, output_hidden_states=True, logits_to_keep=1)
        if out.hidden_states is None:
            raise StudentError("the model returns no hidden states, so it has no value estimate")
        cache = out["cache"] if self._cache_arg == "cache" else out["past_key_values"]
        cache.batch_repeat_interleave(k)
        padded, mask = self._targets(actions)
        T = padded.shape[1]
        P = len(prompt)
        t = torch.arange(T)
        attention = torch.cat([torch.ones((k, P), dtype=torch.long), mask.long()], 1)
        rest = self.lm(
            input_ids=padded.to(self.device),
            attention_mask=attention.to(self.device),
            position_ids=(P + t).unsqueeze(0).expand(k, T).to(self.device),
            use_cache=True,
            **{self._cache_arg: cache},
        )
        # Action token 0 is predicted by the prompt's last logit, token j by the action's j-1.
        first = out.logits[:, -1:].float().cpu().expand(k, 1, -1)
        logits = torch.cat([first, rest.logits[:, : T - 1].float().cpu()], 1)
        last = out.hidden_states[-1][0, -1].float().cpu().unsqueeze(0).expand(k, -1)
        return _scored(logits, padded, mask, last)

    def _targets(self, actions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The actions' token ids right-padded (with the pad id) to the longest, and the mask of
        real tokens."""
        lengths = torch.tensor([len(a) for a in actions])
        T = int(lengths.max())
        padded = torch.full((len(actions), T), self.pad_id, dtype=torch.long)
        for i, a in enumerate(actions):
            padded[i, : len(a)] = torch.tensor(a, dtype=torch.long)
        return padded, torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)

    def _score(self, prompts: list[list[int]], actions: list[list[int]]) -> _Scored:
        """Teacher-forced log-probs of ``actions`` after ``prompts``: runs of rows with one
        prompt (a decision's candidates) over a shared prompt pass (``share_prompt``), the rest
        in chunks of ``forward_batch`` sequences."""
        step = self.config.forward_batch
        parts: list[_Scored] = []
        single: list[int] = []

        def flush() -> None:
            for i in range(0, len(single), step):
                rows = single[i : i + step]
                parts.append(
                    self._score_chunk([prompts[r] for r in rows], [actions[r] for r in rows])
                )
            single.clear()

        i = 0
        while i < len(prompts):
            j = i + 1
            while j < len(prompts) and prompts[j] == prompts[i]:
                j += 1
            if self.config.share_prompt and j - i > 1:
                flush()
                for k in range(i, j, step):
                    parts.append(self._score_shared(prompts[i], actions[k : min(j, k + step)]))
            else:
                single.extend(range(i, j))
            i = j
        flush()
        if len(parts) == 1:
            return parts[0]
        T = max(p.mask.shape[1] for p in parts)

        def cat(name: str) -> torch.Tensor:
            return torch.cat(
                [nn.functional.pad(getattr(p, name), (0, T - p.mask.shape[1])) for p in parts]
            )

        return _Scored(
            token_logp=cat("token_logp"),
            mask=cat("mask"),
            token_entropy=cat("token_entropy"),
            prompt_hidden=torch.cat([p.prompt_hidden for p in parts]),
        )

    def _pick(self, logits: torch.Tensor, regime: Regime, generator: torch.Generator | None) -> int:
        if regime.temperature <= self.config.greedy_temperature:
            return int(torch.argmax(logits).item())
        return sample_index(logits, regime, generator)

    @torch.no_grad()
    def _generate(
        self,
        prompts: list[list[int]],
        regimes: list[Regime],
        generators: list[torch.Generator | None],
    ) -> list[str]:
        """Free-text actions, one per prompt, written token by token (batched, KV-cached) until
        end-of-sequence or ``max_new_tokens``."""
        steps = self.config.max_new_tokens
        if self.max_positions is not None:
            steps = min(steps, self.max_positions - max(len(p) for p in prompts) - 1)
        ids, attention, positions = self._left_padded(prompts)
        out = self.lm(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        next_position = positions[:, -1:] + 1
        written: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        for step in range(steps):
            logits = out.logits[:, -1].float().cpu()
            tokens = []
            for i in range(len(prompts)):
                token = self.pad_id
                if not done[i]:
                    token = self._pick(logits[i], regimes[i], generators[i])
                    if token == self.eos_id:
                        done[i] = True
                    else:
                        written[i].append(token)
                tokens.append(token)
            if all(done) or step == steps - 1:
                break
            attention = torch.cat(
                [attention, torch.ones((len(prompts), 1), dtype=torch.long, device=self.device)], 1
            )
            cache = out["cache"] if self._cache_arg == "cache" else out["past_key_values"]
            out = self.lm(
                input_ids=torch.tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(1),
                attention_mask=attention,
                position_ids=next_position,
                use_cache=True,
                **{self._cache_arg: cache},
            )
            next_position = next_position + 1
        texts = [self.tokenizer.decode(w, skip_special_tokens=True) for w in written]
        return [t.removeprefix(self.config.action_prefix) for t in texts]

    def _value(self, hidden: torch.Tensor) -> torch.Tensor:
        """The value head row by row (a matrix product may round each row differently by its
        place in the batch; the same prompt must get the same value wherever it stands)."""
        return (hidden * self.value_head.weight[0]).sum(-1) + self.value_head.bias[0]

    def _summary(self, hidden: torch.Tensor) -> torch.Tensor:
        unit = hidden / hidden.norm(dim=-1, keepdim=True).clamp(min=1e-6)
        return torch.tanh(unit @ self.summary_projection)

    def _eval_mode(self) -> None:
        if self.training:
            self.eval()

    # -- the backend interface ------------------------------------------------------------------------
    @torch.no_grad()
    def act(
        self,
        decisions: list[Decision],
        regime: Regime | Sequence[Regime],
        *,
        want_hidden: bool = False,
    ) -> list[ActOutput]:
        if not decisions:
            raise StudentError("no decisions to act on")
        regimes = [regime] * len(decisions) if isinstance(regime, Regime) else list(regime)
        if len(regimes) != len(decisions):
            raise StudentError(f"{len(decisions)} decisions but {len(regimes)} regimes")
        self._eval_mode()
        generators = [
            torch.Generator().manual_seed(d.seed) if d.seed is not None else None for d in decisions
        ]
        prompt_ids = [self._prompt_ids(d) for d in decisions]
        free = [i for i, d in enumerate(decisions) if not d.candidates]
        texts: dict[int, str] = {}
        if free:
            written = self._generate(
                [prompt_ids[i] for i in free],
                [regimes[i] for i in free],
                [generators[i] for i in free],
            )
            texts = dict(zip(free, written, strict=True))
        prompts, actions, rows = self._sequences(decisions, prompt_ids, texts)
        scored = self._score(prompts, actions)
        seq_logp = scored.token_logp.sum(-1)
        first = torch.tensor([r.start for r in rows])
        values = self._value(scored.prompt_hidden[first])
        summary = self._summary(scored.prompt_hidden[first]) if want_hidden else None
        out: list[ActOutput] = []
        for i, d in enumerate(decisions):
            r = rows[i]
            written_ids: list[int] = []
            written_logps: list[float] = []
            if d.candidates:
                scores = seq_logp[r.start : r.stop]
                index: int | None = self._pick(scores, regimes[i], generators[i])
                row = r.start + index
                cand_logp = torch.log_softmax(scores, dim=-1)
                entropy = float(-(cand_logp.exp() * cand_logp).sum())
                top1, margin = confidence(cand_logp)
                action = d.candidates[index]
            else:
                index, row, action = None, r.start, texts[i]
                entropy = float(scored.token_entropy[row].sum() / scored.mask[row].sum())
                top1, margin = 0.0, 0.0
                written_ids = actions[row]
                written_logps = [float(x) for x in scored.token_logp[row][scored.mask[row]]]
            tokens = scored.token_entropy[row][scored.mask[row]]
            out.append(
                ActOutput(
                    action=action,
                    action_index=index,
                    logprob=float(seq_logp[row]),
                    entropy=entropy,
                    token_entropies=[float(x) for x in tokens],
                    value=float(values[i]),
                    hidden=[float(x) for x in summary[i]] if summary is not None else [],
                    top1_prob=top1,
                    margin=margin,
                    token_ids=list(written_ids),
                    token_logprobs=written_logps,
                )
            )
        return out

    def evaluate(
        self, decisions: list[Decision], actions: Sequence[int | str | tuple[int, ...]]
    ) -> Evaluation:
        """Per-token log-probs ``[N, T]`` of the given actions (a candidate index or text for a
        decision with candidates; the free text, or the exact token ids a sampler wrote as a
        tuple, otherwise), with gradients; their sum over the
        mask equals ``act``'s ``logprob`` for the same weights. ``entropy`` is over candidates
        (mean per-token entropy for free text); ``candidate_logprobs`` are the log-softmax of the
        candidates' summed scores (empty for free text). Raises ``StudentError`` for an action
        that does not fit its decision."""
        if not decisions:
            raise StudentError("no decisions to evaluate")
        if len(decisions) != len(actions):
            raise StudentError(f"{len(decisions)} decisions but {len(actions)} actions")
        self._eval_mode()
        chosen, texts = self._resolve(decisions, actions)
        prompts, action_ids, rows = self._sequences(
            decisions, [self._prompt_ids(d) for d in decisions], texts
        )
        scored = self._score(prompts, action_ids)
        return self._evaluation(decisions, scored, rows, chosen)

    @property
    def micro_batch_size(self) -> int:
        """Decisions per forward and backward pass in a trainer step (its gradients accumulated
        over the step's minibatch): a decision's candidates after a long prompt hold about a
        gigabyte of activations through the backward pass on this model size."""
        return self.config.micro_batch_size

    def action_token_counts(
        self, decisions: list[Decision], actions: Sequence[int | str | tuple[int, ...]]
    ) -> list[int]:
        """Tokens of each given action, as :meth:`evaluate` scores it (no forward pass): the
        trainer's denominator when it takes a step's minibatch in parts."""
        chosen, texts = self._resolve(decisions, actions)
        _, action_ids, rows = self._sequences(decisions, [[] for _ in decisions], texts)
        return [len(action_ids[r.start + k]) for r, k in zip(rows, chosen, strict=True)]

    def _resolve(
        self, decisions: list[Decision], actions: Sequence[int | str | tuple[int, ...]]
    ) -> tuple[list[int], dict[int, str | tuple[int, ...]]]:
        """Each action's row among its decision's sequences, and the free texts (or token
        ids) of decisions without candidates."""
        chosen: list[int] = []
        texts: dict[int, str | tuple[int, ...]] = {}
        for i, (d, a) in enumerate(zip(decisions, actions, strict=True)):
            if not d.candidates:
                if isinstance(a, tuple | list) and a:
                    texts[i] = self._checked_ids(a)
                    chosen.append(0)
                    continue
                if not isinstance(a, str):
                    raise StudentError(
                        f"action {a!r} is an index, but this observation offers no candidates "
                        "(give the free-text action or its token ids)"
                    )
                texts[i] = a
                chosen.append(0)
                continue
            chosen.append(candidate_index(d, a))
        return chosen, texts

    def _evaluation(
        self, decisions: list[Decision], scored: _Scored, rows: list[range], chosen: list[int]
    ) -> Evaluation:
        seq_logp = scored.token_logp.sum(-1)
        first = torch.tensor([r.start for r in rows])
        picked = torch.tensor([r.start + k for r, k in zip(rows, chosen, strict=True)])
        entropy, candidate_logprobs = [], []
        for i, d in enumerate(decisions):
            r = rows[i]
            if d.candidates:
                cand_logp = torch.log_softmax(seq_logp[r.start : r.stop], dim=-1)
                candidate_logprobs.append(cand_logp)
                entropy.append(-(cand_logp.exp() * cand_logp).sum())
            else:
                candidate_logprobs.append(torch.zeros(0))
                entropy.append(scored.token_entropy[r.start].sum() / scored.mask[r.start].sum())
        return Evaluation(
            logprobs=scored.token_logp[picked],
            mask=scored.mask[picked],
            entropy=torch.stack(entropy),
            # The critic reads the policy's features but does not move them: a value loss through
            # a shared language model (and one clipped gradient norm) would drown the policy's.
            values=self._value(scored.prompt_hidden[first].detach()),
            candidate_logprobs=candidate_logprobs,
        )

    def _checked_ids(self, ids: Sequence[int], what: str = "action") -> tuple[int, ...]:
        vocab = int(self.lm.get_input_embeddings().weight.shape[0])
        out = tuple(int(t) for t in ids)
        if not all(0 <= t < vocab for t in out):
            bad = [t for t in out if not 0 <= t < vocab][:8]
            raise StudentError(f"{what} token ids outside the vocabulary of {vocab}: {bad}")
        return out

    def chat_prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> list[int]:
        """An agent's conversation (OpenAI-shaped messages) through the tokenizer's chat
        template, ready for the assistant's turn: the prompt's token ids. ``tools`` are given
        to the template as they are (a template without tools ignores them). Raises
        ``StudentError`` when the template does not render or leaves no room to answer."""
        try:
            ids = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tools=list(tools) or None,
                tokenize=True,
                add_generation_prompt=True,
            )
        except Exception as exc:  # no template, or one that raises: say which
            raise StudentError(f"the tokenizer's chat template does not render: {exc}") from exc
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding
            ids = ids["input_ids"]
        out = list(self._checked_ids(list(ids), "prompt"))
        if self.max_positions is not None and len(out) >= self.max_positions:
            raise StudentError(
                f"the conversation takes {len(out)} tokens, the model has "
                f"{self.max_positions} positions: no room to answer"
            )
        return out

    @torch.no_grad()
    def complete(
        self,
        prompt_ids: Sequence[int],
        regime: Regime,
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        seed: int | None = None,
        top_logprobs: int = 0,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """Write one completion after ``prompt_ids`` (KV-cached, token by token) until the end
        of the turn, a stop string, ``max_tokens`` or the model's last position, keeping each
        sampled token's log-prob under the raw policy (what the trainer recomputes) and, when
        asked, its ``top_logprobs`` most likely alternatives. ``on_text`` gets the text written
        so far after each token that did not end it."""
        if max_tokens < 1:
            raise StudentError(f"max_tokens must be >= 1, got {max_tokens}")
        prompt = list(self._checked_ids(prompt_ids, "prompt"))
        if not prompt:
            raise StudentError("an empty prompt")
        steps = max_tokens
        if self.max_positions is not None:
            steps = min(steps, self.max_positions - len(prompt))
        if steps < 1:
            raise StudentError(f"a prompt of {len(prompt)} tokens leaves no room to answer")
        self._eval_mode()
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        out = self.lm(input_ids=ids, use_cache=True, logits_to_keep=1)
        written: list[int] = []
        logps: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        entropies: list[float] = []
        text, finish = "", "length"
        for step in range(steps):
            logits = out.logits[0, -1].float().cpu()
            token = self._pick(logits, regime, generator)
            raw = torch.log_softmax(logits, dim=-1)
            written.append(token)
            logps.append(float(raw[token]))
            entropies.append(float(-(raw.exp() * raw).nan_to_num().sum()))
            if top_logprobs > 0:
                best = torch.topk(raw, min(top_logprobs, raw.shape[0]))
                tops.append(
                    [(int(i), float(v)) for v, i in zip(best.values, best.indices, strict=True)]
                )
            if token == self.eos_id:
                finish = "stop"
                break
            text = self.tokenizer.decode(written, skip_special_tokens=True)
            cut = min((text.find(x) for x in stop if x and x in text), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
                break
            if on_text is not None:
                on_text(text)
            if step == steps - 1:
                break
            cache = out["cache"] if self._cache_arg == "cache" else out["past_key_values"]
            out = self.lm(
                input_ids=torch.tensor([[token]], dtype=torch.long, device=self.device),
                position_ids=torch.tensor([[len(prompt) + step]], device=self.device),
                use_cache=True,
                **{self._cache_arg: cache},
            )
        if finish == "stop" and written[-1] == self.eos_id:
            text = self.tokenizer.decode(written, skip_special_tokens=True)
        return Completion(
            token_ids=written,
            token_logprobs=logps,
            text=text,
            finish_reason=finish,
            top_logprobs=tops,
            token_entropies=entropies,
        )

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each token id decoded on its own (special tokens as their text), in one batch."""
        return list(self.tokenizer.batch_decode([[int(t)] for t in ids])) if ids else []

    def prompt_ids(self, decision: Decision) -> list[int]:
        """The prompt's token ids for ``decision`` (what an inference engine is given, so it
        sees exactly the prompt this model acts and trains on)."""
        return self._prompt_ids(decision)

    @torch.no_grad()
    def prompt_state(self, decisions: list[Decision]) -> tuple[list[float], list[list[float]]]:
        """The value estimate and hidden-state summary of each decision's prompt, from one
        forward pass over the prompts alone (what an engine-served act lacks)."""
        self._eval_mode()
        prompts = [self._prompt_ids(d) for d in decisions]
        values: list[float] = []
        summaries: list[list[float]] = []
        step = self.config.forward_batch
        for k in range(0, len(prompts), step):
            out, _ = self._forward_left(prompts[k : k + step], 1)
            last = out.hidden_states[-1][:, -1].float().cpu()
            values.extend(float(v) for v in self._value(last))
            summaries.extend([float(x) for x in row] for row in self._summary(last))
        return values, summaries

    # -- bytes ----------------------------------------------------------------------------------------
    @property
    def uses_lora(self) -> bool:
        """Whether only LoRA adapters (and the value head) train."""
        return self.config.lora_rank > 0

    def to_bytes(self) -> bytes:
        """The checkpoint: configuration, model config, tokenizer files, value head and weights
        (the full state dict; for LoRA on a model from a directory, only the adapter)."""
        lm_state = adapter_state = None
        if self.uses_lora and self.config.model_path is not None:
            adapter_state = _peft().get_peft_model_state_dict(self.lm)
        else:
            lm_state = self.lm.state_dict()
        config = dataclasses.asdict(self.config)
        config["lora_targets"] = list(self.config.lora_targets)
        buf = io.BytesIO()
        torch.save(
            {
                "backend": self.name,
                "format": PAYLOAD_FORMAT,
                "config": config,
                "model_config": self._model_config_json,
                "tokenizer_files": dict(sorted(self._tokenizer_files.items())),
                "head": {
                    "value_head.weight": self.value_head.weight.detach(),
                    "value_head.bias": self.value_head.bias.detach(),
                    "summary_projection": self.summary_projection,
                },
                "lm_state": lm_state,
                "adapter_state": adapter_state,
                **self.payload_extra(),
            },
            buf,
        )
        return buf.getvalue()

    def payload_extra(self) -> dict[str, Any]:
        """More entries for the checkpoint (a subclass's)."""
        return {}

    @classmethod
    def from_payload(cls, payload: dict) -> HFStudent:
        """Rebuild from a loaded ``to_bytes`` payload, with no network. Raises ``StudentError``
        when the payload is malformed or its base model directory (LoRA) is missing."""
        try:
            if payload.get("format") != PAYLOAD_FORMAT:
                raise StudentError(f"hf checkpoint format {payload.get('format')!r} is unknown")
            settings = dict(payload["config"])
            settings["lora_targets"] = tuple(settings.get("lora_targets", ()))
            config = HFConfig(**settings)
            files = dict(payload["tokenizer_files"])
            model_config_json = str(payload["model_config"])
            head = payload["head"]
            lm_state, adapter_state = payload["lm_state"], payload["adapter_state"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise StudentError(f"hf checkpoint payload is malformed: {exc!r}") from exc
        tf = _transformers()
        with tempfile.TemporaryDirectory(prefix="aios-hf-") as tmp:
            for name, data in files.items():
                if Path(name).name != name:
                    raise StudentError(f"hf checkpoint names a tokenizer file outside: {name!r}")
                (Path(tmp) / name).write_bytes(data)
            try:
                tokenizer = tf.AutoTokenizer.from_pretrained(tmp, local_files_only=True)
                (Path(tmp) / "config.json").write_text(model_config_json)
                model_config = tf.AutoConfig.from_pretrained(tmp, local_files_only=True)
            except Exception as exc:  # transformers raises many types for bad files
                raise StudentError(
                    f"hf checkpoint's tokenizer or config does not load: {exc}"
                ) from exc
        if config.lora_rank > 0 and _peft() is None:
            raise StudentError("hf checkpoint was trained with LoRA; install peft to load it")
        if adapter_state is not None:
            if config.model_path is None:
                raise StudentError("hf checkpoint holds only an adapter but names no base model")
            base = _load_base(config.model_path, config.dtype)
        else:
            with torch.random.fork_rng(devices=[]):
                base = tf.AutoModelForCausalLM.from_config(model_config)
        student = cls(base, tokenizer, config)
        student._tokenizer_files = files
        student._model_config_json = model_config_json
        try:
            if adapter_state is not None:
                result = _peft().set_peft_model_state_dict(student.lm, adapter_state)
                if getattr(result, "unexpected_keys", None):
                    raise StudentError(
                        f"hf adapter does not fit the base model: {result.unexpected_keys[:3]}"
                    )
            else:
                student.lm.load_state_dict(lm_state)
            student.value_head.load_state_dict(
                {"weight": head["value_head.weight"], "bias": head["value_head.bias"]}
            )
            student.summary_projection.copy_(head["summary_projection"])
        except (RuntimeError, KeyError, TypeError) as exc:
            raise StudentError(f"hf checkpoint weights do not fit the model: {exc}") from exc
        student.eval()
        return student


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise StudentError(f"device {name!r} is not a torch device") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise StudentError(f"device {name!r} asked for, but torch sees no CUDA device")
    return device


def _load_base(path: str, dtype: str) -> Any:
    if not Path(path).is_dir():
        raise StudentError(
            f"model directory {path} does not exist (the hf student never downloads)"
        )
    try:
        with torch.random.fork_rng(devices=[]):
            return _transformers().AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, dtype=getattr(torch, dtype)
            )
    except Exception as exc:  # transformers raises many types for a bad directory
        raise StudentError(f"no causal language model loads from {path}: {exc}") from exc


def _tokenizer_files(tokenizer: Any) -> dict[str, bytes]:
    """The files ``save_pretrained`` writes for ``tokenizer``, by name."""
    with tempfile.TemporaryDirectory(prefix="aios-hf-tok-") as tmp:
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
