"""Roman numerals from 1 to __tpl_maxvalue__."""

NUMERALS = [
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]
VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
MAX_VALUE = __tpl_maxvalue__


def __tpl_to_roman__(n, lower=__tpl_lower__):
    if not isinstance(n, int) or n < 1 or n > MAX_VALUE:
        raise ValueError("out of range")
    out = []
    for value, symbol in NUMERALS:
        while n >= value:
            out.append(symbol)
            n -= value
    text = "".join(out)
    return text.lower() if lower else text


def __tpl_from_roman__(text):
    if not text:
        raise ValueError("empty numeral")
    s = text.upper()
    total = 0
    for i, ch in enumerate(s):
        if ch not in VALUES:
            raise ValueError("bad symbol")
        value = VALUES[ch]
        if i + 1 < len(s) and VALUES.get(s[i + 1], 0) > value:
            total -= value
        else:
            total += value
    if total < 1 or total > MAX_VALUE or __tpl_to_roman__(total, lower=False) != s:
        raise ValueError("not a canonical numeral")
    return total


def is_roman(text):
    try:
        __tpl_from_roman__(text)
    except ValueError:
        return False
    return True


def add_roman(a, b):
    return __tpl_to_roman__(__tpl_from_roman__(a) + __tpl_from_roman__(b))
