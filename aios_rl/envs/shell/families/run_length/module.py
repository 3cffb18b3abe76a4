"""Run-length encoding of text without digits: "aaab" <-> "3a1b"."""

MAX_RUN = __tpl_maxrun__


def __tpl_encode__(text):
    if not text:
        return ""
    out = []
    run_char = text[0]
    run_len = 1
    for ch in text[1:]:
        if ch == run_char and run_len < MAX_RUN:
            run_len += 1
        else:
            out.append(str(run_len) + run_char)
            run_char = ch
            run_len = 1
    out.append(str(run_len) + run_char)
    return "".join(out)


def __tpl_decode__(data):
    out = []
    count = 0
    seen_digit = False
    for ch in data:
        if ch.isdigit():
            count = count * 10 + int(ch)
            seen_digit = True
        else:
            if not seen_digit:
                raise ValueError("missing count")
            out.append(ch * count)
            count = 0
            seen_digit = False
    if seen_digit:
        raise ValueError("dangling count")
    return "".join(out)


def runs(text):
    """[(char, length), ...] with no length limit."""
    result = []
    for ch in text:
        if result and result[-1][0] == ch:
            result[-1] = (ch, result[-1][1] + 1)
        else:
            result.append((ch, 1))
    return result


def longest_run(text):
    best = ("", 0)
    for ch, n in runs(text):
        if n > best[1]:
            best = (ch, n)
    return best


def ratio(text):
    if not text:
        return 1.0
    return len(__tpl_encode__(text)) / len(text)
