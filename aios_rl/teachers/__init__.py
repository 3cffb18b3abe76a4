"""What every teacher backend shares: the prompt that asks for the fixed JSON verdict, the
normaliser that reads that verdict back out of each backend's own output format, and keeping raw
output for diagnosis.

Backends (``services/teacher_*``) use all of it; the gateway only the text clipping (the digest
it builds is clipped the way :func:`shown_as` recognises) since its replies are already
``TeacherSignal`` messages.
"""

from ._evidence import keep_raw
from ._normalize import (
    FORMATS,
    RAW_INLINE_CHARS,
    Envelope,
    OutputFormat,
    Verdict,
    VerdictError,
    extract,
    find_verdict,
    normalize,
    parse_verdict,
    unusable,
)
from ._prompt import VERDICT_INSTRUCTIONS, render_episode, render_prompt
from ._text import ELLIPSIS, clip_head, clip_middle, shown_as

__all__ = [
    "ELLIPSIS",
    "FORMATS",
    "RAW_INLINE_CHARS",
    "VERDICT_INSTRUCTIONS",
    "Envelope",
    "OutputFormat",
    "Verdict",
    "VerdictError",
    "clip_head",
    "clip_middle",
    "extract",
    "find_verdict",
    "keep_raw",
    "normalize",
    "parse_verdict",
    "render_episode",
    "render_prompt",
    "shown_as",
    "unusable",
]
