"""Word counts and simple text statistics."""

STOPWORDS = frozenset(__tpl_stopwords__)
MIN_LENGTH = __tpl_minlen__


def __tpl_normalize__(word):
    return word.strip(".,;:!?\"'()").lower()


def __tpl_count__(text, skip_stopwords=True):
    counts = {}
    for raw in text.split():
        word = __tpl_normalize__(raw)
        if len(word) < MIN_LENGTH:
            continue
        if skip_stopwords and word in STOPWORDS:
            continue
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n=__tpl_topn__):
    counts = __tpl_count__(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:n]


def longest(text):
    best = ""
    for raw in text.split():
        word = __tpl_normalize__(raw)
        if len(word) > len(best) or (len(word) == len(best) and word < best):
            best = word
    return best


def capitalized_ratio(text):
    tokens = text.split()
    if not tokens:
        return 0.0
    caps = sum(1 for t in tokens if t[:1].isupper())
    return caps / len(tokens)
