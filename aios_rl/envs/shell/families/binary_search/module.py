"""Binary search over sorted sequences and monotone predicates."""


def __tpl_left__(items, x, lo=0, hi=None):
    """The first index whose item is not less than ``x``."""
    if hi is None:
        hi = len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def __tpl_right__(items, x, lo=0, hi=None):
    """The first index whose item is greater than ``x``."""
    if hi is None:
        hi = len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def __tpl_index_of__(items, x):
    i = __tpl_left__(items, x)
    if i < len(items) and items[i] == x:
        return i
    return -1


def count_between(items, low, high):
    """How many items lie in [low, high]."""
    if low > high:
        return 0
    return __tpl_right__(items, high) - __tpl_left__(items, low)


def first_true(lo, hi, pred):
    """The smallest n in [lo, hi) with pred(n), or hi if there is none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def isqrt(n):
    if n < 0:
        raise ValueError("negative")
    return first_true(0, n + 2, lambda r: r * r > n) - 1


def nearest(items, x, default=__tpl_default__):
    if not items:
        return default
    i = __tpl_left__(items, x)
    if i == 0:
        return items[0]
    if i == len(items):
        return items[-1]
    before, after = items[i - 1], items[i]
    return before if x - before <= after - x else after
