"""Descriptive statistics over lists of numbers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of no data")
    return sum(xs) / len(xs)


def __tpl_median__(xs):
    if not xs:
        raise ValueError("median of no data")
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def mode(xs):
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    best = max(counts.values())
    return min(x for x, c in counts.items() if c == best)


def __tpl_variance__(xs, sample=__tpl_sample__):
    n = len(xs)
    if n < 2:
        raise ValueError("variance needs at least two points")
    m = mean(xs)
    ss = sum((x - m) ** 2 for x in xs)
    return ss / (n - 1) if sample else ss / n


def percentile(xs, p):
    """Nearest-rank percentile, p in [0, 100]."""
    if not 0 <= p <= 100:
        raise ValueError("p out of range")
    s = sorted(xs)
    rank = max(1, -(-p * len(s) // 100))
    return s[rank - 1]


def moving_average(xs, window=__tpl_window__):
    if window < 1:
        raise ValueError("window must be positive")
    return [sum(xs[i : i + window]) / window for i in range(len(xs) - window + 1)]


def __tpl_zscores__(xs):
    m = mean(xs)
    sd = __tpl_variance__(xs, sample=False) ** 0.5
    return [(x - m) / sd for x in xs]
