"""Greedy word wrapping and friends for plain text."""

DEFAULT_WIDTH = __tpl_width__


def words(text):
    return text.split()


def __tpl_wrap__(text, width=DEFAULT_WIDTH):
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in words(text):
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not word:
            continue
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width=DEFAULT_WIDTH):
    return "\n".join(__tpl_wrap__(text, width))


def justify(line, width):
    parts = line.split()
    if len(parts) < 2:
        return line.ljust(width)
    gaps = len(parts) - 1
    spaces = width - sum(len(p) for p in parts)
    base, extra = divmod(spaces, gaps)
    out = ""
    for i, part in enumerate(parts[:-1]):
        out += part + " " * (base + (1 if i < extra else 0))
    return out + parts[-1]


def __tpl_truncate__(text, limit, suffix="__tpl_suffix__"):
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(suffix))] + suffix


def indent(text, prefix="__tpl_prefix__"):
    return "\n".join(prefix + line if line.strip() else line for line in text.split("\n"))
