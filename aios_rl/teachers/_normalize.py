"""Whatever a teacher backend printed, turned into one :class:`~contracts.TeacherSignal`. Pure.

Two layers:

1. :func:`extract` reads a backend's own output format (its *envelope*) and returns the answer
   texts it carries, in order, plus any error the envelope reports:

   - ``claude``: ``claude -p --output-format json`` prints one JSON object whose ``result`` is
     the answer text (``is_error`` / ``subtype: error_*`` on failure); with ``--verbose`` it
     prints a JSON array of messages ending in that ``result`` object. With ``--json-schema``
     the answer may also come already parsed as ``structured_output``.
   - ``codex``: ``codex exec --json`` prints JSON event lines; the answer is the text of the
     last ``item.completed`` whose item is an ``agent_message``; ``turn.failed`` and ``error``
     events carry failures. The older ``{"msg": {"type": "agent_message", ...}}`` lines are read
     too.
   - ``gemini``: ``gemini -p --output-format json`` prints one (indented) JSON object with
     ``response`` and ``stats``, or ``error: {type, message, code}``.
   - ``opencode``: ``opencode run --format json`` prints JSON event lines; ``text`` events carry
     ``part.text``, ``error`` events ``error.data.message`` (or ``error.name``).
   - ``openai``: a ``/v1/chat/completions`` response body: ``choices[0].message.content``.
   - ``text``: the output is the answer text itself.

   Lines that are not JSON (a banner, a warning) are skipped; an envelope that does not parse at
   all is read as plain text, so a verdict printed bare is still found.

2. :func:`find_verdict` looks for the JSON verdict object in those texts: every ``{...}`` that
   decodes (so prose around it and code fences do not matter), the last valid one winning.
   :func:`parse_verdict` validates it.

Anything unusable becomes a signal with status ``unparseable`` (or ``error`` when the envelope
reports a failure and carries no verdict at all) whose rationale says why and keeps the raw
output (the first :data:`RAW_INLINE_CHARS` of it; the backend stores longer output in the Object
Store and sets ``raw_ref``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from typing import Any, Literal, NamedTuple, get_args

from contracts import TeacherHint, TeacherSignal, TeacherVerdict

__all__ = [
    "FORMATS",
    "RAW_INLINE_CHARS",
    "Envelope",
    "OutputFormat",
    "Verdict",
    "VerdictError",
    "extract",
    "find_verdict",
    "normalize",
    "parse_verdict",
    "unusable",
]

OutputFormat = Literal["claude", "codex", "gemini", "opencode", "openai", "text"]
FORMATS: tuple[str, ...] = get_args(OutputFormat)

VERDICTS: frozenset[str] = frozenset(get_args(TeacherVerdict))
_VERDICT_ALIASES = {"partial": "partially_correct", "partially": "partially_correct"}

RAW_INLINE_CHARS = 1500
"""Raw output up to this long is kept whole in the rationale of an unusable signal."""
MAX_RATIONALE_CHARS = 2000
MAX_HINTS = 64
MAX_SCAN_CHARS = 200_000
"""Only the last this-many characters of an answer are searched for the verdict."""
SCORE_SLACK = 1e-6
"""A score this little outside [-1, 1] is rounding and is clamped; further out is rejected."""


class VerdictError(ValueError):
    """A JSON object that claims to be a verdict but breaks its form (says which rule)."""


class Envelope(NamedTuple):
    """What a backend's output format carried."""

    texts: list[str]
    """Answer texts, in the order the backend produced them (the final answer last)."""
    error: str = ""
    """A failure the envelope itself reports (``""``: none)."""
    structured: dict[str, Any] | None = None
    """A verdict the backend already parsed (claude's ``structured_output``)."""
    problem: str = ""
    """Why the envelope could not be read as its format (it was then read as plain text)."""


# -- reading JSON out of text ---------------------------------------------------------------------


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_values(text: str, opening: str = "{[") -> Iterator[Any]:
    """Every JSON value that starts at an opening bracket of ``text`` and decodes, in order of
    its start (nested values too)."""
    decoder = json.JSONDecoder()
    starts = sorted(i for i, ch in enumerate(text) if ch in opening)
    for i in starts:
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        yield value


def _first_json(raw: str, kinds: tuple[type, ...]) -> Any:
    """The whole of ``raw`` as JSON, or else the first value of one of ``kinds`` that starts a
    line (output with a banner or warning lines before the JSON)."""
    whole = _loads(raw.strip())
    if isinstance(whole, kinds):
        return whole
    decoder = json.JSONDecoder()
    offset = 0
    for line in raw.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                value, _ = decoder.raw_decode(raw, offset + len(line) - len(stripped))
            except ValueError:
                value = None
            if isinstance(value, kinds):
                return value
        offset += len(line)
    return None


def _json_lines(raw: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines output (other lines skipped)."""
    out = []
    for line in raw.splitlines():
        line = line.strip()
        if line.startswith("{"):
            value = _loads(line)
            if isinstance(value, dict):
                out.append(value)
    return out


def _message(err: Any) -> str:
    """A readable message from whatever error value an envelope carries."""
    if isinstance(err, str):
        return err
    if isinstance(err, dict):
        data = err.get("data")
        for value in (
            data.get("message") if isinstance(data, dict) else None,
            err.get("message"),
            err.get("name"),
            err.get("type"),
        ):
            if isinstance(value, str) and value:
                return value
    return json.dumps(err, ensure_ascii=False)[:500]


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- envelopes ---------------------------------------------------------------------------------------


def _claude(raw: str) -> Envelope:
    data = _first_json(raw, (dict, list))
    texts: list[str] = []
    if isinstance(data, list):  # --verbose: every message, the result object last
        for msg in data:
            if isinstance(msg, dict) and msg.get("type") == "assistant":
                content = _obj(msg.get("message")).get("content")
                texts += [
                    c["text"]
                    for c in (content if isinstance(content, list) else [])
                    if isinstance(c, dict) and c.get("type") == "text" and _str(c.get("text"))
                ]
        results = [m for m in data if isinstance(m, dict) and m.get("type") == "result"]
        if not results:
            if texts:
                return Envelope(texts)
            return Envelope([raw], problem="a JSON array without a result message")
        data = results[-1]
    if not isinstance(data, dict):
        return Envelope([raw], problem="not the claude JSON output (no JSON object)")
    result = _str(data.get("result")) or ""
    if result:
        texts.append(result)
    structured = data.get("structured_output")
    error = ""
    subtype = str(data.get("subtype") or "")
    if data.get("is_error") or subtype.startswith("error"):
        error = result or subtype or "is_error"
    elif "result" not in data and structured is None:
        return Envelope([raw], problem="a JSON object without result")
    return Envelope(texts, error, structured if isinstance(structured, dict) else None)


def _codex(raw: str) -> Envelope:
    texts: list[str] = []
    errors: list[str] = []
    events = _json_lines(raw)
    for ev in events:
        kind = ev.get("type")
        if kind == "item.completed":
            item = _obj(ev.get("item"))
            if item.get("type", item.get("item_type")) in ("agent_message", "assistant_message"):
                text = _str(item.get("text"))
                if text:
                    texts.append(text)
        elif kind == "turn.failed":
            errors.append(_message(ev.get("error")))
        elif kind == "error":
            errors.append(_message(ev.get("message", ev)))
        msg = ev.get("msg")  # the event lines of codex before its "thread/turn/item" events
        if isinstance(msg, dict):
            mtype = msg.get("type")
            if mtype == "agent_message" and _str(msg.get("message")):
                texts.append(msg["message"])
            elif mtype == "task_complete" and _str(msg.get("last_agent_message")):
                texts.append(msg["last_agent_message"])
            elif mtype in ("error", "stream_error"):
                errors.append(_message(msg.get("message", msg)))
    if not events:
        return Envelope([raw], problem="no JSON event lines")
    return Envelope(texts, "; ".join(errors))


def _gemini(raw: str) -> Envelope:
    data = _first_json(raw, (dict,))
    if not isinstance(data, dict):
        return Envelope([raw], problem="not the gemini JSON output (no JSON object)")
    if "response" not in data and "error" not in data:
        return Envelope([raw], problem="a JSON object without response or error")
    response = _str(data.get("response")) or ""
    error = _message(data["error"]) if data.get("error") else ""
    return Envelope([response] if response else [], error)


def _opencode(raw: str) -> Envelope:
    events = _json_lines(raw)
    if not events:
        return Envelope([raw], problem="no JSON event lines")
    parts: list[str] = []
    errors: list[str] = []
    for ev in events:
        kind = ev.get("type")
        if kind == "text":
            text = _str(_obj(ev.get("part")).get("text"))
            if text:
                parts.append(text)
        elif kind == "error":
            errors.append(_message(ev.get("error")))
    return Envelope(["\n".join(parts)] if parts else [], "; ".join(errors))


def _openai(raw: str) -> Envelope:
    data = _first_json(raw, (dict,))
    if not isinstance(data, dict):
        return Envelope([raw], problem="not a chat completion (no JSON object)")
    if data.get("error"):
        return Envelope([], _message(data["error"]))
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Envelope([raw], problem="a JSON object without choices")
    message = _obj(choices[0].get("message"))
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and _str(p.get("text"))
        )
    texts = [content] if isinstance(content, str) and content else []
    refusal = _str(message.get("refusal"))
    return Envelope(texts, f"refused: {refusal}" if refusal and not texts else "")


def extract(fmt: OutputFormat, raw: str) -> Envelope:
    """The answer texts and reported error in ``raw``, read as the output format ``fmt``.

    Raises ``ValueError`` for a format it does not know."""
    match fmt:
        case "claude":
            return _claude(raw)
        case "codex":
            return _codex(raw)
        case "gemini":
            return _gemini(raw)
        case "opencode":
            return _opencode(raw)
        case "openai":
            return _openai(raw)
        case "text":
            return Envelope([raw])
    raise ValueError(f"unknown teacher output format {fmt!r}; known: {', '.join(FORMATS)}")


# -- the verdict ---------------------------------------------------------------------------------------


class Verdict(NamedTuple):
    """A validated verdict."""

    verdict: TeacherVerdict
    score: float
    hints: list[TeacherHint]
    boundary: bool
    rationale: str


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise VerdictError(f"{what} is a boolean, not a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise VerdictError(f"{what} {value!r} is not a number") from None
    if not isinstance(value, int | float):
        raise VerdictError(f"{what} is {type(value).__name__}, not a number")
    if not math.isfinite(value):
        raise VerdictError(f"{what} {value!r} is not finite")
    return float(value)


def _hint(item: Any) -> TeacherHint | None:
    """One hint, or ``None`` for an entry that is not one (dropped, counted in the rationale)."""
    if not isinstance(item, dict):
        return None
    try:
        step = _number(item.get("step"), "step")
    except VerdictError:
        return None
    if step < 0 or step != int(step):
        return None
    better = item.get("better_action")
    if better is not None and not isinstance(better, str):
        return None
    note = item.get("note", "")
    return TeacherHint(
        step=int(step),
        better_action=(better.strip() or None) if better is not None else None,
        note=note[:500] if isinstance(note, str) else "",
    )


def parse_verdict(obj: dict[str, Any]) -> Verdict:
    """Validate a verdict object: ``verdict`` one of correct / partially_correct / incorrect /
    unsure (case, spaces and hyphens forgiven), ``score`` a finite number in [-1, 1] (clamped
    within :data:`SCORE_SLACK`), ``hints`` a list (entries that are not ``{step, better_action}``
    are dropped), ``boundary`` a boolean, ``rationale`` text.

    Raises ``VerdictError`` naming the first rule broken."""
    raw_verdict = obj.get("verdict")
    if not isinstance(raw_verdict, str):
        raise VerdictError(f"verdict is {raw_verdict!r}, not a string")
    verdict = raw_verdict.strip().lower().replace("-", "_").replace(" ", "_")
    verdict = _VERDICT_ALIASES.get(verdict, verdict)
    if verdict not in VERDICTS:
        raise VerdictError(f"unknown verdict {raw_verdict!r} (expected one of {sorted(VERDICTS)})")
    if "score" not in obj:
        raise VerdictError("no score")
    score = _number(obj["score"], "score")
    if abs(score) > 1 + SCORE_SLACK:
        raise VerdictError(f"score {score!r} is outside [-1, 1]")
    score = max(-1.0, min(1.0, score))
    raw_hints = obj.get("hints")
    if raw_hints is None:
        raw_hints = []
    if not isinstance(raw_hints, list):
        raise VerdictError(f"hints is {type(raw_hints).__name__}, not a list")
    hints = [h for h in map(_hint, raw_hints[:MAX_HINTS]) if h is not None]
    dropped = len(raw_hints) - len(hints)
    boundary = obj.get("boundary", False)
    if isinstance(boundary, str) and boundary.strip().lower() in ("true", "false"):
        boundary = boundary.strip().lower() == "true"
    if boundary is None:
        boundary = False
    if not isinstance(boundary, bool):
        raise VerdictError(f"boundary is {boundary!r}, not true or false")
    rationale = obj.get("rationale", "")
    if not isinstance(rationale, str):
        rationale = json.dumps(rationale, ensure_ascii=False)
    if dropped:
        rationale = f"{rationale} [{dropped} malformed or surplus hint(s) dropped]".strip()
    return Verdict(verdict, score, hints, boundary, rationale[:MAX_RATIONALE_CHARS])  # type: ignore[arg-type]


def find_verdict(texts: Iterable[str]) -> tuple[Verdict | None, str]:
    """The last valid verdict object in ``texts`` (searched from the last text back), and, when
    there is none, why: the first rule an object with a ``verdict`` key broke, or that no such
    object was there."""
    first_problem = ""
    for text in reversed(list(texts)):
        objects = [v for v in _json_values(text[-MAX_SCAN_CHARS:], "{") if isinstance(v, dict)]
        for obj in reversed(objects):
            if "verdict" not in obj:
                continue
            try:
                return parse_verdict(obj), ""
            except VerdictError as exc:
                first_problem = first_problem or f"invalid verdict: {exc}"
    return None, first_problem or "no JSON object with a verdict in the answer"


# -- the signal ----------------------------------------------------------------------------------------


def unusable(
    status: Literal["unparseable", "error", "timeout"],
    problem: str,
    raw: str,
    *,
    backend: str,
    latency_s: float = 0.0,
) -> TeacherSignal:
    """A signal that carries no judgement: why, and the raw output (its head when longer than
    :data:`RAW_INLINE_CHARS`; the caller keeps the whole of it and sets ``raw_ref``)."""
    if len(raw) > RAW_INLINE_CHARS:
        shown = f"{raw[:RAW_INLINE_CHARS]}\n…[{len(raw) - RAW_INLINE_CHARS} more chars]"
    else:
        shown = raw
    rationale = f"{status}: {problem}"
    if raw:
        rationale += f"\n--- raw output ---\n{shown}"
    return TeacherSignal(
        backend=backend, status=status, rationale=rationale, latency_s=max(0.0, latency_s)
    )


def normalize(
    fmt: OutputFormat,
    raw: str,
    *,
    backend: str,
    latency_s: float = 0.0,
    kept: str | None = None,
) -> TeacherSignal:
    """One signal from a backend's raw output: status ``ok`` with the verdict when one is found
    and valid; otherwise ``error`` (the envelope reports a failure and has no verdict at all) or
    ``unparseable``, with the reason and the raw output in the rationale (``kept`` instead of
    ``raw`` when given: e.g. the output with the process's stderr and exit code)."""
    kept = raw if kept is None else kept
    env = extract(fmt, raw)
    found: Verdict | None = None
    problem = ""
    if env.structured is not None and "verdict" in env.structured:
        try:
            found = parse_verdict(env.structured)
        except VerdictError as exc:
            problem = f"invalid structured verdict: {exc}"
    if found is None:
        found, text_problem = find_verdict(env.texts)
        if problem and not text_problem.startswith("invalid"):
            text_problem = problem
        problem = text_problem
    if found is not None:
        return TeacherSignal(
            backend=backend,
            status="ok",
            verdict=found.verdict,
            score=found.score,
            hints=found.hints,
            boundary=found.boundary,
            rationale=found.rationale,
            latency_s=max(0.0, latency_s),
        )
    if env.error and not problem.startswith("invalid"):
        return unusable(
            "error", f"{fmt} reported: {env.error}", kept, backend=backend, latency_s=latency_s
        )
    if not any(t.strip() for t in env.texts):
        problem = f"{fmt} output carries no answer text" + (
            f" ({env.problem})" if env.problem else ""
        )
    elif env.problem:
        problem = f"{problem} ({env.problem}; read as plain text)"
    return unusable("unparseable", problem, kept, backend=backend, latency_s=latency_s)
