"""A tokenizer for a small expression language.

Tokens are (kind, text, position) tuples; kinds: number, name, keyword, string, op."""

KEYWORDS = frozenset(__tpl_keywords__)
TWO_CHAR_OPS = ("==", "!=", "<=", ">=", "->")
ONE_CHAR_OPS = "+-*/()=<>,"
COMMENT = "__tpl_comment__"
QUOTE = '__tpl_quote__'


class TokenizeError(Exception):
    """Raised on a character no token can start with, or an unterminated string."""


def __tpl_tokenize__(source):
    tokens = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch.isspace():
            i += 1
        elif ch == COMMENT:
            end = source.find("\n", i)
            i = len(source) if end < 0 else end
        elif ch.isdigit():
            start = i
            while i < len(source) and (source[i].isdigit() or source[i] == "."):
                i += 1
            tokens.append(("number", source[start:i], start))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(source) and (source[i].isalnum() or source[i] == "_"):
                i += 1
            word = source[start:i]
            tokens.append(("keyword" if word in KEYWORDS else "name", word, start))
        elif ch == QUOTE:
            end = source.find(QUOTE, i + 1)
            if end < 0:
                raise TokenizeError("unterminated string")
            tokens.append(("string", source[i + 1 : end], i))
            i = end + 1
        elif source[i : i + 2] in TWO_CHAR_OPS:
            tokens.append(("op", source[i : i + 2], i))
            i += 2
        elif ch in ONE_CHAR_OPS:
            tokens.append(("op", ch, i))
            i += 1
        else:
            raise TokenizeError("unexpected character")
    return tokens


def kinds(tokens):
    return [kind for kind, _, _ in tokens]


def __tpl_untokenize__(tokens):
    parts = []
    for kind, text, _ in tokens:
        parts.append(QUOTE + text + QUOTE if kind == "string" else text)
    return " ".join(parts)


def count_kind(tokens, kind="__tpl_countkind__"):
    return sum(1 for k, _, _ in tokens if k == kind)
