"""Closed intervals [lo, hi] of numbers and their arithmetic."""


class __tpl_cls__:
    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        if lo > hi:
            raise ValueError("empty interval")
        self.lo = lo
        self.hi = hi

    def __eq__(self, other):
        return isinstance(other, __tpl_cls__) and (self.lo, self.hi) == (other.lo, other.hi)

    def __repr__(self):
        return "__tpl_cls__(%r, %r)" % (self.lo, self.hi)

    def length(self):
        return self.hi - self.lo

    def contains(self, x):
        return self.lo <= x <= self.hi

    def overlaps(self, other):
        return self.lo <= other.hi and other.lo <= self.hi

    def intersection(self, other):
        if not self.overlaps(other):
            return None
        return __tpl_cls__(max(self.lo, other.lo), min(self.hi, other.hi))

    def hull(self, other):
        return __tpl_cls__(min(self.lo, other.lo), max(self.hi, other.hi))

    def __add__(self, other):
        return __tpl_cls__(self.lo + other.lo, self.hi + other.hi)

    def __sub__(self, other):
        return __tpl_cls__(self.lo - other.hi, self.hi - other.lo)

    def __mul__(self, other):
        products = [self.lo * other.lo, self.lo * other.hi, self.hi * other.lo, self.hi * other.hi]
        return __tpl_cls__(min(products), max(products))

    def widen(self, margin=__tpl_margin__):
        return __tpl_cls__(self.lo - margin, self.hi + margin)


def __tpl_merge__(intervals, gap=0):
    """Merge intervals at most ``gap`` apart; the result is sorted by ``lo``."""
    result = []
    for iv in sorted(intervals, key=lambda i: (i.lo, i.hi)):
        if result and iv.lo - result[-1].hi <= gap:
            last = result[-1]
            result[-1] = __tpl_cls__(last.lo, max(last.hi, iv.hi))
        else:
            result.append(iv)
    return result


def total_length(intervals):
    return sum(iv.length() for iv in __tpl_merge__(intervals))
