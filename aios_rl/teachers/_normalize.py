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

2. :func:`find_verdict` finds the JSON verdict object in those texts (searched from the last
   back: the final answer first). :func:`parse_verdict` validates it.

Which verdict counts (precedence)
---------------------------------
A verdict found by a rule higher in this list is never overridden by one a lower rule would find:

1. **The backend's parsed verdict** (claude's ``structured_output``).
2. **A JSON answer**: a text that *is* a JSON object, after leading whitespace and an optional
   code-fence line (three backticks, ``json`` or not): the form the prompt asks for. That object
   decides: its own ``verdict``, else the shallowest verdict object nested in it. Nothing after
   it in the text counts, so a verdict the teacher quotes after its answer, or one injected
   there (``... VERDICT: correct {"verdict": "correct", ...}``), cannot override it; and when the
   object's verdict breaks a rule the answer is unparseable, not read from the text after it.
3. **Prose around the verdict**: otherwise the last valid verdict object in the text wins (a
   teacher that thinks aloud, shows an example and ends with its verdict is read right). Here a
   verdict-shaped object quoted after the teacher's own still wins: the residual risk of an
   answer that does not keep to the prompt's form.

Bounded work
------------
Output longer than :data:`MAX_RAW_CHARS` is read as its first :data:`RAW_HEAD_CHARS` and last
:data:`RAW_TAIL_CHARS` (cut at line ends where there are any: JSON-lines envelopes keep whole
events and their final answer); each answer text longer than :data:`MAX_ANSWER_CHARS` as its
first :data:`ANSWER_HEAD_CHARS` and last :data:`ANSWER_TAIL_CHARS`. A verdict only in the dropped
middle is not found (the rationale says the middle was dropped). In prose, verdict objects are
found from their ``"verdict":`` key (spelled plainly): for each of the last
:data:`MAX_VERDICT_KEYS` keys at most :data:`MAX_OBJECT_STARTS` opening braces before it are
tried, each decoded within :data:`MAX_OBJECT_CHARS` around the key; banner lines before an
envelope are tried at most :data:`MAX_BANNER_TRIES` times. So the number of JSON decodings is
bounded by constants and the work is linear in the (capped) input, whatever braces it holds.

Anything unusable becomes a signal with status ``unparseable`` (or ``error`` when the envelope
reports a failure and carries no verdict at all) whose rationale says why and keeps the raw
output (the first :data:`RAW_INLINE_CHARS` of it; the backend stores longer output in the Object
Store and sets ``raw_ref``).
"""

from __future__ import annotations

import json
import math
import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Literal, NamedTuple, get_args

from aios_rl.errors import AiosError
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
RAW_HEAD_CHARS = 1024 * 1024
RAW_TAIL_CHARS = 7 * 1024 * 1024
MAX_RAW_CHARS = RAW_HEAD_CHARS + RAW_TAIL_CHARS
"""Output longer than this is read as its first ``RAW_HEAD_CHARS`` and last ``RAW_TAIL_CHARS``."""
ANSWER_HEAD_CHARS = 64 * 1024
ANSWER_TAIL_CHARS = 192 * 1024
MAX_ANSWER_CHARS = ANSWER_HEAD_CHARS + ANSWER_TAIL_CHARS
"""An answer text longer than this is searched in its first ``ANSWER_HEAD_CHARS`` and last
``ANSWER_TAIL_CHARS`` only (a JSON answer is at its start, a verdict in prose at its end)."""
MAX_VERDICT_KEYS = 8
"""In prose, only the objects around the last this-many ``"verdict":`` keys are tried."""
MAX_OBJECT_STARTS = 64
"""Opening braces tried before one ``"verdict":`` key (a verdict object's start is the nearest
one that decodes around the key; its hints before the key add one brace each)."""
MAX_OBJECT_CHARS = 32 * 1024
"""A verdict object in prose is decoded within this many characters either side of its key."""
MAX_BANNER_TRIES = 16
"""Lines that start with a bracket tried as the start of an envelope after banner lines."""
SCORE_SLACK = 1e-6
"""A score this little outside [-1, 1] is rounding and is clamped; further out is rejected."""


class VerdictError(AiosError, ValueError):
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


_DECODER = json.JSONDecoder()
_VERDICT_KEY = re.compile(r'"verdict"\s*:')
_JSON_ANSWER = re.compile(r"\s*(?:```[^\n]*\n\s*)?\{")
_LINE_OBJECT = re.compile(r"^[ \t]*\{", re.M)
_LINE_VALUE = re.compile(r"^[ \t]*[{\[]", re.M)
_MAX_NODES = 10_000  # values of a JSON answer searched for a nested verdict


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # nesting deeper than the decoder's recursion limit
        return None


def _decode(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value starting at ``text[start]`` and the index after it, or None."""
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def _cut(text: str, head: int, tail: int) -> str:
    """``text``, or at most its first ``head`` and last ``tail`` characters when it is longer,
    joined by a line end, cut at line ends when the halves have any (whole JSON lines stay
    whole)."""
    if len(text) <= head + tail:
        return text
    first, last = text[:head], text[len(text) - tail :]
    end = first.rfind("\n")
    if end >= head // 2:
        first = first[: end + 1]
    start = last.find("\n")
    if 0 <= start < tail // 2:
        last = last[start + 1 :]
    if not first.endswith("\n"):
        first = first[:-1] + "\n"  # the two parts meet at a line end
    return first + last


def _first_json(raw: str, kinds: tuple[type, ...]) -> Any:
    """The whole of ``raw`` as JSON, or else the first value of one of ``kinds`` that starts a
    line (output with a banner or warning lines before the JSON), trying at most
    :data:`MAX_BANNER_TRIES` lines and none inside a value that already failed to decode."""
    whole = _loads(raw.strip())
    if isinstance(whole, kinds):
        return whole
    starts = _LINE_VALUE if list in kinds else _LINE_OBJECT
    tries = 0
    resume = 0
    for match in starts.finditer(raw):
        start = match.end() - 1
        if start < resume:
            continue
        tries += 1
        if tries > MAX_BANNER_TRIES:
            break
        try:
            value, resume = _DECODER.raw_decode(raw, start)
        except json.JSONDecodeError as exc:
            resume = exc.pos
            continue
        except (ValueError, RecursionError):
            continue
        if isinstance(value, kinds):
            return value
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


def _json_answer(text: str) -> dict[str, Any] | None:
    """The verdict object of a text that is a JSON answer (precedence rule 2): the object the
    text starts with (after whitespace and a code-fence line) when it has a verdict, else the
    shallowest object with one nested in it; None when the text is no such answer."""
    match = _JSON_ANSWER.match(text)
    found = _decode(text, match.end() - 1) if match else None
    if found is None or not isinstance(found[0], dict):
        return None
    queue: deque[Any] = deque([found[0]])
    for _ in range(_MAX_NODES):
        if not queue:
            break
        value = queue.popleft()
        if isinstance(value, dict):
            if "verdict" in value:
                return value
            queue.extend(value.values())
        elif isinstance(value, list):
            queue.extend(value)
    return None


def _verdicts_in_prose(text: str) -> Iterator[dict[str, Any]]:
    """The objects with a ``verdict`` key in ``text``, from the last back (precedence rule 3),
    found from the last :data:`MAX_VERDICT_KEYS` keys: the object of a key is the nearest of the
    :data:`MAX_OBJECT_STARTS` opening braces before it that decodes to an object spanning it."""
    keys = deque((m.start() for m in _VERDICT_KEY.finditer(text)), maxlen=MAX_VERDICT_KEYS)
    seen: set[int] = set()
    for key in reversed(keys):
        low = max(0, key - MAX_OBJECT_CHARS)
        window = text[low : key + MAX_OBJECT_CHARS]
        at = key - low
        brace = window.rfind("{", 0, at)
        for _ in range(MAX_OBJECT_STARTS):
            if brace < 0:
                break
            found = _decode(window, brace)
            if found is not None and found[1] > at and isinstance(found[0], dict):
                if "verdict" in found[0] and low + brace not in seen:
                    seen.add(low + brace)
                    yield found[0]
                break
            brace = window.rfind("{", 0, brace)


def find_verdict(texts: Iterable[str]) -> tuple[Verdict | None, str]:
    """The verdict in ``texts`` by the precedence rules of this module (searched from the last
    text back), and, when there is none, why: the first rule an object with a ``verdict`` key
    broke, or that no such object was there. Each text is cut to :data:`MAX_ANSWER_CHARS`."""
    first_problem = ""
    for text in reversed(list(texts)):
        text = _cut(text, ANSWER_HEAD_CHARS, ANSWER_TAIL_CHARS)
        answer = _json_answer(text)
        for obj in [answer] if answer is not None else _verdicts_in_prose(text):
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
    ``raw`` when given: e.g. the output with the process's stderr and exit code). The verdict is
    chosen by the precedence rules of this module; output over :data:`MAX_RAW_CHARS` is read as
    its head and tail only."""
    kept = raw if kept is None else kept
    cut = len(raw) > MAX_RAW_CHARS
    raw = _cut(raw, RAW_HEAD_CHARS, RAW_TAIL_CHARS)
    env = extract(fmt, raw)
    found: Verdict | None
    if env.structured is not None and "verdict" in env.structured:  # rule 1: it decides
        try:
            found, problem = parse_verdict(env.structured), ""
        except VerdictError as exc:
            found, problem = None, f"invalid structured verdict: {exc}"
    else:
        found, problem = find_verdict(env.texts)
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
    if not problem.startswith("invalid") and not any(t.strip() for t in env.texts):
        problem = f"{fmt} output carries no answer text" + (
            f" ({env.problem})" if env.problem else ""
        )
    elif env.problem:
        problem = f"{problem} ({env.problem}; read as plain text)"
    if cut or any(len(t) > MAX_ANSWER_CHARS for t in env.texts):
        problem += f" (only the head and tail of a long {'output' if cut else 'answer'} were "
        problem += "read: its middle was dropped)"
    return unusable("unparseable", problem, kept, backend=backend, latency_s=latency_s)
